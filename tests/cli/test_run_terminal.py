"""What a terminal shows during a real `evr1 run` (in a pseudo-terminal, as a user's shell gives it):
a status line for each stretch without a bar (Prefect's start, each stage), no Prefect INFO line and
no traceback of a failed stage (both kept in <run>/logs/prefect.log), one error line at the end; and
the run's phases in <run>/timings.json. The run fails at its first stage (every record of its data is
rejected), so it takes seconds: the Prefect start is the test's cost."""

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from evr1.tracking import progress

ROOT = Path(__file__).resolve().parents[2]
EVR1 = str(Path(sys.executable).parent / "evr1")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _in_a_terminal(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr on a pseudo-terminal; (exit code, what it showed)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    for name in ("EVR1_DEBUG", "PREFECT_API_URL"):  # Prefect's temporary server, no traceback asked for
        env.pop(name, None)
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last process holding the terminal has exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    text = b"".join(chunks).decode("utf-8", "replace")
    # what stays on the screen: each carriage-returned redraw replaced by its last version
    lines = [ANSI.sub("", line).split("\r")[-1] for line in text.replace("\r\n", "\n").split("\n")]
    return code, "\n".join(line for line in lines if line.strip())


def test_a_run_shows_status_lines_and_no_prefect_chatter(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "which colour?", "answer": "red"}\n')  # no problem_type: rejected
    code, screen = _in_a_terminal([EVR1, "run", str(ROOT / "conf" / "tiny.yaml"), f"run.root={tmp_path}",
                                   "run.name=term", "data.synth=null", f"data.train_files=[{data}]"], cwd=tmp_path)
    assert code == 1, screen
    lines = screen.splitlines()
    spans = json.loads((tmp_path / "term" / "timings.json").read_text())["spans"]
    # a status line for the Prefect start while it runs, and after it the line with its duration when it
    # ran silent for QUIET_S or more (since Prefect's server starts early, it often takes about that long)
    prefect = "Prefect: starting its temporary API server, creating the flow run"
    assert any(ln.endswith(f"{prefect} …") for ln in lines), screen
    done = any(re.match(rf"✓ {prefect} \d+\.\d s$", ln) for ln in lines)
    assert done == (next(s for s in spans if s["name"] == prefect)["seconds"] >= progress.QUIET_S), screen
    # and a mark for the stage that failed
    assert any(re.match(r"✗ ingest failed after \d+\.\d s$", ln) for ln in lines), screen
    # no Prefect INFO line, no telemetry notice, no traceback: the error in one line at the end
    assert not re.search(r"\| (INFO|ERROR) +\|", screen), screen
    assert "Traceback" not in screen and "anonymous usage data" not in screen, screen
    assert lines[-1].startswith("evr1: error: dataset split 'train': all 1 records") and len(lines) <= 8, screen
    # everything is still in the log file, and the phases in timings.json
    log = (tmp_path / "term" / "logs" / "prefect.log").read_text()
    assert "Beginning flow run" in log and "Traceback" in log and "EmptyDatasetError" in log
    names = [s["name"] for s in spans]
    assert names[:2] == ["evr1 start-up (imports, config and preflight checks)", "flow process start-up (imports, config)"]
    assert "Prefect: starting its temporary API server, creating the flow run" in names and "ingest" in names
    assert next(s for s in spans if s["name"] == "ingest")["detail"] == {"failed": True}

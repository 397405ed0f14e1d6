"""`evr1 plan` says what would fit when the config's own setup does not: the suggested overrides,
applied through the same command, plan a setup that fits (and print no advice)."""

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from evr1.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
LONG = str(ROOT / "conf/long_video.yaml")
runner = CliRunner()


def _plan(*args: str) -> str:
    result = runner.invoke(app, ["plan", LONG, *args])
    assert result.exit_code == 0, result.output
    return result.output


def _suggested(output: str) -> list[str]:
    line = next(ln for ln in output.splitlines() if ln.strip().startswith("overrides:"))
    return line.split("overrides:", 1)[1].split()


def _verdict(output: str, world: int, sp: int) -> str:
    return next(ln for ln in output.splitlines() if ln.startswith(f"FSDP {world}, sp {sp}: "))


def test_a_small_gpu_gets_the_smallest_change_that_fits_and_it_does():
    # the default placement (colocated vLLM) on 24 GiB: nothing but more GPUs and fewer frames together
    small = _plan("--gpu-memory-gib", "24")
    assert "FSDP 8, sp 8: 53.3 GiB does NOT fit" in small
    assert "smallest change that makes it fit:" in small
    change = _suggested(small)
    assert any(c.startswith("trainer.world_size=") for c in change) and any(c.startswith("cache.max_frames=") for c in change)
    check = next(ln for ln in small.splitlines() if ln.strip().startswith("check:")).split("check:", 1)[1]
    assert shlex.split(check)[1:] == ["plan", LONG, "--gpu-memory-gib", "24", *change]
    settings = dict(c.split("=", 1) for c in change)
    applied = _plan("--gpu-memory-gib", "24", *change)
    assert re.search(r"GiB fits in 24 GiB", _verdict(applied, int(settings["trainer.world_size"]),
                                                      int(settings["trainer.sequence_parallel"])))
    assert "smallest change" not in applied and "no change tried" not in applied


def test_sequence_parallel_first_then_frames_with_the_alternative():
    # sp 1 on 80 GiB GPUs: a sequence-parallel degree of 2 is enough
    out = _plan("--gpu-memory-gib", "80", "--separate", "trainer.sequence_parallel=1")
    assert _suggested(out) == ["trainer.sequence_parallel=2"]
    assert "GiB fits in 80 GiB" in _verdict(_plan("--gpu-memory-gib", "80", "--separate", "trainer.sequence_parallel=1",
                                                    "trainer.sequence_parallel=2"), 8, 2)
    # 40 GiB: sequence parallelism alone does not (the frozen tower's activations are not split),
    # fewer frames does; sequence parallelism then keeps more of them, which is said too
    out = _plan("--gpu-memory-gib", "40", "--separate", "trainer.sequence_parallel=1")
    change = _suggested(out)
    assert len(change) == 1 and change[0].startswith("cache.max_frames=")
    assert "GiB fits in 40 GiB" in _verdict(_plan("--gpu-memory-gib", "40", "--separate", "trainer.sequence_parallel=1",
                                                    *change), 8, 1)
    assert "or, keeping more frames:" in out and "sequence parallel 8 instead of 1" in out


def test_a_setup_that_fits_gets_no_advice_and_an_impossible_one_says_so():
    assert "smallest change" not in _plan("--gpu-memory-gib", "80", "--separate")
    hopeless = _plan("--gpu-memory-gib", "2", "--separate")
    assert "no change tried brings it under 1.8 GiB" in hopeless and "smallest change" not in hopeless

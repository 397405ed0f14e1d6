"""What breaks a run at a loss spike: the same few steps forked from one checkpoint under other settings.

    .venv/bin/python -m research.learning.rewind runs/i34f/s0-replay/checkpoints/FP/step_000495 --steps 498 \\
        --variant ctl= --variant lr1e-4=trainer.lr=1.0e-4 --variant clip025=trainer.grad_clip=0.25 \\
        -- run.root=runs/i34f run.name=s0-replay run.seed=0 model.tiny.seed=0

Each variant is `evr1 train conf/learning.yaml <common overrides> trainer.init_from=CKPT trainer.steps=N
<its overrides>` (comma-separated): a fork (`trainer.init_from`) starts from the checkpoint's weights,
Adam moments, data position and step, so the first step after it draws the same prompts, and the
rollouts are seeded per prompt and step: every difference between the variants' first step comes from
the setting changed, and a variant that changes nothing replays the original to the last digit (the
control). It prints one JSON line per variant and step: the step's KL to the reference, grad norm,
rollout accuracy overall and per family, format reward and response length.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf" / "learning.yaml"
KEYS = ("actor/kl_loss", "actor/grad_norm", "reward/accuracy", "reward/format", "response/length_mean",
        "diag/answer_entropy")


def fork(ckpt: Path, steps: int, overrides: list[str], common: list[str], conf: Path, log: Path) -> Path:
    """One `evr1 train` from `ckpt` to `steps`; returns the fork's last checkpoint."""
    cmd = [str(ROOT / ".venv" / "bin" / "evr1"), "train", str(conf), *common, f"trainer.init_from={ckpt.resolve()}",
           f"trainer.steps={steps}", *overrides]
    print(f"[rewind] {' '.join(cmd)}", file=sys.stderr, flush=True)
    with open(log, "w") as out:
        subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=True)
    found = re.findall(r"(\S*checkpoints/[0-9a-f]+/step_\d+)", log.read_text())
    if not found:
        raise RuntimeError(f"{log}: the train stage named no checkpoint")
    return ROOT / found[-1] if not Path(found[-1]).is_absolute() else Path(found[-1])


def rows(ckpt: Path, after: int) -> list[dict]:
    """The fork's steps past `after`, from the checkpoint's own history."""
    history = json.loads((ckpt / "trainer_state.json").read_text())["history"]
    out = []
    for h in history:
        if h["step"] > after:
            families = {k.rsplit("/", 1)[1]: round(v, 3) for k, v in h.items() if k.startswith("reward/accuracy/")}
            out.append({"step": h["step"], **{k: round(h[k], 4) for k in KEYS if k in h}, "accuracy_by_family": families})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a step_N folder to fork from")
    parser.add_argument("--steps", type=int, required=True, help="trainer.steps of every fork")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=OVERRIDES",
                        help="a name and its comma-separated overrides (empty: the control)")
    parser.add_argument("--config", type=Path, default=CONF)
    parser.add_argument("--logs", type=Path, default=None, help="where each fork's log goes (default: beside the run)")
    parser.add_argument("common", nargs="*", help="overrides every fork takes (run.root, run.name, seeds)")
    args = parser.parse_args()
    start = json.loads((args.checkpoint / "trainer_state.json").read_text())["step"]
    logs = args.logs or args.checkpoint.parents[2]
    for spec in args.variant or ["control="]:
        name, _, overrides = spec.partition("=")
        ckpt = fork(args.checkpoint, args.steps, [o for o in overrides.split(",") if o], args.common, args.config,
                    logs / f"rewind-{name}.log")
        for row in rows(ckpt, start):
            print(json.dumps({"variant": name, **row}), flush=True)


if __name__ == "__main__":
    main()

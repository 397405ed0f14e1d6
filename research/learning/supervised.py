"""How fast the learning task's model can learn each family when told the answers (docs/learning.md).

    .venv/bin/python -m research.learning.supervised --kinds colour,motion,flash_time,appears --steps 800
    .venv/bin/python -m research.learning.supervised --kinds appears --steps 400

The ceiling for RL: supervised steps on the ground truth ("<answer>X</answer>", teacher-forced) with
conf/learning.yaml's model, frames and prompt, in one process, the vision tower untouched (as the
warm-up leaves it). Every `--every` steps it scores the held-out split by the likeliest answer of
each item's `answer_space` and prints one JSON line per check: the step, the accuracy per family and
the seconds so far. A family this cannot learn, RL will not; one it learns in N clips, RL needs more.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageTextToText

from evr1 import prompts
from evr1.cache import FrameReader
from evr1.config import load_config
from evr1.data import make_synthetic
from evr1.models import load_adapter, make_tiny

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="colour,motion,flash_time,appears")
    ap.add_argument("--n", type=int, default=1152, help="training items")
    ap.add_argument("--heldout", type=int, default=128)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--every", type=int, default=100)
    args = ap.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    rng = np.random.default_rng(0)
    cfg = load_config(ROOT / "conf" / "learning.yaml")
    tmp, s = Path(tempfile.mkdtemp()), cfg.data.synth
    make_synthetic(tmp / "synth", args.n, seed=0, heldout=args.heldout, size=tuple(s.size), fps=s.fps,
                   seconds=s.seconds, kinds=args.kinds.split(","))
    model_dir = make_tiny(cfg.model.tiny.family, tmp / "model", seed=cfg.model.tiny.seed, **cfg.model.tiny.sizes)
    ad = load_adapter(model_dir)
    reader = FrameReader(None, cfg.cache.frame_params(ad.family.factor), mode="decode-only", data_root=str(tmp / "synth"))

    def split(name: str) -> list[tuple]:
        recs = [json.loads(x) for x in (tmp / "synth" / f"{name}.jsonl").read_text().splitlines()]
        return [(ad.encode_prompt(prompts.render(r, template=cfg.rollout.template), videos=[reader.video(r["videos"][0])]), r)
                for r in recs]

    train, held = split("train"), split("heldout")
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    opt = torch.optim.AdamW([p for n, p in model.named_parameters() if not n.startswith("model.visual")], lr=args.lr)
    eos = ad.eos_token_ids[:1]

    def target(answer: str) -> list[int]:
        return ad.tokenizer.encode(f"<answer>{answer}</answer>", add_special_tokens=False) + eos

    def log_likelihood(items: list, targets: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        batch = ad.collate(items, targets).to("cpu", dtype=torch.float32)
        n = batch.response_mask.shape[1]
        logits = model(**batch.model_inputs()).logits[:, -n - 1:-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
        return (lp * batch.response_mask).sum(1), batch.response_mask

    @torch.no_grad()
    def heldout_accuracy() -> dict[str, float]:
        right: dict[str, list[bool]] = {}
        for prompt, rec in held:
            space = rec["answer_space"]
            scores, _ = log_likelihood([prompt] * len(space), [target(a) for a in space])
            right.setdefault(rec["synth_kind"], []).append(space[int(scores.argmax())] == rec["answer"])
        return {k: round(float(np.mean(v)), 3) for k, v in sorted(right.items())}

    t0 = time.perf_counter()
    for step in range(args.steps + 1):
        if step % args.every == 0 or step == args.steps:
            print(json.dumps({"step": step, "heldout_accuracy": heldout_accuracy(),
                              "seconds": round(time.perf_counter() - t0)}), flush=True)
        if step == args.steps:
            break
        idx = rng.choice(len(train), args.batch, replace=False)
        ll, mask = log_likelihood([train[i][0] for i in idx], [target(train[i][1]["answer"]) for i in idx])
        loss = -ll.sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

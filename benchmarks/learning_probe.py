"""The trainer's RL update outside the pipeline, on one family, in one process (docs/learning.md).

    .venv/bin/python benchmarks/learning_probe.py            # ~40 s on 2 cores

The same random-weight Qwen2-VL as conf/learning.yaml and its `colour` family (a shape a quarter of
the frame across, one of four colours, multiple choice). A format warm-up on uniformly drawn answers
(tower untouched), then 300 GRPO-style REINFORCE steps of 8 clips × 8 answers sampled from the full
vocabulary at the answer position (a token that is not a letter is simply wrong). It tells whether
a family can be learnt by this update at all, in seconds, apart from anything the pipeline does.

Prints one JSON line: p(correct letter) and the letters' total probability every 25 steps.
Measured: p(correct) 0.23 at the start, 0.52 after 100 steps, 0.99 after 275; the letters keep
0.93–0.998 of the probability throughout (no mass leaks to the rest of the vocabulary).
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageTextToText

from evr1 import prompts
from evr1.cache import FrameReader
from evr1.config import load_config
from evr1.data import make_synthetic
from evr1.models import load_adapter, make_tiny

ROOT = Path(__file__).resolve().parents[1]


def reinforce(model, ad, data, letters, *, steps: int = 300, lr: float = 1e-3) -> dict:
    decoder = [p for n, p in model.named_parameters() if not n.startswith("model.visual")]
    opt = torch.optim.AdamW(decoder, lr=lr)
    head = ad.tokenizer.encode("<answer>", add_special_tokens=False)
    letters = torch.tensor(letters)
    rng = np.random.default_rng(1)
    curve: dict[str, list[float]] = {"p_correct": [], "letter_mass": []}
    for step in range(steps):
        idx = rng.choice(len(data), 8, replace=False)
        batch = ad.collate([data[i][0] for i in idx], [head for _ in idx]).to("cpu", dtype=torch.float32)
        logp = torch.log_softmax(model(**batch.model_inputs()).logits[:, -1].float(), -1)
        probs = logp.exp().detach()
        drawn = torch.multinomial(probs, 8, replacement=True)
        truth = letters[torch.tensor([data[i][1] for i in idx])]
        reward = (drawn == truth[:, None]).float()
        adv = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)
        loss = -(adv * logp.gather(1, drawn)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            curve["p_correct"].append(round(float(probs[torch.arange(len(idx)), truth].mean()), 3))
            curve["letter_mass"].append(round(float(probs[:, letters].sum(1).mean()), 3))
    return curve


def main() -> None:
    torch.manual_seed(0)
    random.seed(0)
    cfg = load_config(ROOT / "conf" / "learning.yaml")
    tmp = Path(tempfile.mkdtemp())
    s = cfg.data.synth
    make_synthetic(tmp / "synth", 160, seed=0, heldout=0, size=tuple(s.size), fps=s.fps, seconds=s.seconds,
                   kinds=["colour"])
    model_dir = make_tiny(cfg.model.tiny.family, tmp / "model", seed=cfg.model.tiny.seed, **cfg.model.tiny.sizes)
    ad = load_adapter(model_dir)
    reader = FrameReader(None, cfg.cache.frame_params(ad.family.factor), mode="decode-only", data_root=str(tmp / "synth"))
    records = [json.loads(x) for x in (tmp / "synth" / "train.jsonl").read_text().splitlines()]
    data = [(ad.encode_prompt(prompts.render(r, template=cfg.rollout.template), videos=[reader.video(r["videos"][0])]),
             "ABCD".index(r["answer"])) for r in records]
    letters = [ad.tokenizer.convert_tokens_to_ids(c) for c in "ABCD"]

    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    decoder = [p for n, p in model.named_parameters() if not n.startswith("model.visual")]
    opt = torch.optim.AdamW(decoder, lr=cfg.trainer.warmup_lr)
    eos = ad.eos_token_ids[:1]
    for _ in range(60):  # the format warm-up: answers drawn uniformly, the tower untouched
        idx = np.random.choice(len(data), 32, replace=False)
        targets = [ad.tokenizer.encode(f"<answer>{random.choice('ABCD')}</answer>", add_special_tokens=False) + eos
                   for _ in idx]
        batch = ad.collate([data[i][0] for i in idx], targets).to("cpu", dtype=torch.float32)
        n = batch.response_mask.shape[1]
        logits = model(**batch.model_inputs()).logits[:, -n - 1:-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
        loss = -(lp * batch.response_mask).sum() / batch.response_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(json.dumps({"every_25_steps": reinforce(model, ad, data, letters)}))


if __name__ == "__main__":
    main()

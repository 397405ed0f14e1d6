"""Why RL does not yet teach the tiny model (docs/learning.md, finding 6), in one process.

    .venv/bin/python benchmarks/learning_probe.py            # ~1 min on 2 cores

The same random-weight Qwen2-VL as conf/learning.yaml and the easiest family (`screen_colour`: the
whole clip one of four colours). A format warm-up on uniformly drawn answers (tower untouched), then
40 GRPO-style REINFORCE steps of 16 clips × 8 sampled answers, twice from the same warm-up:

- `answers`: the policy is the softmax over the four answer letters only;
- `vocab`: the letters' probabilities under the full-vocabulary softmax, as the trainer's token
  log-probs are (sampling renormalised over the letters, so both runs draw the same way).

Prints one JSON line: p(correct letter) every 5 steps for each. The first rises; the second falls,
because pushing the three wrong letters down moves their mass to the rest of the vocabulary.
"""

from __future__ import annotations

import copy
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


def reinforce(model, ad, data, letters, *, vocab: bool, steps: int = 40, lr: float = 1e-3) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    head = ad.tokenizer.encode("<answer>", add_special_tokens=False)
    rng = np.random.default_rng(1)
    curve = []
    for step in range(steps):
        idx = rng.choice(len(data), 16, replace=False)
        batch = ad.collate([data[i][0] for i in idx], [head for _ in idx]).to("cpu", dtype=torch.float32)
        logits = model(**batch.model_inputs()).logits[:, -1].float()
        logp = torch.log_softmax(logits, -1)[:, letters] if vocab else torch.log_softmax(logits[:, letters], -1)
        probs = logp.exp().detach()
        drawn = torch.multinomial(probs / probs.sum(1, keepdim=True), 8, replacement=True)
        truth = torch.tensor([data[i][1] for i in idx])
        reward = (drawn == truth[:, None]).float()
        adv = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)
        loss = -(adv * logp.gather(1, drawn)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0 or step == steps - 1:
            curve.append(round(float(probs[torch.arange(len(idx)), truth].mean()), 3))
    return curve


def main() -> None:
    torch.manual_seed(0)
    random.seed(0)
    cfg = load_config(ROOT / "conf" / "learning.yaml")
    tmp = Path(tempfile.mkdtemp())
    s = cfg.data.synth
    make_synthetic(tmp / "synth", 160, seed=0, heldout=0, size=tuple(s.size), fps=s.fps, seconds=s.seconds,
                   kinds=["screen_colour"])
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
    print(json.dumps({"p_correct_every_5_steps": {
        "answers": reinforce(copy.deepcopy(model), ad, data, letters, vocab=False),
        "vocab": reinforce(copy.deepcopy(model), ad, data, letters, vocab=True)}}))


if __name__ == "__main__":
    main()

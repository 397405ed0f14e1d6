"""The pipeline's RL step on the learning task in one process, with the tokens it trains on as a flag.

    .venv/bin/python -m research.learning.replica --kinds motion --steps 150 --every 25 --kl 0.1 --tokens deciding
    .venv/bin/python -m research.learning.replica --steps 300 --kl 0.1 --tokens top-entropy:0.2

Where `research/learning/probe.py` samples and trains the one token that decides an answer, this
samples whole responses as the trainer does (the HF engine, stopped at `</answer>`), scores them with
the real reward (0.9 accuracy + 0.1 format), takes GRPO advantages and a token-mean policy gradient
(ratio 1: one update per batch), with an optional low-variance KL to the warmed-up model on every
response token. `--tokens` picks which response tokens the policy gradient sees (`TOKEN_SELECTIONS`):
the difference between the pipeline and the probe, isolated (docs/learning.md, finding 14).
About 1.2 s a step of 32 clips × 8 responses on 2 cores.

Prints one JSON line per check: held-out accuracy per family (the probe's measure: the likeliest
valid answer at the deciding token), train accuracy since the last check, token entropy, and the
commonest responses to the first family's clips.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import random
import time
from collections.abc import Callable

import numpy as np
import torch
from research.learning.probe import heldout_accuracy, language_params, load_task, response_log_probs, step, warm_up
from transformers import AutoModelForImageTextToText

from evr1 import rewards, rl
from evr1.data.ingest import reward_sample
from evr1.engines.base import SamplingParams
from evr1.engines.hf import HFEngine


def _find(seq: list[int], sub: list[int], start: int = 0) -> int:
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return -1


def _answer_spans(responses: list[list[int]], opener: list[int], closer: list[int], mask: torch.Tensor,
                  first_only: bool) -> torch.Tensor:
    keep = torch.zeros_like(mask)
    for row, ids in enumerate(responses):
        j = _find(ids, opener)
        if j < 0:
            continue
        j += len(opener)
        close = _find(ids, closer, j)
        k = j + 1 if first_only else (close if close >= 0 else len(ids))
        keep[row, j:k] = 1.0
    return mask * keep


TokenSelection = Callable[[dict, str], torch.Tensor]
TOKEN_SELECTIONS: dict[str, TokenSelection] = {
    # every response token: the trainer's policy gradient
    "all": lambda b, arg: b["mask"],
    # the first token after `<answer>` (the letter, the digit; for appears the `{` of its JSON)
    "deciding": lambda b, arg: _answer_spans(b["responses"], b["opener"], b["closer"], b["mask"], True),
    # every token between `<answer>` and `</answer>`
    "answer": lambda b, arg: _answer_spans(b["responses"], b["opener"], b["closer"], b["mask"], False),
    # the top share by entropy (`algorithm.top_entropy_ratio` in the trainer)
    "top-entropy": lambda b, arg: rl.high_entropy_mask(b["entropy"], b["mask"], float(arg)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="colour,motion,flash_time,appears")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup-steps", type=int, default=150)
    ap.add_argument("--prompts", type=int, default=32, help="clips a step")
    ap.add_argument("--group", type=int, default=8, help="responses a clip")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl", type=float, default=0.0, help="low-variance KL coefficient, token-mean over every token")
    ap.add_argument("--tokens", default="all", help=f"{' | '.join(TOKEN_SELECTIONS)}[:ratio]")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    name, _, arg = args.tokens.partition(":")
    select = TOKEN_SELECTIONS[name]
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    kinds = args.kinds.split(",")
    cfg, ad, model_dir, train, held = load_task(kinds, 1152, 128)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    warm_up(model, ad, train, rng, steps=args.warmup_steps, lr=cfg.trainer.warmup_lr)
    reference = copy.deepcopy(model).eval()
    opt = torch.optim.AdamW(language_params(model), lr=args.lr)
    engine = HFEngine(model, ad, batch_size=args.prompts)
    tags = {"opener": ad.tokenizer.encode("<answer>", add_special_tokens=False),
            "closer": ad.tokenizer.encode("</answer>", add_special_tokens=False)}
    print(json.dumps({"step": 0, "heldout": heldout_accuracy(model, ad, held)}), flush=True)
    start, right, entropies, said = time.time(), {}, [], collections.Counter()
    for n_step in range(1, args.steps + 1):
        items = [train[i] for i in rng.choice(len(train), args.prompts, replace=False)]
        sampling = SamplingParams(n=args.group, temperature=1.0, max_new_tokens=cfg.rollout.max_new_tokens,
                                  stop=tuple(cfg.rollout.stop), seed=n_step)
        outs = engine.generate([it["prompt"] for it in items], sampling)
        texts = [g.text for gs in outs for g in gs]
        samples = [reward_sample(it["record"]) for it in items for _ in range(args.group)]
        scored = rewards.compute_scores(texts, samples, accuracy_weight=cfg.reward.accuracy_weight,
                                        format_weight=cfg.reward.format_weight).scores
        responses = [list(g.token_ids) for gs in outs for g in gs]
        batch = ad.collate([it["prompt"] for it in items for _ in range(args.group)], responses).to("cpu", dtype=torch.float32)
        mask = batch.response_mask.float()
        adv, _ = rl.compute_advantages("grpo", [sc["overall"] for sc in scored],
                                       np.repeat(np.arange(args.prompts), args.group), mask)
        lp, log_p = response_log_probs(model, batch)
        entropy = rl.entropy_from_logits(log_p.detach())
        pg_mask = select({"mask": mask, "responses": responses, "entropy": entropy, **tags}, arg)
        loss = -(adv * lp * pg_mask).sum() / pg_mask.sum().clamp(min=1)
        if args.kl:
            with torch.no_grad():
                ref_lp, _ = response_log_probs(reference, batch)
            loss = loss + args.kl * rl.masked_mean(rl.kl_penalty(lp, ref_lp, "low_var_kl"), mask)
        step(opt, loss)
        entropies.append(float(rl.masked_mean(entropy, mask)))
        accuracy = torch.tensor([sc.get("accuracy", 0.0) for sc in scored]).view(args.prompts, args.group).mean(1)
        for it, gs, a in zip(items, outs, accuracy.tolist()):
            right.setdefault(it["kind"], []).append(a)
            if it["kind"] == kinds[0]:
                said.update(g.text for g in gs)
        if n_step % args.every == 0:
            print(json.dumps({"step": n_step, "s": round(time.time() - start), "heldout": heldout_accuracy(model, ad, held),
                              "train": {k: round(float(np.mean(v)), 3) for k, v in sorted(right.items())},
                              "entropy": round(float(np.mean(entropies)), 3), kinds[0]: dict(said.most_common(3))}),
                  flush=True)
            right, entropies, said = {}, [], collections.Counter()


if __name__ == "__main__":
    main()

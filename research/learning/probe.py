"""The trainer's RL update outside the pipeline, on the learning task's families, in one process.

    .venv/bin/python -m research.learning.probe                      # four families, ~1 min on 2 cores
    .venv/bin/python -m research.learning.probe --train-tower        # the same, the vision tower trained too
    .venv/bin/python -m research.learning.probe --kinds colour --prompts 8 --steps 300

conf/learning.yaml's random-weight Qwen2-VL, frames and prompt; its format warm-up (answers drawn
uniformly, tower untouched); then GRPO-style REINFORCE steps of `--prompts` clips × `--group` draws
of the one token that decides the answer (the letter, Yes/No's first token, the second, or the
start second of `appears`, after `<answer>{"time": [`), sampled from the full vocabulary: any other
token is simply wrong. No response text, no format to keep: it isolates whether the update, the
model and the features can learn the families, in a minute instead of half an hour (docs/learning.md).

Prints one JSON line per check: the step, the seconds so far, held-out accuracy per family (the
likeliest answer of each item's space at that token) and train accuracy of the draws since the last check.
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
APPEARS_HEAD = '<answer>{"time": ['


def deciding_tokens(tok, record: dict) -> tuple[list[int], list[int], int]:
    """The head to condition on, the first token of each valid answer, and the right one's."""
    if record["synth_kind"] == "appears":
        head, first = APPEARS_HEAD, [str(json.loads(a)["time"][0]) for a in record["answer_space"]]
        truth = str(json.loads(record["answer"])["time"][0])
    else:
        head, first, truth = "<answer>", list(record["answer_space"]), record["answer"]
    ids = [tok.encode(a, add_special_tokens=False)[0] for a in first]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{record['id']}: field answer_space has answers sharing a first token")
    return tok.encode(head, add_special_tokens=False), ids, tok.encode(truth, add_special_tokens=False)[0]


def next_token_log_probs(model, ad, items: list[dict]) -> torch.Tensor:
    """log p(next token | prompt, head) for each item (heads of different lengths, right-padded)."""
    batch = ad.collate([it["prompt"] for it in items], [it["head"] for it in items]).to("cpu", dtype=torch.float32)
    n = batch.response_mask.shape[1]
    logits = model(**batch.model_inputs()).logits[:, -n:].float()
    last = batch.response_mask.sum(1).long() - 1
    return torch.log_softmax(logits[torch.arange(len(items)), last], -1)


def step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimizer step, gradients clipped at 1 as the trainer's (`trainer.grad_clip`)."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
    opt.step()


def language_params(model) -> list[torch.nn.Parameter]:
    """Every parameter but the vision tower's (`model.freeze_vision_tower`)."""
    return [p for n, p in model.named_parameters() if not n.startswith("model.visual")]


def response_log_probs(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities of a collated batch's response tokens ``[B, L]``, the full ``[B, L, V]`` ones)."""
    n = batch.response_mask.shape[1]
    log_p = torch.log_softmax(model(**batch.model_inputs()).logits[:, -n - 1:-1].float(), -1)
    return log_p.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1), log_p


def warm_up(model, ad, train: list[dict], rng: np.random.Generator, *, steps: int, lr: float) -> torch.optim.Optimizer:
    """conf/learning.yaml's format warm-up: `<answer>X</answer>` with X uniform, the tower untouched."""
    opt = torch.optim.AdamW(language_params(model), lr=lr)
    eos = ad.eos_token_ids[:1]
    for _ in range(steps):
        items = [train[i] for i in rng.choice(len(train), 32, replace=False)]
        targets = [ad.tokenizer.encode(f"<answer>{random.choice(it['record']['answer_space'])}</answer>",
                                       add_special_tokens=False) + eos for it in items]
        batch = ad.collate([it["prompt"] for it in items], targets).to("cpu", dtype=torch.float32)
        lp, _ = response_log_probs(model, batch)
        step(opt, -(lp * batch.response_mask).sum() / batch.response_mask.sum())
    return opt


@torch.no_grad()
def heldout_accuracy(model, ad, held: list[dict]) -> dict[str, float]:
    model.eval()
    right: dict[str, list[float]] = {}
    for start in range(0, len(held), 32):
        items = held[start:start + 32]
        for it, lp in zip(items, next_token_log_probs(model, ad, items)):
            pick = it["space"][int(torch.argmax(lp[it["space"]]))]
            right.setdefault(it["kind"], []).append(float(pick == it["truth"]))
    model.train()
    return {k: round(float(np.mean(v)), 3) for k, v in sorted(right.items())}


def load_task(kinds: list[str], n: int, heldout: int):
    """conf/learning.yaml's config, tiny model (its adapter and folder) and the `kinds` families'
    train and held-out items, each with its encoded prompt and deciding tokens."""
    cfg = load_config(ROOT / "conf" / "learning.yaml")
    tmp, s = Path(tempfile.mkdtemp()), cfg.data.synth
    make_synthetic(tmp / "synth", n, seed=0, heldout=heldout, size=tuple(s.size), fps=s.fps, seconds=s.seconds,
                   kinds=kinds)
    model_dir = make_tiny(cfg.model.tiny.family, tmp / "model", seed=cfg.model.tiny.seed, **cfg.model.tiny.sizes)
    ad = load_adapter(model_dir)
    reader = FrameReader(None, cfg.cache.frame_params(ad.family.factor), mode="decode-only", data_root=str(tmp / "synth"))

    def split(name: str) -> list[dict]:
        out = []
        for line in (tmp / "synth" / f"{name}.jsonl").read_text().splitlines():
            r = json.loads(line)
            head, space, truth = deciding_tokens(ad.tokenizer, r)
            prompt = ad.encode_prompt(prompts.render(r, template=cfg.rollout.template), videos=[reader.video(r["videos"][0])])
            out.append({"prompt": prompt, "head": head, "space": space, "truth": truth, "kind": r["synth_kind"], "record": r})
        return out

    return cfg, ad, model_dir, split("train"), split("heldout")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="colour,motion,flash_time,appears")
    ap.add_argument("--n", type=int, default=1152, help="training items")
    ap.add_argument("--heldout", type=int, default=128)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup-steps", type=int, default=None, help="default: conf/learning.yaml's warmup_sft_steps")
    ap.add_argument("--prompts", type=int, default=32, help="clips a step")
    ap.add_argument("--group", type=int, default=8, help="draws a clip")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-tower", action="store_true", help="update the vision tower in RL too")
    ap.add_argument("--keep-warmup-optimizer", action="store_true",
                    help="RL continues the warm-up's AdamW (its moments), as the trainer did before it reset them")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    cfg, ad, model_dir, train, held = load_task(args.kinds.split(","), args.n, args.heldout)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    warmup_steps = cfg.trainer.warmup_sft_steps if args.warmup_steps is None else args.warmup_steps
    opt = warm_up(model, ad, train, rng, steps=warmup_steps, lr=cfg.trainer.warmup_lr)
    if args.keep_warmup_optimizer:
        for group in opt.param_groups:
            group["lr"] = args.lr
    else:
        params = [p for n, p in model.named_parameters() if args.train_tower or not n.startswith("model.visual")]
        opt = torch.optim.AdamW(params, lr=args.lr)
    start, drawn_right = time.time(), {}
    print(json.dumps({"step": 0, "heldout": heldout_accuracy(model, ad, held)}), flush=True)
    for n_step in range(1, args.steps + 1):
        items = [train[i] for i in rng.choice(len(train), args.prompts, replace=False)]
        logp = next_token_log_probs(model, ad, items)
        drawn = torch.multinomial(logp.exp().detach(), args.group, replacement=True)
        reward = (drawn == torch.tensor([it["truth"] for it in items])[:, None]).float()
        adv = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)
        step(opt, -(adv * logp.gather(1, drawn)).mean())
        for it, r in zip(items, reward.mean(1).tolist()):
            drawn_right.setdefault(it["kind"], []).append(r)
        if n_step % args.every == 0:
            print(json.dumps({"step": n_step, "s": round(time.time() - start), "heldout": heldout_accuracy(model, ad, held),
                              "train": {k: round(float(np.mean(v)), 3) for k, v in sorted(drawn_right.items())}}),
                  flush=True)
            drawn_right = {}


if __name__ == "__main__":
    main()

"""Collecting a step's experience: draw prompts, generate n responses each, score them.

With DAPO dynamic sampling, groups that cannot teach anything (all responses scored alike) are
dropped and more prompts are drawn until the step has `prompts_per_step` informative groups or the
draw budget is spent. ReMax adds a greedy response per prompt whose score is the baseline. In mixed
offline-online mode a sample's pre-collected trajectory replaces the last of its n responses
(evr1/train/offline.py) before anything is scored.

The driver sends the rollout engines sample rows (`rollout_backend.RolloutBackend`, wherever the
engines are); they read and encode them and answer which were readable (`prepare`), so a sample
whose media cannot be read is skipped and counted here.

Each prompt's samples are drawn from a seed of its own, derived from the run's seed, the step, the
draw, its slot and its key (`group_seed`): the same on one engine or on eight, whichever engine or
batch the prompt lands in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from evr1 import rl
from evr1.config import Config
from evr1.data.ingest import reward_sample
from evr1.train import offline as offline_mix
from evr1.train.prompt_source import PromptSource
from evr1.train.protocol import row_key
from evr1.train.rollout_backend import RolloutBackend
from evr1.train.seeds import seed_of


@dataclass
class Rollout:
    """One entry per response; `groups` ties the n responses of a prompt together."""

    rows: list[dict] = field(default_factory=list)  # the sample row, repeated per response
    prompt_tokens: list[int] = field(default_factory=list)  # the encoded prompt's length, per response
    responses: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    scores: list[dict] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)  # remax: the greedy response's score
    offline: list[bool] = field(default_factory=list)  # mixed offline-online mode only: a trajectory, not generated
    # The sampled tokens' log-probs under the rollout engine (None where it gives none, or for an
    # offline trajectory): what the trainer's own log-probs are compared with (`rl.gap_metrics`).
    behaviour: list[list[float] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.responses)

    def take(self, keep: list[bool]) -> "Rollout":
        out = Rollout()
        for name in FIELDS:
            values = getattr(self, name)
            if values:
                setattr(out, name, [v for v, k in zip(values, keep) if k])
        return out

    def extend(self, other: "Rollout") -> None:
        for name in FIELDS:
            getattr(self, name).extend(getattr(other, name))

    def group_order(self) -> list[int]:
        return list(dict.fromkeys(self.groups))


FIELDS = ("rows", "prompt_tokens", "responses", "texts", "groups", "scores", "truncated", "baseline", "offline",
          "behaviour")
Scorer = Callable[[list[str], list[dict]], tuple[list[dict], dict]]


def sampling(cfg: Config, seed: int, *, greedy: bool = False) -> dict:
    """The rollout worker's sampling settings (greedy: validation's)."""
    ro = cfg.rollout
    if greedy:
        return {"n": 1, "max_new_tokens": ro.max_new_tokens, "temperature": 0.0, "seed": seed, "stop": ro.stop}
    return {"n": ro.n, "max_new_tokens": ro.max_new_tokens, "temperature": ro.temperature, "top_p": ro.top_p,
            "top_k": max(ro.top_k, 0), "seed": seed, "stop": ro.stop, "logprobs": True}


def group_seed(run_seed: int, step: int, draw: int, slot: int, key: str) -> int:
    """The sampling seed of one prompt's group: a function of the data (run seed, step, draw, the
    prompt's slot in the draw and its sample key), never of where it is generated. 31 bits."""
    return seed_of(run_seed, step, draw, slot, key)


def draw_readable(source: PromptSource, rollout: RolloutBackend, size: int,
                  metrics: dict) -> tuple[list[dict], list, list[int]]:
    """`size` samples whose media the rollout worker could read, with its prompt handles and prompt
    lengths; an unreadable sample is skipped, counted in `data/skipped_samples`, and replaced by the
    next one, so one bad file never stops training."""
    rows, handles, lengths, skipped = [], [], [], 0
    while len(rows) < size:
        drawn = source.next_batch(size - len(rows))
        for row, answer in zip(drawn, rollout.prepare(drawn)):
            if "error" in answer:
                skipped += 1
                if skipped > max(10, 2 * size):
                    raise RuntimeError(f"training: {skipped} samples could not be read while filling one batch of "
                                       f"{size}; the last, {answer['error']}")
                continue
            rows.append(row)
            handles.append(answer["handle"])
            lengths.append(answer["prompt_tokens"])
    metrics["data/skipped_samples"] = metrics.get("data/skipped_samples", 0.0) + skipped
    return rows, handles, lengths


Announce = Callable[[list[dict]], None]


def _draw(cfg: Config, rollout: RolloutBackend, source: PromptSource, adapter, score: Scorer, *, seed: int, step: int,
          draw: int, first_group: int, metrics: dict, announce: Announce) -> Rollout:
    ro = cfg.rollout
    mixing = bool(cfg.data.offline_key) and cfg.algorithm.offline_ratio > 0
    batch, handles, lengths = draw_readable(source, rollout, cfg.trainer.prompts_per_step, metrics)
    announce(batch)  # the policy ranks start reading these while the rollout generates
    if ro.seeding == "per_prompt":
        params = {**sampling(cfg, seed), "seeds": [group_seed(cfg.run.seed, step, draw, i, row_key(row))
                                                   for i, row in enumerate(batch)]}
    else:
        params = {**sampling(cfg, seed), "seed": None}  # the engines' own generators
    groups_out = rollout.generate(handles, params)
    out = Rollout()
    samples = []
    for i, (sample, group) in enumerate(zip(batch, groups_out)):
        # Chosen from (seed, step, sample): the same samples get their trajectory on a resumed run.
        traj = offline_mix.pick(sample, adapter, key=cfg.data.offline_key, ratio=cfg.algorithm.offline_ratio,
                                seed=cfg.run.seed, step=step, max_new_tokens=ro.max_new_tokens) if mixing else None
        for j, g in enumerate(group):
            swap = traj is not None and j == len(group) - 1  # the n-th response becomes the trajectory
            if swap:
                g = {"token_ids": traj.token_ids, "text": traj.text, "finish_reason": "length" if traj.truncated else "stop"}
            out.rows.append(sample)
            out.prompt_tokens.append(lengths[i])
            out.responses.append(g["token_ids"] or [adapter.pad_token_id])
            out.texts.append(g["text"])
            out.groups.append(first_group + i)  # per prompt slot: a repeated sample is not one merged group
            out.truncated.append(g["finish_reason"] == "length")
            out.behaviour.append(None if swap or not g.get("logprobs") else list(g["logprobs"]))
            if mixing:
                out.offline.append(swap)
            samples.append(reward_sample(sample))
    out.scores, reward_metrics = score(out.texts, samples)
    for k, v in (reward_metrics or {}).items():
        if isinstance(v, (int, float)) and "per_second" not in k:  # counts add up over draws; rates do not
            metrics[f"reward/{k}"] = metrics.get(f"reward/{k}", 0.0) + float(v)
    if cfg.algorithm.adv_estimator == "remax":
        greedy = rollout.generate(handles, sampling(cfg, seed, greedy=True))
        base_scores, _ = score([g[0]["text"] for g in greedy], [reward_sample(s) for s in batch])
        base = torch.tensor([s["overall"] for s in base_scores], dtype=torch.float32)
        a = cfg.algorithm
        if a.overlong_buffer_len:  # shaped like the sampled responses, or the baseline is biased
            base = base + rl.overlong_penalty([len(g[0]["token_ids"]) for g in greedy],
                                              max_response_length=ro.max_new_tokens, buffer_len=a.overlong_buffer_len,
                                              penalty_factor=a.overlong_penalty_factor).float()
        out.baseline = [float(base[g - first_group]) for g in out.groups]
    rollout.release(handles)
    return out


def collect(cfg: Config, rollout: RolloutBackend, source: PromptSource, adapter, score: Scorer, step: int,
            metrics: dict, announce: Announce = lambda rows: None) -> tuple[Rollout, Rollout]:
    """(everything generated, what the update trains on): equal unless dynamic sampling dropped groups.

    `announce(rows)` is called with each draw's readable samples before they are generated from.
    """
    a, t = cfg.algorithm, cfg.trainer
    generated, kept = Rollout(), Rollout()
    draws = 0
    while True:
        draws += 1
        drawn = _draw(cfg, rollout, source, adapter, score,
                      seed=cfg.run.seed * 100003 + step * 101 + draws, step=step, draw=draws,
                      first_group=(draws - 1) * t.prompts_per_step, metrics=metrics, announce=announce)
        generated.extend(drawn)
        if not a.dynamic_sampling:
            kept = drawn
            break
        values = torch.tensor([s.get(a.filter_key, 0.0) for s in drawn.scores], dtype=torch.float64)
        bounds = {"low": a.filter_low, "high": a.filter_high} if a.filter_rule == "mean_range" else {}
        keep = rl.dynamic_sampling_keep(values, drawn.groups, rule=a.filter_rule, **bounds)
        kept.extend(drawn.take(keep.tolist()))
        if len(kept.group_order()) >= t.prompts_per_step or draws >= a.max_sample_batches:
            break
    # Whole groups only, as many as asked for, and a number of responses every FSDP rank can share.
    groups = kept.group_order()[: t.prompts_per_step]
    while groups and (len(groups) * cfg.rollout.n) % (t.world_size // t.sequence_parallel):
        groups.pop()
    chosen = set(groups)
    kept = kept.take([g in chosen for g in kept.groups])
    metrics["data/sample_batches"] = float(draws)
    metrics["data/kept_groups"] = float(len(groups))
    return generated, kept

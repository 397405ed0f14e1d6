"""The contract between the driver and the workers: what the driver sends a rank, and how both cut it.

The driver (`trainer`, through `actor_group`) builds a `Shard` per data-parallel rank and a
`ReaderSpec` once; the workers (`train/workers/`) receive them and read their frames themselves.
Both sides import this module and nothing of each other (verl's `protocol.py`, slime's actor group),
so the cutting rules (`shard_slices`, `grouped_calls`) are computed the same way on both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from evr1.cache import FrameReader
from evr1.video.clip import FrameParams


@dataclass(frozen=True)
class ReaderSpec:
    """How a worker opens its own `FrameReader` and renders prompts: small, sent once at start."""

    frames_uri: str | None
    params: FrameParams
    mode: str
    data_root: str | None
    template: str | None
    thinking: bool
    max_prompt_tokens: int | None = None  # text plus vision tokens; None: no limit

    def reader(self) -> FrameReader:
        return FrameReader(self.frames_uri, self.params, mode=self.mode, data_root=self.data_root)


def row_key(row: dict) -> str:
    """A sample's identity: its stable `sample_id`, else the row itself."""
    sid = row.get("sample_id")
    return str(sid) if sid is not None else json.dumps(row, sort_keys=True, default=str)


@dataclass
class Shard:
    """This rank's part of a step: sample rows, sampled responses and per-token values for each response.

    `rows` are the samples' small rows (ids, text, media paths): the rank reads and encodes their
    frames itself, so no frame or tensor travels through the driver.

    `advantages`, `old_log_probs` and `ref_log_probs` hold one list per response (its valid tokens);
    the log-probs come back from `log_probs()` and travel with the update so nothing is computed twice.
    """

    rows: list[dict]  # one sample row per response
    responses: list[list[int]]
    advantages: list[list[float]]
    global_token_count: int
    global_sequence_count: int
    old_log_probs: list[list[float]] | None = None
    ref_log_probs: list[list[float]] | None = None
    # Responses per optimizer step on this rank, and each mini-batch's (tokens, sequences) summed
    # over all ranks; 0 / empty: the whole shard is one mini-batch with the global counts above.
    mini_size: int = 0
    mini_batches: list[tuple[int, int]] = field(default_factory=list)
    # Shared prompt prefix: grouped calls per micro-batch (the busiest rank's count, so every rank
    # runs as many forwards) for the log-prob passes and for the update; empty: unshared passes.
    log_prob_calls: list[int] = field(default_factory=list)
    update_calls: list[int] = field(default_factory=list)
    # Micro-batches cut by a token budget (`evr1.train.micro_batches`): per mini-batch, [start, stop)
    # of each micro-batch, as many on every rank; empty: micro_batch_size responses each.
    micro: list[list[tuple[int, int]]] = field(default_factory=list)
    # The entropy bonus as the driver sets it for the step (`algorithm.entropy_on: answer`, an adaptive
    # coefficient): per response a 0/1 weight per token (None: every response token, with the loss's
    # aggregation); per mini-batch, over all ranks, the number of responses with a weighted token (the
    # bonus is the mean over them of their weighted tokens' summed entropy); the step's coefficient
    # (None: the config's `entropy_coeff`).
    entropy_weights: list[list[float]] | None = None
    entropy_counts: list[int] = field(default_factory=list)
    entropy_coeff: float | None = None


def micro_slices(rows: int, micro: int, mini: int = 0) -> list[tuple[int, int]]:
    """[start, stop) of each micro-batch, mini-batch by mini-batch (`mini` 0: one mini-batch)."""
    size = mini or rows
    return [(i, min(i + micro, end)) for start in range(0, rows, size) for end in [min(start + size, rows)]
            for i in range(start, end, micro)]


def shard_slices(shard: Shard, micro: int, mini: int = 0) -> list[list[tuple[int, int]]]:
    """Per mini-batch, the [start, stop) of each micro-batch: the driver's token-budget cuts when it
    made them, else `micro` responses each."""
    if shard.micro:
        return shard.micro
    size = mini or len(shard.rows) or 1
    out: list[list[tuple[int, int]]] = []
    for a, b in micro_slices(len(shard.rows), micro, mini):
        if a % size == 0:
            out.append([])
        out[-1].append((a, b))
    return out


def prompt_runs(keys: list[str]) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal consecutive keys: the responses of one prompt, side by side."""
    runs: list[tuple[int, int]] = []
    for i, key in enumerate(keys):
        if runs and keys[runs[-1][0]] == key:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def grouped_calls(shards: list[Shard], micro: int, mini: int = 0) -> list[int]:
    """Per micro-batch, the most prompt groups any rank has in it: every rank makes that many calls."""
    per_rank = [[len(prompt_runs([row_key(r) for r in s.rows[a:b]]))
                 for cuts in shard_slices(s, micro, mini) for a, b in cuts]
                for s in shards]
    return [max(calls) for calls in zip(*per_rank)]


def data_parallel(t) -> int:
    """Data-parallel shares per step: the ranks of a sequence-parallel group train on one share."""
    return t.world_size // t.sequence_parallel


def make_shards(world_size: int, rows: list[dict], responses: list[list[int]], advantages: list[list[float]], *,
            old: list[list[float]] | None = None, ref: list[list[float]] | None = None,
            mini_batch_size: int | None = None, entropy_weights: list[list[float]] | None = None,
            entropy_coeff: float | None = None, entropy_counted: list[bool] | None = None) -> list[Shard]:
    """Equal contiguous shares, one per rank: FSDP2 needs every rank to run the same number of passes.

    With `mini_batch_size` (responses per optimizer step over all ranks), each share is cut into
    mini-batches and every mini-batch carries its own global token and sequence counts (and, with
    `entropy_weights`, its count of responses with a weighted token, or of those `entropy_counted` marks).
    """
    per = len(responses) // world_size
    tokens = sum(len(r) for r in responses)
    part = lambda rows, k: rows[k * per:(k + 1) * per] if rows is not None else None  # noqa: E731
    mini = max(1, min(per, (mini_batch_size or len(responses)) // world_size))
    minis, bonus_counts = [], []
    counted = entropy_counted if entropy_counted is not None or entropy_weights is None else [any(w) for w in entropy_weights]
    for start in range(0, per, mini):
        chosen = [k * per + i for k in range(world_size) for i in range(start, min(start + mini, per))]
        minis.append((sum(len(responses[i]) for i in chosen), len(chosen)))
        if entropy_weights is not None:
            bonus_counts.append(sum(1 for i in chosen if counted[i]))
    if mini >= per:
        minis = []
    return [Shard(rows=part(rows, k), responses=part(responses, k), advantages=part(advantages, k),
                  global_token_count=tokens, global_sequence_count=len(responses), old_log_probs=part(old, k),
                  ref_log_probs=part(ref, k), mini_size=mini if minis else 0, mini_batches=minis,
                  entropy_weights=part(entropy_weights, k), entropy_counts=bonus_counts, entropy_coeff=entropy_coeff)
            for k in range(world_size)]

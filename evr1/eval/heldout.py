"""The held-out split of an ingested dataset (e.g. the synthetic one) as a benchmark.

Scored with the same reward library as training (`evr1.rewards`), so a rise in training reward and
a rise in held-out accuracy mean the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping

from evr1 import prompts, rewards
from evr1.data.ingest import read_samples, reward_sample
from evr1.eval.benchmark import Benchmark, Prompted, register_benchmark


def _load(samples_uri: str, *, split: str = "heldout") -> list[dict]:
    return [{**reward_sample(s), "id": s["sample_id"]} for s in read_samples(samples_uri, split=split)]


def _prompt(item: Mapping, thinking: bool, *, template: str | None = None) -> Prompted:
    """The training prompt for the item: same renderer, same template, same thinking switch."""
    text = prompts.render(item, template=template, thinking=thinking)
    return Prompted(text=text, videos=tuple(item.get("videos") or ()), images=tuple(item.get("images") or ()))


def _score(output: str, item: Mapping) -> dict[str, float]:
    s = rewards.compute_score(output, item)
    return {"score": s["accuracy"], "format": s["format"]}


HELDOUT = register_benchmark(Benchmark(
    name="heldout", load=_load, prompt=_prompt, score=_score,
    description="The held-out split of the run's own dataset, scored with the training reward's accuracy.",
))

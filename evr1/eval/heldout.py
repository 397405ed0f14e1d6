"""The held-out and test splits of an ingested dataset (e.g. the synthetic one) as benchmarks.

Scored with the same reward library as training (`evr1.rewards`), so a rise in training reward and
a rise in held-out accuracy mean the same thing; asked with the run's own template under any profile.
`heldout` is what validation during training reads, and so what configs get chosen on; `test`
(`data.test_files`, `data.synth.test`) is read by nothing else: scored once, at the end, it is the
figure to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from evr1 import prompts, rewards
from evr1.data.ingest import read_samples, reward_sample
from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.metrics import accuracy


def _load(samples_uri: str, *, split: str = "heldout") -> list[dict]:
    return [{**reward_sample(s), "id": s["sample_id"]} for s in read_samples(samples_uri, split=split)]


def _prompt(item: Mapping, ctx: PromptContext) -> str:
    """The training prompt for the item: same renderer, same template, same thinking switch."""
    return prompts.render(item, template=ctx.template, thinking=ctx.thinking)


def _score(output: str, item: Mapping) -> dict[str, float]:
    s = rewards.compute_score(output, item)
    return {"score": s["accuracy"], "format": s["format"]}


HELDOUT = register_benchmark(Benchmark(
    name="heldout", title="Held-out split", load_fn=_load, prompt=_prompt, score=_score,
    aggregate=accuracy(), extra={"single_profile": True},  # the groups (problem types) are the breakdown
    description="The held-out split of the run's own dataset, scored with the training reward's accuracy.",
))

TEST = register_benchmark(Benchmark(
    name="test", title="Test split", load_fn=partial(_load, split="test"), prompt=_prompt, score=_score,
    aggregate=accuracy(), extra={"single_profile": True},
    description="The test split of the run's own dataset (data.test_files, data.synth.test), read by nothing "
                "but this: scored once at the end, with the training reward's accuracy.",
))


def uses_run_samples(names: list[str]) -> bool:
    """Whether any of these benchmarks reads the run's own samples (so the data must be ingested and cached)."""
    from evr1.eval.benchmark import get_benchmark

    return any(get_benchmark(name).extra.get("single_profile") for name in names)

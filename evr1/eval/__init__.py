"""evr1.eval: benchmark registry, scoring profiles, asynchronous runner, judge, per-item results and reports."""

from collections.abc import Mapping
from typing import Any

from evr1.eval.benchmark import (BENCHMARKS, PROFILES, Benchmark, PromptContext, Prompted, PromptFn, Report,
                                 get_benchmark, load_all, register_benchmark)
from evr1.eval.runner import EvalSummary, run_items
from evr1.eval.store import ResultStore
from evr1.eval import heldout as _heldout  # noqa: F401  (registers "heldout")


def score(benchmark: str, output: str, item: Mapping[str, Any], profile: str = "official") -> float:
    """The per-item score in [0, 1] of `output` for one `item` of `benchmark` under `profile`.

    `item` is one record exactly as it appears in the benchmark's annotation file (or an item a
    loader returned); `profile` is "official" or "easyvideor1".
    """
    bench = get_benchmark(benchmark)
    return float(bench.score_item(output, bench.item(item), profile)["score"])


__all__ = ["BENCHMARKS", "PROFILES", "Benchmark", "EvalSummary", "PromptContext", "PromptFn", "Prompted", "Report",
           "ResultStore", "get_benchmark", "load_all", "register_benchmark", "run_items", "score"]

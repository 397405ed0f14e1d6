"""evr1.eval: benchmark registry, asynchronous runner, per-item results and reports."""

from evr1.eval.benchmark import BENCHMARKS, Benchmark, Prompted, PromptFn, get_benchmark, register_benchmark
from evr1.eval.runner import EvalSummary, run_items
from evr1.eval.store import ResultStore
from evr1.eval import heldout as _heldout  # noqa: F401  (registers "heldout")


def score(benchmark: str, output: str, item: dict, profile: str = "official") -> float:
    """The per-item score of `output` for one `item` of `benchmark`."""
    if profile != "official":
        raise ValueError(f"unknown scoring profile {profile!r}; this build has: official")
    return float(get_benchmark(benchmark).score(output, item)["score"])


__all__ = ["BENCHMARKS", "Benchmark", "EvalSummary", "PromptFn", "Prompted", "ResultStore", "get_benchmark",
           "register_benchmark", "run_items", "score"]

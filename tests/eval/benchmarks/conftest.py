"""Shared helpers for the per-benchmark tests (the `annotations` fixture is in tests/eval/conftest.py):
engines that answer by item (an oracle that gives the ground truth in the benchmark's expected form, a constant answer),
run through the real asynchronous runner and the benchmark's official aggregation."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from evr1.engines import SamplingParams
from evr1.eval import Benchmark, Report, ResultStore, run_items

class AnswerEngine:
    """An engine whose "prompt" is the item id and whose answer is `answer(item)` for that item."""

    def __init__(self, items: Sequence[Mapping[str, Any]], answer: Callable[[Mapping[str, Any]], str]):
        self.by_id = {str(i["id"]): i for i in items}
        self.answer = answer

    async def agenerate(self, prompts, params):
        return [[SimpleNamespace(text=self.answer(self.by_id[p]))] for p in prompts]


def run_benchmark(bench: Benchmark, items: Sequence[Mapping[str, Any]], answer: Callable[[Mapping[str, Any]], str],
                  tmp_path: Path, *, profile: str = "official") -> Report:
    """Every item through the runner (load → generate → score) and the profile's aggregation."""
    store = ResultStore(tmp_path / f"{bench.name}-{profile}-{uuid.uuid4().hex}.jsonl")  # a fresh store per run
    summary = asyncio.run(run_items(
        items, load=lambda item: str(item["id"]), engine=AnswerEngine(items, answer),
        score=lambda text, item: bench.score_item(text, item, profile), store=store,
        sampling=SamplingParams(n=1, max_new_tokens=8), concurrency=4, batch_size=16, benchmark=bench.name))
    assert summary.failed == 0 and summary.scored == len(items)
    return bench.report([(i, store.results[str(i["id"])]) for i in items], profile)


def project(items: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Each item's `keys` (a missing key is a KeyError): what two loaders must agree on."""
    return [{k: i[k] for k in keys} for i in items]


def oracle(bench: Benchmark) -> Callable[[Mapping[str, Any]], str]:
    return bench.oracle


def constant(text: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda item: text

"""The benchmark registry: one declarative definition per benchmark; adding one touches one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Prompted:
    """What the engine needs for one item: the prompt text with placeholders and the media paths."""

    text: str
    videos: Sequence[str] = ()
    images: Sequence[str] = ()


class PromptFn(Protocol):
    """(item, thinking, template=…) → prompt text and media.

    `template` is the run's `rollout.template` (a .jinja path or template text; None: the built-in
    one), so the held-out split is evaluated with exactly the prompt training used.
    """

    def __call__(self, item: Mapping, thinking: bool, *, template: str | None = None) -> Prompted: ...


@dataclass(frozen=True)
class Benchmark:
    name: str
    load: Callable[..., list[dict]]                 # source → items (each with a unique "id")
    prompt: PromptFn                                # (item, thinking, *, template=None) → prompt text and media
    score: Callable[[str, Mapping], dict[str, float]]  # (model output, item) → {"score": …, …}
    group_key: Callable[[Mapping], str] = lambda item: str(item.get("problem_type", "all"))
    metric: str = "accuracy"
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


BENCHMARKS: dict[str, Benchmark] = {}


def register_benchmark(bench: Benchmark) -> Benchmark:
    if bench.name in BENCHMARKS:
        raise ValueError(f"benchmark {bench.name!r} is already registered")
    BENCHMARKS[bench.name] = bench
    return bench


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}") from None

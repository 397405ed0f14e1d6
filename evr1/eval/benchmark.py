"""The benchmark registry: one declarative definition per benchmark; adding one touches one place.

A `Benchmark` says where its data lives (annotation files, video root), how to read each format it
comes in, how to ask (prompt per profile, model family and thinking switch), how to score one answer
per scoring profile, and how to aggregate with the benchmark's official metric. Definitions live in
`evr1/eval/benchmarks/<name>.py`, one module each, imported by `load_all()`.

Scoring profiles: `official` (the benchmark's own rules, with the reference document's bugs fixed,
each deviation listed in `deviations`) and `easyvideor1` (EasyVideoR1's single extractor, scorer and
aggregation, for side-by-side comparison with its published numbers).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evr1.eval.items import ItemError, normalise, unique_ids
from evr1.eval.profiles import aggregate_for, prompt_for, scorer_for
from evr1.eval.types import (PROFILES, Aggregate, ItemScorer, PromptContext, Prompted, PromptFn,  # noqa: F401 (re-exported)
                              Report)


def _never(item: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Benchmark:
    name: str                                       # registry key: the annotation file's stem
    title: str
    prompt: PromptFn                                # the official prompt (the easyvideor1 one is shared)
    score: ItemScorer                               # the official per-item scorer
    aggregate: Aggregate                            # the official metric with its breakdowns
    files: tuple[str, ...] = ()                     # annotation files in EasyVideoR1's schema (first found wins)
    video_root: str = ""                            # folder under `eval.data_dir` that holds the videos
    official_format: Callable[[Path], list[dict]] | None = None  # the benchmark's own release → records
    expected_items: int | None = None               # items in the shared annotation file
    group_key: Callable[[Mapping[str, Any]], str] = lambda item: str(item.get("problem_type", "all"))
    needs_judge: Callable[[Mapping[str, Any]], bool] = _never  # items the LLM judge decides
    subtitles: Callable[[Mapping[str, Any], Path], str | None] | None = None  # (item, video root) → text
    aliases: tuple[str, ...] = ()                   # other registry names (e.g. a duplicate file's stem)
    id_fields: tuple[str, ...] = ("problem_id",)     # record fields that together name an item
    reference: str | None = None                    # row key in evr1.eval.reference
    deviations: tuple[str, ...] = ()                # where `official` departs from the official code, and why
    description: str = ""
    oracle: Callable[[Mapping[str, Any]], str] = lambda item: str(item["gt"])  # a correct answer, in the expected form
    load_fn: Callable[..., list[dict]] | None = None  # custom loader (the held-out split)
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- data ---------------------------------------------------------------------------------
    def item(self, record: Mapping[str, Any], index: int | None = None) -> dict[str, Any]:
        """One record (as in the file, or already an item) → the canonical item."""
        return normalise(record, benchmark=self.name, index=index, id_fields=self.id_fields)

    def load(self, source: str | Path | None = None, *, annotations_dir: str | Path | None = None,
             fmt: str = "auto") -> list[dict[str, Any]]:
        """Items from `source` (a file, or a folder for the official format), else the first of
        `files` found in `annotations_dir`. `fmt`: "evr", "official" or "auto" (by content)."""
        if self.load_fn is not None:
            return self.load_fn(source)
        path = Path(source) if source is not None else self.find(annotations_dir)
        if fmt == "auto":
            fmt = "evr" if looks_like_evr(path) else "official"
        if fmt == "official":
            if self.official_format is None:
                raise ValueError(f"{self.name}: {path} is not in EasyVideoR1's schema and this benchmark has no other format")
            records = self.official_format(path)
        elif fmt == "evr":
            records = read_records(path)
        else:
            raise ValueError(f"{self.name}: unknown annotation format {fmt!r} (evr, official, auto)")
        return unique_ids([self.item(r, i) for i, r in enumerate(records)], benchmark=self.name)

    def find(self, annotations_dir: str | Path | None) -> Path:
        if annotations_dir is None:
            raise ValueError(f"{self.name}: no annotation file given and no eval.annotations_dir set")
        for name in self.files:
            if (Path(annotations_dir) / name).is_file():
                return Path(annotations_dir) / name
        raise FileNotFoundError(f"{self.name}: none of {list(self.files)} in {annotations_dir}")

    # ---- asking and scoring -------------------------------------------------------------------
    def prompted(self, item: Mapping[str, Any], ctx: PromptContext) -> Prompted:
        """The prompt and media paths (relative to the video root) for one item under `ctx`."""
        text = prompt_for(self, item, ctx)
        videos = tuple(item.get("videos") or ((item["video"],) if item.get("video") else ()))
        images = tuple(item.get("images") or ((item["image"],) if item.get("image") else ()))
        segment = None  # a clip cut by time, where the official protocol cuts one (EasyVideoR1 never does)
        if (self.extra.get("segments") and ctx.profile == "official"
                and (item.get("start") is not None or item.get("end") is not None)):
            segment = (_seconds(item.get("start")), _seconds(item.get("end")))
        return Prompted(text=text, videos=videos, images=images, segments=(segment,) * len(videos))

    def score_item(self, output: str, item: Mapping[str, Any], profile: str = "official") -> dict[str, Any]:
        return scorer_for(self, profile)(output, item)

    def report(self, pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], profile: str = "official") -> Report:
        return aggregate_for(self, profile)(pairs)


def _seconds(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def read_records(path: Path) -> list[dict]:
    """A JSON array or a JSONL file of records."""
    from evr1.eval.formats import read_table

    if Path(path).suffix == ".jsonl":
        return read_table(path)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ItemError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    return data


def looks_like_evr(path: Path) -> bool:
    """True for a file of records in EasyVideoR1's schema (`problem`, `solution`, `problem_type`)."""
    if Path(path).is_dir() or Path(path).suffix not in (".json", ".jsonl"):
        return False
    try:
        records = read_records(path)
    except (ItemError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return bool(records) and isinstance(records[0], dict) and {"problem", "solution", "problem_type"} <= set(records[0])


BENCHMARKS: dict[str, Benchmark] = {}


def register_benchmark(bench: Benchmark) -> Benchmark:
    """Add `bench` under its name and aliases; a name taken twice is an error."""
    for name in (bench.name, *bench.aliases):
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} is already registered")
    for name in (bench.name, *bench.aliases):
        BENCHMARKS[name] = bench
    return bench


_loaded = False


def load_all() -> None:
    """Import every module of `evr1.eval.benchmarks` (each registers its definitions)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import evr1.eval.benchmarks as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")


def get_benchmark(name: str) -> Benchmark:
    load_all()
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}") from None

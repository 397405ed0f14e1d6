"""The benchmark catalogue as markdown (`evr1 benchmarks --markdown`; docs/eval.md embeds it):
one row per definition with its files, video root, items, official headline metric, and every
deviation from the official code, read from the definitions themselves so the docs cannot drift."""

from __future__ import annotations

from evr1.eval.benchmark import BENCHMARKS, Benchmark, load_all


def definitions() -> list[Benchmark]:
    """Each registered definition once (aliases folded), by name; the held-out split left out."""
    load_all()
    seen: dict[int, Benchmark] = {}
    for b in BENCHMARKS.values():
        if not b.extra.get("single_profile"):
            seen.setdefault(id(b), b)
    return sorted(seen.values(), key=lambda b: b.name)


def headline_metric(b: Benchmark) -> str:
    return b.aggregate([]).metric


def markdown() -> str:
    rows = ["| name | benchmark | annotation files | video root | items | official headline |",
            "| --- | --- | --- | --- | ---: | --- |"]
    notes = []
    for b in definitions():
        names = ", ".join(f"`{n}`" for n in (b.name, *b.aliases))
        rows.append(f"| {names} | {b.title} | {', '.join(b.files) or '–'} | `{b.video_root}/` | "
                    f"{b.expected_items or '–'} | {headline_metric(b)} |")
        if b.deviations:
            notes.append(f"**{b.title}** (`{b.name}`)\n" + "\n".join(f"- {d}" for d in b.deviations))
    return "\n".join(rows) + "\n\n### Deviations from the official code\n\n" + "\n\n".join(notes) + "\n"

"""Markdown reports: one benchmark's headline and breakdowns, and a suite table beside published numbers."""

from __future__ import annotations

from collections.abc import Sequence

from evr1.eval.reference import references
from evr1.eval.runner import EvalSummary


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _is_count(part: str) -> bool:
    """Parts that are item counts, not fractions: the judge's and the rule stage's `undecided`."""
    return part.startswith(("judge/", "undecided"))


def _undecided(s: EvalSummary) -> str:
    n = s.parts.get("undecided")
    return "" if n is None else f", {int(n)} undecided ({int(s.parts.get('undecided/judged', 0))} judged)"


def summary_table(s: EvalSummary, *, reference_model: str | None = None) -> str:
    """The headline (with coverage), the metric's breakdowns, the groups, and published numbers."""
    lines = [f"### {s.benchmark}: {s.metric} {_pct(s.score)} ({s.scored}/{s.items} scored, {s.failed} failed{_undecided(s)}; "
             f"profile {s.profile})", "", "| part | value (%) |", "| --- | ---: |",
             f"| **{s.metric}** | **{_pct(s.score)}** |"]
    lines += [f"| {name} | {_pct(v)} |" for name, v in s.parts.items() if not _is_count(name)]
    lines += [f"| {name} (count) | {int(v)} |" for name, v in s.parts.items() if _is_count(name)]
    lines += [f"| group {g} (n={int(r['n'])}) | {_pct(r['score'])} |" for g, r in s.by_group.items()]
    if reference_model:
        for ref in references(s.benchmark, reference_model):
            lines.append(f"| {reference_model}, {ref.source} [{ref.profile} profile] | {ref.value:.1f} |")
    return "\n".join(lines) + "\n"


def suite_table(summaries: Sequence[EvalSummary], *, reference_model: str | None = None) -> str:
    """One row per benchmark: our headline, coverage, and the published numbers for the same model
    computed under the same profile (a number from another profile is shown, marked, never compared)."""
    head = "| benchmark | metric | profile | ours (%) | items | scored | failed | undecided |"
    rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
    if reference_model:
        head += f" published for {reference_model} (%) | Δ |"
        rule += " --- | ---: |"
    rows = [head, rule]
    for s in summaries:
        awaiting = int(s.parts.get("judge/awaiting", 0))
        ours = _pct(s.score) + (f" ({awaiting} awaiting the judge, counted wrong)" if awaiting else "")
        und = s.parts.get("undecided")
        und_cell = "–" if und is None else f"{int(und)} ({int(s.parts.get('undecided/judged', 0))} judged)"
        row = f"| {s.benchmark} | {s.metric} | {s.profile} | {ours} | {s.items} | {s.scored} | {s.failed} | {und_cell} |"
        if reference_model:
            refs = references(s.benchmark, reference_model)
            same = [r for r in refs if r.profile == s.profile]
            shown = "; ".join(f"{r.value:.1f} ({r.source}{'' if r.profile == s.profile else ', other profile'})"
                              for r in refs) or "–"
            delta = f"{100 * s.score - same[0].value:+.1f}" if same else "–"
            row += f" {shown} | {delta} |"
        rows.append(row)
    return "\n".join(rows) + "\n"

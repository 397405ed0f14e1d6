"""Ingestion of mixed offline-online records: the trajectory fields are validated (with `data.offline_key`)
and reach the sample rows the trainer reads."""

from __future__ import annotations

from tests.data.test_ingest import good, run, vocab_resolver, ws  # noqa: F401 - `ws` is a fixture


def test_offline_fields_are_validated_and_kept(ws):  # noqa: F811
    records = [
        good(problem_id="with", has_offline_trajectory=True, offline_output="<answer>A</answer>"),
        good(problem_id="without", has_offline_trajectory=False),
        good(problem_id="plain"),
        good(problem_id="empty", has_offline_trajectory=True, offline_output="  "),
        good(problem_id="missing", has_offline_trajectory=True),
        good(problem_id="number", has_offline_trajectory=True, offline_output=3),
        good(problem_id="flag", has_offline_trajectory="yes", offline_output="<answer>A</answer>"),
    ]
    report, samples, rejects, _ = run(ws, records, resolve_problem_type=vocab_resolver, offline_key="offline_output")
    assert {s["sample_id"] for s in samples} == {"with", "without", "plain"}
    kept = {s["sample_id"]: s["extra"] for s in samples}
    assert kept["with"]["has_offline_trajectory"] is True and kept["with"]["offline_output"] == "<answer>A</answer>"
    reasons = {r["record_id"]: (r["field"], r["kind"], r["reason"]) for r in rejects}
    assert reasons["empty"][:2] == ("offline_output", "missing_field") and "is empty" in reasons["empty"][2]
    assert reasons["missing"][:2] == ("offline_output", "missing_field")
    assert reasons["number"][:2] == ("offline_output", "wrong_type") and "got number" in reasons["number"][2]
    assert reasons["flag"][:2] == ("has_offline_trajectory", "wrong_type")
    # Each reason names the record (file:line and problem_id) and the field.
    assert "t.jsonl:4" in reasons["empty"][2] and "'empty'" in reasons["empty"][2]

    # Without offline_key (the mode off) the fields are not checked: they pass through untouched.
    report, samples, rejects, _ = run(ws, records, resolve_problem_type=vocab_resolver)
    assert report.rejected == 0 and len(samples) == len(records)

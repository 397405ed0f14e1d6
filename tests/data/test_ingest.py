"""Ingestion into real Lance tables: accepted rows, every reject rule, ids, formats, confinement, modes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evr1.data import REJECTS_SCHEMA, SAMPLES_SCHEMA, Sample, ingest, read_rejects, read_samples
from evr1.data.ingest import EmptyDatasetError

VOCAB = {"multiple choice", "numerical", "boolean", "temporal grounding", "open-ended"}


def vocab_resolver(raw: str) -> str | None:
    """A resolver that knows a fixed vocabulary, like the config's problem-type registry."""
    key = raw.strip().lower()
    return key if key in VOCAB else None


@pytest.fixture
def ws(tmp_path):
    """A workspace with one video and one image file (ingest checks existence, not content)."""
    (tmp_path / "clip.mp4").write_bytes(b"\x00")
    (tmp_path / "pic.png").write_bytes(b"\x00")
    return tmp_path


def good(**fields) -> dict:
    record = {"problem": "<video>\nWhat colour?", "answer": "A", "problem_type": "multiple choice",
              "options": ["A. red", "B. blue"], "videos": ["clip.mp4"], "data_type": "video"}
    record.update(fields)
    return {k: v for k, v in record.items() if v is not ...}  # `...` drops a field


def write_jsonl(path: Path, records: list) -> list[str]:
    """Write dicts as JSON lines and strings verbatim; returns the lines."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return lines


def run(ws: Path, records: list, **kwargs):
    """Ingest records; a split with nothing accepted raises after writing both tables (its report is kept)."""
    lines = write_jsonl(ws / "t.jsonl", records)
    try:
        report = ingest([ws / "t.jsonl"], ws / "samples.lance", ws / "rejects.lance", **kwargs)
    except EmptyDatasetError as exc:
        assert exc.report.accepted == 0 and "\n" not in str(exc)
        report = exc.report
    assert report.accepted + report.rejected == report.read == len(lines)
    return report, read_samples(ws / "samples.lance"), read_rejects(ws / "rejects.lance"), lines


def test_bad_input_case_keeps_good_records_and_explains_each_bad_one(ws):
    """The issue's case: malformed line, missing video, unknown type and no answer among good records."""
    records = [
        good(problem_id="ok-1"),
        '{"problem": "<video>\\nbroken", "answer": ',
        good(problem_id="no-video", videos=["nowhere.mp4"]),
        good(problem_id="odd-type", problem_type="interpretive dance"),
        good(problem_id="no-answer", answer=...),
        good(problem_id="ok-2", answer="B"),
    ]
    report, samples, rejects, lines = run(ws, records, resolve_problem_type=vocab_resolver)
    assert (report.read, report.accepted, report.rejected) == (6, 2, 4)
    assert [s["sample_id"] for s in samples] == ["ok-1", "ok-2"]
    assert report.reasons == {"malformed_json": 1, "media_missing": 1, "unknown_problem_type": 1, "missing_field": 1}
    expected = {  # line → (record_id, field, words the reason must contain)
        2: ("", "", ["malformed JSON"]),
        3: ("no-video", "videos", ["'videos[0]'", "nowhere.mp4", "does not exist"]),
        4: ("odd-type", "problem_type", ["'problem_type'", "'interpretive dance'", "not a known problem type"]),
        5: ("no-answer", "answer", ["'answer'", "missing"]),
    }
    assert len(rejects) == len(expected)
    for row in rejects:
        line = int(row["source"].rsplit(":", 1)[1])
        record_id, field, words = expected[line]
        assert row["source"] == f"{ws / 't.jsonl'}:{line}"
        assert (row["record_id"], row["field"], row["stage"]) == (record_id, field, "ingest")
        assert row["raw"] == lines[line - 1]  # verbatim, nothing lost
        assert row["reason"].startswith(f"record {row['source']}")
        for word in words:
            assert word in row["reason"]


REJECT_CASES = {  # name → (record or raw line, kind, field, words in the reason)
    "array": ("[1, 2]", "not_an_object", "", ["JSON array, not an object"]),
    "string": ('"just text"', "not_an_object", "", ["JSON string"]),
    "no problem": (good(problem=...), "missing_field", "problem", ["'problem' is missing"]),
    "blank problem": (good(problem="  "), "missing_field", "problem", ["'problem' is empty"]),
    "problem not str": (good(problem=7), "wrong_type", "problem", ["'problem' must be a string, got number"]),
    "empty answer": (good(answer=""), "missing_field", "answer", ["'answer' is empty"]),
    "bool answer": (good(answer=True), "wrong_type", "answer", ["JSON boolean"]),
    "list answer, not grounding": (good(answer=["A"]), "wrong_type", "answer", ["JSON array", "'multiple choice'"]),
    "options not list": (good(options="A. red, B. blue"), "wrong_type", "options", ["'options' must be a list"]),
    "options item": (good(options=["A. red", 2]), "wrong_type", "options", ["'options[1]'", "got number"]),
    "videos not list": (good(videos="clip.mp4"), "wrong_type", "videos", ["'videos' must be a list"]),
    "videos item": (good(videos=[{"path": "clip.mp4"}]), "wrong_type", "videos", ["'videos[0]'", "got object"]),
    "empty video path": (good(videos=[""]), "wrong_type", "videos", ["'videos[0]' is an empty string"]),
    "type not str": (good(problem_type=3), "wrong_type", "problem_type", ["'problem_type' must be a string"]),
    "no type": (good(problem_type=...), "unknown_problem_type", "problem_type", ["'problem_type' is missing"]),
    "image and video": (good(images=["pic.png"]), "mixed_media", "images", ["both 'images' and 'videos'"]),
    "image placeholder, video": (
        good(problem="<image>\nWhat colour?"), "placeholder_mismatch", "problem", ["<image>", "has videos"]),
    "video placeholder, text": (
        good(videos=..., data_type=...), "placeholder_mismatch", "problem", ["<video>", "has no media"]),
    "both placeholders, one medium": (
        good(problem="<image><video> What?"), "placeholder_mismatch", "problem", ["both <image> and <video>"]),
    "NaN answer": ('{"problem": "<video> Q", "answer": NaN, "problem_type": "numerical", "videos": ["clip.mp4"]}',
                   "wrong_type", "answer", ["non-finite number nan"]),
    "two placeholders, one video": (
        good(problem="<video> then <video>"), "placeholder_mismatch", "problem", ["2 <video>", "1 video"]),
    "declared image, has video": (
        good(data_type="image"), "data_type_mismatch", "data_type", ["declares 'image'", "has videos"]),
    "declared video, no media": (
        good(videos=..., problem="What?", data_type="video"), "data_type_mismatch", "data_type", ["no media"]),
    "unknown data_type": (good(data_type="audio"), "wrong_type", "data_type", ["'audio'"]),
    "one option": (good(options=["A. red"]), "too_few_options", "options", ["1 option", "at least 2"]),
    "missing image": (
        good(videos=..., images=["gone.png"], data_type="image", problem="<image> What?"),
        "media_missing", "images", ["'images[0]'", "gone.png"]),
}


@pytest.mark.parametrize("name", list(REJECT_CASES))
def test_each_reject_rule(ws, name):
    record, kind, field, words = REJECT_CASES[name]
    report, samples, rejects, lines = run(ws, [record])
    assert (report.accepted, report.rejected, samples) == (0, 1, [])
    (row,) = rejects
    assert (row["kind"], row["field"], row["raw"]) == (kind, field, lines[0])
    assert report.reasons == {kind: 1}
    assert f"t.jsonl:1" in row["reason"]
    for word in words:
        assert word in row["reason"], row["reason"]


def test_multiple_choice_without_options_needs_a_letter_and_empty_options_are_rejected(ws):
    """Options may live in the question text (then the answer must be a letter); `options: []` says there
    are none, which a multiple-choice question cannot be."""
    report, samples, rejects, _ = run(ws, [good(options=...), good(options=..., answer="blue"),
                                           good(options=[], answer="B")])
    assert report.accepted == 1 and [s["options"] for s in samples] == [[]]
    assert [(r["kind"], r["field"]) for r in rejects] == [("answer_not_an_option", "answer"),
                                                         ("too_few_options", "options")]
    assert "is empty" in rejects[1]["reason"]


@pytest.mark.parametrize(("answer", "text"), [(3, "3"), (2.5, "2.5"), (0, "0"), (-1.25, "-1.25")])
def test_numeric_answer_becomes_a_string_with_a_note(ws, answer, text):
    report, (sample,), _, _ = run(ws, [good(problem_type="numerical", options=..., answer=answer)])
    assert sample["answer"] == text
    assert f"answer: converted JSON number {text} to the string '{text}'" in sample["notes"]


def test_grounding_answer_object_is_serialised(ws):
    answer = {"time": [1.0, 2.5]}
    _, (sample,), _, _ = run(ws, [good(problem_type="temporal grounding", options=..., answer=answer)])
    assert json.loads(sample["answer"]) == answer
    assert "answer: serialised JSON object to a string" in sample["notes"]


def test_missing_placeholder_is_inserted_and_noted(ws):
    records = [
        good(problem="What colour?", problem_id="v"),
        good(problem="How many shapes?", problem_id="i", videos=..., images=["pic.png"], data_type="image",
             problem_type="numerical", options=..., answer="2"),
        good(problem="Already <video> here", problem_id="kept"),
        good(problem="Plain text question", problem_id="t", videos=..., data_type="text"),
    ]
    _, samples, _, _ = run(ws, records)
    by_id = {s["sample_id"]: s for s in samples}
    assert by_id["v"]["problem"] == "<video>\nWhat colour?"
    assert by_id["i"]["problem"] == "<image>\nHow many shapes?"
    assert "problem: inserted 1 <video> placeholder(s) at the start" in by_id["v"]["notes"]
    assert by_id["kept"]["problem"] == "Already <video> here" and by_id["kept"]["notes"] == []
    assert by_id["t"]["problem"] == "Plain text question" and by_id["t"]["data_type"] == "text"
    assert [by_id[k]["data_type"] for k in ("v", "i")] == ["video", "image"]


def test_columns_paths_and_extra(ws):
    record = good(problem_id=17, data_source="demo", content="legacy text", Problem_Type="ignored")
    _, (sample,), _, _ = run(ws, [record], split="heldout", resolve_problem_type=vocab_resolver)
    assert sample["sample_id"] == "17" and sample["split"] == "heldout"
    assert sample["videos"] == [str((ws / "clip.mp4").resolve())]  # absolute, resolved against the file's dir
    assert sample["problem_type"] == "multiple choice" and sample["problem_type_raw"] == "multiple choice"
    # every field not made into a column passes through, decoded, including a legacy `content` column
    assert sample["extra"] == {"problem_id": 17, "data_source": "demo", "content": "legacy text",
                               "Problem_Type": "ignored"}
    assert sample["source"] == f"{ws / 't.jsonl'}:1"
    assert lance.dataset(str(ws / "samples.lance")).schema == SAMPLES_SCHEMA
    assert Sample.model_validate(sample).to_row()["extra"] == json.dumps(sample["extra"], sort_keys=True,
                                                                          separators=(",", ":"))


def test_split_names_are_quoted_in_filters(ws):
    run(ws, [good(problem_id="q")], split="it's")
    assert [s["sample_id"] for s in read_samples(ws / "samples.lance", split="it's")] == ["q"]
    assert read_samples(ws / "samples.lance", split="it") == []


def test_resolver_canonicalises_and_keeps_raw(ws):
    aliases = {"mc": "multiple choice", "multiple_choice": "multiple choice"}
    report, samples, _, _ = run(ws, [good(problem_type=" MC "), good(problem_type="multiple_choice", answer="B")],
                                resolve_problem_type=lambda raw: aliases.get(raw.strip().lower()))
    assert [(s["problem_type"], s["problem_type_raw"]) for s in samples] == [
        ("multiple choice", " MC "), ("multiple choice", "multiple_choice")]
    assert report.per_problem_type == {"multiple choice": 2}


def test_sample_id_is_stable_across_ingests(ws):
    records = [good(problem_id="p1"), good(answer="B"), good(problem_id="dup", answer="A"),
               good(problem_id="dup", answer="B")]
    _, first, _, _ = run(ws, records)
    _, second, _, _ = run(ws, records)
    ids = [s["sample_id"] for s in first]
    assert ids == [s["sample_id"] for s in second]
    assert ids[0] == "p1"  # a unique problem_id is the id
    hashed = ids[1:]  # no problem_id, or a problem_id used twice → a content hash
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in hashed) and len(set(hashed)) == 3
    assert "sample_id: problem_id 'dup' occurs 2 times in the inputs; used a content hash" in first[2]["notes"]


def test_hash_id_ignores_layout_and_position(ws):
    """The id hashes the parsed record (canonical JSON), not its text or its line number."""
    record = good(answer="B")
    _, (a,), _, _ = run(ws, [record])
    reordered = json.dumps(dict(reversed(list(record.items()))), indent=None, separators=(" ,", " : "))
    _, samples, _, _ = run(ws, [good(problem_id="other"), reordered])
    assert samples[1]["sample_id"] == a["sample_id"]


def test_duplicate_record_names_the_first_occurrence(ws):
    report, samples, rejects, _ = run(ws, [good(), good(answer="B"), good()])
    assert (report.accepted, report.rejected) == (2, 1)
    (row,) = rejects
    assert row["kind"] == "duplicate_sample_id" and row["field"] == "sample_id"
    assert row["source"].endswith("t.jsonl:3")
    assert f"first seen at {ws / 't.jsonl'}:1" in row["reason"]


def test_json_array_and_parquet_inputs_match_jsonl(ws):
    records = [good(problem_id="a", answer=3, problem_type="numerical", options=...),
               good(problem_id="b", options=None)]
    write_jsonl(ws / "t.jsonl", records)
    (ws / "t.json").write_text(json.dumps(records, indent=2))
    # Parquet cannot mix number and string answers in one column: store the canonical string form.
    pq.write_table(pa.Table.from_pylist([dict(r, answer=str(r["answer"])) for r in records]), ws / "t.parquet")
    rows = {}
    for ext in ("jsonl", "json", "parquet"):
        report = ingest([ws / f"t.{ext}"], ws / f"{ext}.lance", ws / f"{ext}_rejects.lance")
        assert (report.read, report.accepted) == (2, 2), ext
        rows[ext] = read_samples(ws / f"{ext}.lance", columns=["sample_id", "answer", "options", "videos", "source"])
    assert [r["source"] for r in rows["json"]] == [f"{ws / 't.json'}#1", f"{ws / 't.json'}#2"]  # record N, from 1
    assert [r["source"] for r in rows["parquet"]] == [f"{ws / 't.parquet'}#1", f"{ws / 't.parquet'}#2"]
    strip = lambda rs: [{k: v for k, v in r.items() if k != "source"} for r in rs]  # noqa: E731
    assert strip(rows["jsonl"]) == strip(rows["json"]) == strip(rows["parquet"])
    assert rows["jsonl"][0]["answer"] == "3" and rows["jsonl"][1]["options"] == []


def test_parquet_bad_row_is_rejected_with_its_index(ws):
    rows = [good(problem_id="a"), good(problem_id="b", problem="<video> <video>")]
    pq.write_table(pa.Table.from_pylist(rows), ws / "t.parquet")
    report = ingest([ws / "t.parquet"], ws / "s.lance", ws / "r.lance")
    (row,) = read_rejects(ws / "r.lance")
    assert (report.accepted, row["source"], row["record_id"]) == (1, f"{ws / 't.parquet'}#2", "b")
    assert row["reason"].startswith(f"record {ws / 't.parquet'}#2 (row 2 of the Parquet file, problem_id 'b'): ")
    assert json.loads(row["raw"])["problem_id"] == "b"


def test_json_lines_in_a_json_file_and_directory_sources(ws):
    data = ws / "data"
    data.mkdir()
    (data / "clip.mp4").write_bytes(b"\x00")
    write_jsonl(data / "a.json", [good(problem_id="x")])  # JSON lines with a .json name, as HF accepts
    write_jsonl(data / "b.jsonl", [good(problem_id="y"), "not json"])
    (data / "notes.txt").write_text("ignored")
    report = ingest([data], ws / "s.lance", ws / "r.lance")
    assert (report.read, report.accepted, report.rejected) == (3, 2, 1)
    assert read_rejects(ws / "r.lance")[0]["source"] == f"{data / 'b.jsonl'}:2"


def test_media_paths_are_confined_to_the_data_root(ws):
    root = ws / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "in.mp4").write_bytes(b"\x00")
    records = [
        good(problem_id="relative", videos=["sub/in.mp4"]),
        good(problem_id="absolute-inside", videos=[str(root / "sub" / "in.mp4")], answer="B"),
        good(problem_id="dotdot", videos=["sub/../../clip.mp4"]),  # exists, but outside the root
        good(problem_id="absolute-outside", videos=[str(ws / "clip.mp4")]),
    ]
    report, samples, rejects, _ = run(ws, records, data_root=root)
    assert [s["sample_id"] for s in samples] == ["relative", "absolute-inside"]
    assert samples[0]["videos"] == [str((root / "sub" / "in.mp4").resolve())]
    assert report.reasons == {"media_outside_root": 2}
    assert [r["record_id"] for r in rejects] == ["dotdot", "absolute-outside"]
    assert all("outside data_root" in r["reason"] and r["field"] == "videos" for r in rejects)


def test_check_media_exists_off_still_confines(ws):
    records = [good(problem_id="missing", videos=["later.mp4"]), good(problem_id="escape", videos=["../x.mp4"])]
    report, samples, rejects, _ = run(ws, records, data_root=ws, check_media_exists=False)
    assert [s["sample_id"] for s in samples] == ["missing"]
    assert [r["kind"] for r in rejects] == ["media_outside_root"]


def test_empty_tables_still_have_their_schema(ws):
    report, samples, rejects, _ = run(ws, [good()])
    assert report.rejected == 0 and rejects == []
    assert lance.dataset(str(ws / "rejects.lance")).schema == REJECTS_SCHEMA
    report, samples, _, _ = run(ws, ["{"])
    assert report.accepted == 0 and samples == []
    assert lance.dataset(str(ws / "samples.lance")).schema == SAMPLES_SCHEMA


def test_reingest_overwrites_with_a_new_version(ws):
    first, _, _, _ = run(ws, [good(problem_id="a"), good(problem_id="b")])
    second, samples, _, _ = run(ws, [good(problem_id="c")])
    assert (first.samples_version, second.samples_version) == (1, 2)
    assert second.rejects_version == 2
    assert [s["sample_id"] for s in samples] == ["c"]
    assert first.content_hash != second.content_hash
    third, _, _, _ = run(ws, [good(problem_id="c")])
    assert third.content_hash == second.content_hash  # same rows → same hash, for downstream caching
    # Time travel: the first version is still readable.
    assert lance.dataset(str(ws / "samples.lance"), version=1).count_rows() == 2


def test_append_mode_adds_rows_and_rejects_ids_already_stored(ws):
    run(ws, [good(problem_id="a")], split="train")
    report, samples, rejects, _ = run(
        ws, [good(problem_id="h"), good(problem_id="a", answer="B"), "{"], split="heldout", mode="append")
    assert (report.accepted, report.rejected, report.samples_version) == (1, 2, 2)
    assert [(s["sample_id"], s["split"]) for s in samples] == [("a", "train"), ("h", "heldout")]
    dup = next(r for r in rejects if r["kind"] == "duplicate_sample_id")
    assert "already in" in dup["reason"] and dup["record_id"] == "a"
    assert [s["sample_id"] for s in read_samples(ws / "samples.lance", split="heldout")] == ["h"]
    only = read_samples(ws / "samples.lance", split="train", columns=["sample_id", "answer"])
    assert only == [{"sample_id": "a", "answer": "A"}]


def test_unreadable_sources_raise_naming_the_file(ws):
    with pytest.raises(ValueError, match="nope.jsonl does not exist"):
        ingest([ws / "nope.jsonl"], ws / "s.lance", ws / "r.lance")
    (ws / "t.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported extension '.csv'"):
        ingest([ws / "t.csv"], ws / "s.lance", ws / "r.lance")
    (ws / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="cannot read dataset source .*bad.parquet"):
        ingest([ws / "bad.parquet"], ws / "s.lance", ws / "r.lance")
    with pytest.raises(ValueError, match="mode"):
        ingest([], ws / "s.lance", ws / "r.lance", mode="upsert")


# --- property: whatever comes in, every record lands in exactly one table -------------------------

json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
plausible = st.fixed_dictionaries(
    {},
    optional={
        "problem": st.sampled_from(["<video> Q", "Q", "<image> Q", "<image><video>", ""]) | json_values,
        "answer": st.sampled_from(["A", "", "3"]) | json_values,
        "problem_type": st.sampled_from(["multiple choice", "numerical", "temporal grounding", ""]) | json_values,
        "options": st.sampled_from([["A. x", "B. y"], ["A. x"], []]) | json_values,
        "videos": st.sampled_from([["clip.mp4"], ["gone.mp4"], ["../clip.mp4"], []]) | json_values,
        "images": st.sampled_from([["pic.png"], []]) | json_values,
        "data_type": st.sampled_from(["video", "image", "text"]) | json_values,
        "problem_id": st.sampled_from(["p", "q"]) | json_values,
    },
)
lines = st.lists(plausible.map(json.dumps) | json_values.map(json.dumps) | st.text(max_size=12), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=lines)
def test_every_record_is_accepted_or_rejected(ws, lines):
    """Random and half-valid input never raises, and accepted + rejected = read (blank lines are not records)."""
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    report, samples, rejects, written = run(ws, [line for line in lines if line.strip(" \t")], data_root=ws)
    assert len(samples) == report.accepted and len(rejects) == report.rejected
    assert sorted(r["raw"] for r in rejects) == sorted(
        line for line, src in ((ln, f"{ws / 't.jsonl'}:{i}") for i, ln in enumerate(written, 1))
        if src not in {s["source"] for s in samples})
    assert all(r["reason"].startswith(f"record {r['source']}") for r in rejects)


def test_unstorable_text_and_unusable_paths_are_rejected(ws):
    records = [
        good(problem_id="ok"),
        '{"problem": "<video> \\ud800", "answer": "A", "problem_type": "numerical", "videos": ["clip.mp4"]}',
        good(problem_id="nul", videos=["clip\u0000.mp4"]),
        good(problem_id="long", videos=["x" * 5000 + ".mp4"]),
    ]
    report, samples, rejects, lines = run(ws, records)
    assert [s["sample_id"] for s in samples] == ["ok"]
    assert [(r["kind"], r["field"]) for r in rejects] == [
        ("bad_text", "problem"), ("bad_media_path", "videos"), ("bad_media_path", "videos")]
    assert rejects[0]["raw"] == lines[1]
    assert "not valid Unicode" in rejects[0]["reason"] and "unusable" in rejects[1]["reason"]


def test_json_array_with_unstorable_text_keeps_an_escaped_raw(ws):
    (ws / "t.json").write_text('[{"problem": "\\ud800", "answer": "A"}]')
    with pytest.raises(EmptyDatasetError) as err:
        ingest([ws / "t.json"], ws / "s.lance", ws / "r.lance")
    report = err.value.report
    (row,) = read_rejects(ws / "r.lance")
    assert report.rejected == 1 and json.loads(row["raw"]) == {"problem": "\ud800", "answer": "A"}


def code(**fields) -> dict:
    record = {"problem": "Write add(a, b).", "answer": "def add(a, b):\n    return a + b", "problem_type": "code",
              "tests": ["assert add(1, 2) == 3"]}
    record.update(fields)
    return record


def test_code_samples_with_unjudgeable_tests_are_rejected_naming_the_record_and_field(ws):
    from evr1.rewards import resolve

    records = [code(problem_id="literal"),
               code(problem_id="program", tests="def check(candidate):\n    assert candidate(1, 2) == 3\n"),
               code(problem_id="program-ok", tests="def check(candidate):\n    assert candidate(1, 2) == 3\n",
                    entry_point="add"),
               code(problem_id="no-name", tests=["assert 1 == 1"])]
    report, samples, rejects, _ = run(ws, records, resolve_problem_type=resolve)
    assert sorted(s["sample_id"] for s in samples) == ["literal", "program-ok"]
    assert report.per_test_form == {"literal asserts": 1, "program": 1} and report.unjudgeable_tests == 0
    by_id = {r["record_id"]: r for r in rejects}
    assert sorted(by_id) == ["no-name", "program"]
    for record_id, words in (("program", "never calls it"), ("no-name", "never use a name the answer defines")):
        row = by_id[record_id]
        assert (row["kind"], row["field"]) == ("unjudgeable_tests", "tests")
        assert row["reason"].startswith(f"record {row['source']}") and f"problem_id {record_id!r}" in row["reason"]
        assert "field 'tests' cannot be judged safely" in row["reason"] and words in row["reason"]
        assert "reward.allow_unjudgeable_tests=true" in row["reason"]


def test_unjudgeable_tests_are_kept_counted_and_noted_when_allowed(ws, caplog):
    from evr1.rewards import resolve

    records = [code(problem_id="literal"), code(problem_id="no-name", tests=["assert 1 == 1"])]
    with caplog.at_level("WARNING", logger="evr1.data.ingest"):
        report, samples, rejects, _ = run(ws, records, resolve_problem_type=resolve, allow_unjudgeable_tests=True)
    assert rejects == [] and report.unjudgeable_tests == 1
    assert report.per_test_form == {"literal asserts": 1, "invalid": 1}
    notes = {s["sample_id"]: s["notes"] for s in samples}
    assert notes["literal"] == [] and "cannot be judged safely" in notes["no-name"][0]
    (warning,) = [r.getMessage() for r in caplog.records if "judged safely" in r.getMessage()]
    assert "kept 1 code sample(s)" in warning and "invalid 1" in warning


def test_long_prompts_are_counted_and_warned_about_once(ws, caplog):
    """Issue 36: a prompt within the limit can still cost gigabytes; ingest says how many are long and
    which is longest (the token count a higher layer turns into memory)."""
    from evr1.models.prompt_length import PromptLimit

    limit = PromptLimit(20_000, lambda text: len(text.split()))  # one token per word
    long_q = "<video>\n" + "word " * 5000
    records = [good(problem_id="short"), good(problem_id="long-1", problem=long_q),
               good(problem_id="long-2", problem=long_q + "more " * 100)]
    with caplog.at_level("WARNING", logger="evr1.data.ingest"):
        report, *_ = run(ws, records, prompt_limit=limit, long_prompt_tokens=4096)
    assert report.long_prompts == 2 and report.long_prompt_tokens == 4096
    assert report.longest_prompt_tokens == 5101 + 4 + limit.fixed_tokens  # "<video>" and words, options, template
    assert report.longest_prompt_source.endswith("t.jsonl:3")
    (warning,) = [r.getMessage() for r in caplog.records if "text tokens" in r.getMessage()]
    assert "2 prompt(s) of at least 4096 text tokens" in warning and "memory" in warning


def test_positions_count_from_1_and_say_what_they_count(ws):
    """Issue 36: JSON-array records were numbered from 0 but printed like 1-based lines. Every format
    counts from 1 now, and the reason says whether it is a line or a record of the array."""
    records = [good(problem_id="a"), good(problem_id="b"), good(problem_id="c", answer=...)]
    (ws / "t.json").write_text(json.dumps(records, indent=2))  # record 3 sits on line 30-odd
    write_jsonl(ws / "t.jsonl", records)
    for name, source, where in (("t.json", "t.json#3", "record 3 of the JSON array"), ("t.jsonl", "t.jsonl:3", "line 3")):
        ingest([ws / name], ws / f"{name}.lance", ws / f"{name}.rejects")
        (row,) = read_rejects(ws / f"{name}.rejects")
        assert row["source"] == str(ws / source)
        assert row["reason"] == f"record {ws / source} ({where}, problem_id 'c'): field 'answer' is missing"

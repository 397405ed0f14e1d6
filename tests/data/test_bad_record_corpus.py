"""A hostile corpus: every bad line is rejected on its own while the good records of the same run are
accepted (accepted + rejected = read); sources that cannot be read fail in one line naming the path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evr1.data import ingest, read_rejects, read_samples
from evr1.data.ingest import EmptyDatasetError
from evr1.data.sources import DatasetSourceError


def record(pid: str, **fields) -> dict:
    base = {"problem_id": pid, "problem": "<video>\nWhat colour?", "answer": "A", "problem_type": "multiple choice",
            "options": ["A. red", "B. blue", "C. green", "D. grey"], "videos": ["clip.mp4"]}
    return {**base, **fields}


def line(pid: str, **fields) -> bytes:
    return json.dumps(record(pid, **fields)).encode()


#: (bytes of one JSONL line, expected reject kind or None for accepted, words in the reason)
LINES: list[tuple[bytes, str | None, list[str]]] = [
    (line("good-1"), None, []),
    (line("latin1")[:-2] + b', "note": "caf\xe9"}', "malformed_json", ["not valid UTF-8", "0xe9"]),
    (b"[" * 100_000 + b"]" * 100_000, "malformed_json", ["nested too deep"]),
    (json.dumps({"problem_id": "deep", "x": json.loads("[" * 80 + "]" * 80)}).encode(), "malformed_json",
     ["more than 64 levels"]),
    (line("huge")[:-1] + b', "n": ' + b"7" * 5000 + b"}", "malformed_json", ["digits"]),
    (line("letter-E", answer="E"), "answer_not_an_option", ["'E'", "A, B, C, D"]),
    (line("purple", answer="purple"), "answer_not_an_option", ["'purple'"]),
    (line("number", answer=2), "answer_not_an_option", ["'2'"]),
    (line("no-options", options=[]), "too_few_options", ["is empty"]),
    (line("by-text", answer="Blue"), None, []),
    (line("labelled", answer="C. green"), None, []),
    (line("bracketed", answer="(D)"), None, []),
    (line("good-2", answer="b"), None, []),
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "clip.mp4").write_bytes(b"\x00")
    return tmp_path


def test_each_bad_line_is_rejected_alone_and_good_records_survive(ws):
    bom = b"\xef\xbb\xbf"  # a byte-order mark before the first (good) record
    (ws / "t.jsonl").write_bytes(bom + b"\n".join(text for text, _, _ in LINES) + b"\n")
    report = ingest([ws / "t.jsonl"], ws / "s.lance", ws / "r.lance")
    assert report.read == len(LINES) and report.accepted + report.rejected == report.read
    accepted = [s["source"] for s in read_samples(ws / "s.lance")]
    assert accepted == [f"{ws / 't.jsonl'}:{i}" for i, (_, kind, _) in enumerate(LINES, 1) if kind is None]
    rejects = {r["source"]: r for r in read_rejects(ws / "r.lance")}
    for i, (_, kind, words) in enumerate(LINES, 1):
        if kind is None:
            continue
        row = rejects[f"{ws / 't.jsonl'}:{i}"]
        assert row["kind"] == kind, (i, row["reason"])
        assert all(w in row["reason"] for w in words), row["reason"]
        assert "\n" not in row["reason"]


def test_json_array_elements_fail_alone(ws):
    good = [record("a"), record("b", answer="B")]
    text = json.dumps(good[0]) + ', {"problem_id": "bad", "n": ' + "9" * 5000 + "}, " + json.dumps(good[1])
    (ws / "t.json").write_bytes(b"\xef\xbb\xbf[" + text.encode() + b', "caf\xe9"]')
    report = ingest([ws / "t.json"], ws / "s.lance", ws / "r.lance")
    assert (report.read, report.accepted, report.rejected) == (4, 2, 2)
    assert [r["source"].rsplit("#", 1)[1] for r in read_rejects(ws / "r.lance")] == ["2", "4"]  # from 1


def test_folders_are_read_recursively_and_skipped_files_counted(ws):
    data = ws / "data"
    (data / "nested" / "deeper").mkdir(parents=True)
    (data / "a.jsonl").write_bytes(line("top") + b"\n")
    (data / "nested" / "deeper" / "b.jsonl").write_bytes(line("deep") + b"\n")
    (data / "nested" / "README.md").write_text("not data")
    (data / ".hidden.jsonl").write_bytes(line("hidden") + b"\n")
    os.mkfifo(data / "pipe.jsonl")
    report = ingest([data], ws / "s.lance", ws / "r.lance", data_root=ws)
    assert (report.files, report.accepted) == (2, 2)
    assert sorted(Path(p).name for p in report.skipped_files) == [".hidden.jsonl", "README.md", "pipe.jsonl"]


def test_unreadable_and_empty_sources_fail_in_one_line(ws):
    os.mkfifo(ws / "fifo.jsonl")
    cases = {
        ws / "fifo.jsonl": "is not a regular file",
        ws / "missing.jsonl": "does not exist",
        ws / "t.csv": "unsupported extension '.csv'",
    }
    (ws / "t.csv").write_text("a,b\n")
    for path, words in cases.items():
        with pytest.raises(DatasetSourceError) as err:
            ingest([path], ws / "s.lance", ws / "r.lance")
        assert words in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
    (ws / "empty").mkdir()
    (ws / "empty" / "notes.txt").write_text("x")
    with pytest.raises(EmptyDatasetError, match=r"no records in .*empty \(1 other file\(s\) skipped\)"):
        ingest([ws / "empty"], ws / "s.lance", ws / "r.lance")
    (ws / "bad.jsonl").write_text('{"problem": 1}\n{\n')
    with pytest.raises(EmptyDatasetError, match="all 2 records .* rejected .*malformed_json 1") as err:
        ingest([ws / "bad.jsonl"], ws / "s.lance", ws / "r.lance")
    assert len(read_rejects(ws / "r.lance")) == 2  # written before the error: the reasons are kept
    assert err.value.report.read == 2


def test_a_media_path_that_is_a_folder_or_fifo_is_not_a_regular_file(ws):
    (ws / "folder.mp4").mkdir()
    os.mkfifo(ws / "pipe.mp4")
    lines = [line("ok"), line("folder", videos=["folder.mp4"]), line("fifo", videos=["pipe.mp4"]),
             line("gone", videos=["gone.mp4"])]
    (ws / "t.jsonl").write_bytes(b"\n".join(lines))
    report = ingest([ws / "t.jsonl"], ws / "s.lance", ws / "r.lance")
    rejects = {r["record_id"]: r for r in read_rejects(ws / "r.lance")}
    assert report.accepted == 1 and report.reasons == {"media_not_a_file": 2, "media_missing": 1}
    assert "is not a regular file" in rejects["fifo"]["reason"] and "does not exist" in rejects["gone"]["reason"]

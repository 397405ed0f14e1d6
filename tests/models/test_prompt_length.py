"""Prompt-length limits (issue 15): over-long records go to the rejects with their length, cheaply,
and an encoded prompt over the limit is refused when it is built."""

from __future__ import annotations

import json

import pytest

from evr1.config import load_config
from evr1.data import ingest, read_rejects, read_samples
from evr1.models.prompt_length import PromptTooLong, check_prompt_tokens, effective_limit, limit_for_config
from evr1.models.adapter import VisionLanguageAdapter
from evr1.models.tiny import make_tiny

BASE = "data: {synth: {n: 8, heldout: 2}}\nmodel: {tiny: {family: qwen3_vl}}\n"


def _record(problem: str, pid: str) -> dict:
    return {"problem_id": pid, "problem": problem, "answer": "4", "problem_type": "numerical", "data_type": "text"}


@pytest.fixture(scope="module")
def tiny_limit(tmp_path_factory):
    conf = tmp_path_factory.mktemp("conf") / "c.yaml"
    conf.write_text(BASE)
    cfg = load_config(conf, ["rollout.max_new_tokens=64"])
    return limit_for_config(cfg)


def test_limit_is_capped_by_the_model_positions(tiny_limit):
    # data.max_prompt_tokens 8192 (default), the tiny model has 8192 positions, 64 go to the response.
    assert tiny_limit.max_tokens == 8192 - 64
    assert effective_limit(100, None, 64) == 100 and effective_limit(100, 120, 64) == 56


def test_ingestion_rejects_long_problems_with_their_length(tmp_path, tiny_limit):
    records = [
        _record("What is 2 + 2?", "short"),
        _record("x" * 10_000_000, "ten-megabytes"),  # 10 MB: rejected from its size, never tokenized
        _record(" ".join(f"w{i}" for i in range(4_000)), "twenty-thousand"),  # ~20,000 characters
    ]
    assert len(records[2]["problem"]) > 20_000
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    report = ingest([tmp_path / "t.jsonl"], tmp_path / "s.lance", tmp_path / "r.lance", prompt_limit=tiny_limit)
    assert (report.accepted, report.rejected, report.reasons) == (1, 2, {"prompt_too_long": 2})
    assert [s["sample_id"] for s in read_samples(tmp_path / "s.lance")] == ["short"]
    rejects = {r["record_id"]: r for r in read_rejects(tmp_path / "r.lance")}
    big = rejects["ten-megabytes"]
    assert big["field"] == "problem" and "at least" in big["reason"] and "10,000,0" in big["reason"]
    assert "over data.max_prompt_tokens = 8128" in big["reason"]
    words = rejects["twenty-thousand"]["reason"]
    tokens = int(words.split("prompt is ")[1].split(" tokens")[0])  # exact: tokenized with the model's tokenizer
    assert tokens > 8128


def test_encoded_prompt_over_the_limit_is_refused(tmp_path):
    adapter = VisionLanguageAdapter(make_tiny("qwen3_vl", tmp_path / "m"), max_prompt_tokens=64)
    assert len(adapter.encode_prompt("What is 2 + 2?")) <= 64
    with pytest.raises(PromptTooLong, match="over data.max_prompt_tokens = 64"):
        adapter.encode_prompt("count " * 200)
    with pytest.raises(PromptTooLong, match="at least"):  # decided from its size alone
        adapter.encode_prompt("z" * 1_000_000)
    with pytest.raises(PromptTooLong, match="record 'r1': prompt is 10 tokens"):
        check_prompt_tokens(10, 9, "record 'r1'")

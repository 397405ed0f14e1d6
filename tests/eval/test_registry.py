"""The registry holds the 22 benchmarks of the issue, every shared annotation file's stem resolves, and each
definition is complete: data, prompt, scorer, official metric, the benchmark's own format."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evr1.cli.main import app
from evr1.eval import BENCHMARKS, PromptContext, get_benchmark, load_all

# The issue's list, by registry name (MLVU and MMVU each in two splits).
ISSUE_BENCHMARKS = ["videomme", "videomme_v2", "mvbench", "tempcompass", "motionbench", "lvbench", "longvideobench",
                    "mlvu-test", "mlvu-dev", "holmes", "minerva", "vcrbench", "videoreasonbench", "longvideoreason",
                    "mmvu-mc", "mmvu-all", "videommmu", "videomathqa", "vsibench", "charades_sta", "stvg", "ovobench",
                    "odvbench", "livesports3k_qa"]
# Shared file stems: all resolve except the caption file, which is not a benchmark of the 22.
STEMS = ["charades_sta", "holmes", "livesports3k_qa", "longvideobench", "longvideoreason", "lvbench", "minerva",
         "mlvu-dev", "mlvu-test", "mlvu", "mmvu-all", "mmvu-mc", "mmvu", "motionbench", "mvbench", "ovobench", "stvg",
         "vcrbench", "videomathqa", "videomme", "videommmu", "videommmu_with_image", "videoreasonbench", "vsibench"]


@pytest.mark.parametrize("name", ISSUE_BENCHMARKS)
def test_every_benchmark_is_complete(name):
    b = get_benchmark(name)
    assert b.title and b.video_root and b.files, name
    assert callable(b.official_format), f"{name}: no loader for the benchmark's own format"
    assert callable(b.score) and callable(b.aggregate) and callable(b.prompt)


@pytest.mark.parametrize("stem", STEMS)
def test_every_shared_file_stem_resolves(stem):
    assert get_benchmark(stem) is not None


def test_unknown_names_and_profiles_are_refused():
    with pytest.raises(KeyError, match="unknown benchmark 'nope'"):
        get_benchmark("nope")
    b = get_benchmark("videomme")
    item = b.item({"problem_id": 1, "problem": "q", "problem_type": "multiple choice", "options": ["A. x", "B. y"],
                   "solution": "<answer>A</answer>", "path": "v.mp4"})
    with pytest.raises(ValueError, match="unknown scoring profile 'strict'"):
        b.score_item("A", item, "strict")
    with pytest.raises(ValueError, match="unknown scoring profile"):
        b.prompted(item, PromptContext(profile="strict"))


def test_a_record_without_a_field_names_it():
    b = get_benchmark("videomme")
    with pytest.raises(ValueError, match=r"videomme record '7': field 'path'"):
        b.item({"problem_id": 7, "problem": "q", "problem_type": "multiple choice", "options": [], "solution": "A"})
    with pytest.raises(ValueError, match=r"videomme record '8': field 'options'"):
        b.item({"problem_id": 8, "problem": "q", "problem_type": "multiple choice", "options": "[oops",
                "solution": "A", "path": "v.mp4"})


def test_cli_lists_every_benchmark():
    out = CliRunner().invoke(app, ["benchmarks"], terminal_width=200)
    assert out.exit_code == 0, out.output
    for name in ISSUE_BENCHMARKS:
        assert name in out.output
    load_all()
    assert set(ISSUE_BENCHMARKS) <= set(BENCHMARKS)


def test_docs_catalogue_is_the_generated_one():
    from evr1.eval.catalogue import markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "eval.md").read_text()
    assert doc.split("## Catalogue\n", 1)[1].split("\n\n", 1)[1] == markdown(), \
        "docs/eval.md is stale: regenerate its catalogue with `evr1 benchmarks --markdown`"

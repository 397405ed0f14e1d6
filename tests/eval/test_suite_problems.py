"""`eval.benchmarks` checked before any stage runs (evr1.eval.evaluate.suite_problems): a missing
annotation file is one line naming the benchmark and where it looked, found at the flow's start, not
after training (issue 35: the run summary's screenshot run failed at eval, two minutes in)."""

from pathlib import Path

from evr1.config import load_config
from evr1.eval.evaluate import suite_problems

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tmp_path, *overrides):
    return load_config(ROOT / "conf" / "tiny.yaml", [f"run.root={tmp_path}", *overrides])


def test_the_held_out_split_alone_needs_nothing(tmp_path):
    assert suite_problems(_cfg(tmp_path)) == []


def test_a_missing_annotation_file_and_video_folder_are_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    problems = suite_problems(_cfg(tmp_path, "eval.benchmarks=[heldout,mvbench]", f"eval.annotations_dir={empty}"))
    assert problems[0] == (f"eval.benchmarks[1]=mvbench: mvbench: none of ['mvbench.json'] in {empty} "
                           "(set eval.annotations_dir or eval.files.mvbench)")
    assert problems[1].startswith("eval.benchmarks[1]=mvbench: benchmark 'mvbench': set eval.data_dir")
    assert len(problems) == 2


def test_a_complete_benchmark_passes_and_an_unknown_name_is_refused(tmp_path, annotations):
    ok = suite_problems(_cfg(tmp_path, "eval.benchmarks=[mvbench]", f"eval.annotations_dir={annotations}",
                             f"eval.data_dir={tmp_path}"))
    assert ok == []
    bad = suite_problems(_cfg(tmp_path, "eval.benchmarks=[heldout,mvbenhc]"))
    assert len(bad) == 1 and bad[0].startswith("eval.benchmarks[1]=mvbenhc: unknown benchmark 'mvbenhc'; known: ")

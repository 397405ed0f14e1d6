"""Math rewards from any caller (issue 15): a script without a main guard is not run twice, standard
input (`python -`) scores correctly, and a helper that cannot start raises instead of scoring 0."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    print("SCRIPT RAN", flush=True)
    from evr1.rewards import compute_score
    print("SCORE", compute_score("<answer>\\\\frac{1}{2}</answer>", {"problem_type": "math", "answer": "0.5"}))
    print("SCORE", compute_score("<answer>0.4</answer>", {"problem_type": "math", "answer": "\\\\frac{1}{2}"}))
    """
)
EXPECTED = ["SCORE {'overall': 1.0, 'accuracy': 1.0, 'format': 1.0}",
            "SCORE {'overall': 0.1, 'accuracy': 0.0, 'format': 1.0}"]


def _lines(out: subprocess.CompletedProcess) -> list[str]:
    assert out.returncode == 0, out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if line.startswith(("SCRIPT", "SCORE"))]


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_math_reward_from_a_guardless_script_and_from_stdin(tmp_path, how):
    script = tmp_path / "score_it.py"
    script.write_text(SCRIPT)
    if how == "script":
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    else:
        out = subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, cwd=tmp_path,
                             timeout=300)
    assert _lines(out) == ["SCRIPT RAN", *EXPECTED]  # ran once, and scored (not a silent 0)


def test_a_helper_that_cannot_start_raises(tmp_path):
    code = SCRIPT.replace('print("SCRIPT RAN", flush=True)', 'sys.executable = "/nonexistent/python"')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "RewardHelperError: reward helper could not start" in out.stderr


# ---- issue 36: the batch API (a worker pool) from any caller --------------------------------------

BATCH_SCRIPT = textwrap.dedent(
    """
    print("SCRIPT RAN", flush=True)
    from evr1.rewards import compute_scores
    responses = ["<answer>\\\\frac{1}{2}</answer>", "<answer>0.4</answer>", "<answer>B</answer>"] * 2
    samples = [{"problem_type": "math", "answer": "0.5"}, {"problem_type": "math", "answer": "0.5"},
               {"problem_type": "multiple choice", "answer": "B"}] * 2
    result = compute_scores(responses, samples, workers=2, chunk_size=1)
    print("SCORE", [s["accuracy"] for s in result.scores], result.errors)
    """
)


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_batch_pool_from_a_guardless_script_and_from_stdin(tmp_path, how):
    script = tmp_path / "batch_it.py"
    script.write_text(BATCH_SCRIPT)
    if how == "script":
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    else:
        out = subprocess.run([sys.executable, "-"], input=BATCH_SCRIPT, capture_output=True, text=True,
                             cwd=tmp_path, timeout=300)
    assert _lines(out) == ["SCRIPT RAN", "SCORE [1.0, 0.0, 1.0, 1.0, 0.0, 1.0] {}"]  # ran once, scored


def test_batch_pool_scores_a_family_defined_in_the_callers_main(tmp_path):
    code = textwrap.dedent(
        """
        from evr1.rewards import FamilyResult, compute_scores, register

        @register("main-defined-family")
        def mine(text, sample):
            return FamilyResult(float(text == sample["answer"]), True)

        result = compute_scores(["<answer>x</answer>", "<answer>y</answer>", "<answer>B</answer>"],
                                [{"problem_type": "main-defined-family", "answer": "x"}] * 2
                                + [{"problem_type": "mc", "answer": "B"}], workers=2)
        print("SCORE", [s["accuracy"] for s in result.scores], result.errors)
        """
    )
    out = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert _lines(out) == ["SCORE [1.0, 0.0, 1.0] {}"]

"""The LLM judge pass: verdict parsing, the records it appends, idempotence, failure handling, and the
real tiny HF model as a judge (its verdicts are noise; the plumbing is what is checked).

The scripted engine implements the engine protocol (`agenerate`) and answers by looking up the
model answer in the judge prompt, so the pass's bookkeeping is checked independently of a model.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from jinja2.exceptions import SecurityError

from evr1.config import JudgeConfig
from evr1.eval import ResultStore
from evr1.eval.judge import (DEFAULT_TEMPLATE, ChatPrompter, Judge, JudgeError, final_answer, judge_results,
                             load_template, parse_verdict, run_judge)
from evr1.eval.runner import summarise
from evr1.models import make_tiny
from evr1.models.batch import PromptInputs
from evr1.models.tiny import make_tiny_text


@pytest.mark.parametrize("output, expected", [
    ("The answers agree. Judgement: 1", 1),
    ("judgement: 0", 0),
    ("JUDGEMENT:1", 1),
    ("Judgment: 1", 1),                                   # American spelling
    ("**Judgement**: 1", 1),                              # markdown bold around the word
    ("**Judgement: 0**", 0),
    ("Judgement: **1**", 1),
    ("Final judgement:  1.", 1),
    ("Judgement：1", 1),                                   # full-width colon
    ("Judgement: 1\nOn reflection they differ. Judgement: 0", 0),  # the LAST verdict wins
    ("Judgement: 0 ... Judgement: 1", 1),
    ("<think>Judgement: 1? no.</think>Judgement: 0", 0),  # reasoning removed first
    ("<think>they match, Judgement: 1</think>The answers differ.", None),
    ("reasoning without a close tag</think>Judgement: 1", 1),  # a template that pre-fills <think>
    ("<think>cut off mid-reasoning, Judgement: 1", None),  # an unterminated block is not a verdict
    ("The model answer matches the ground truth. 1", None),  # no "ends with 1" fallback (reference bug)
    ("Consistent: 1", None),
    ("Judgement: 10", None),
    ("Judgement: 0.5", None),
    ("Judgement: yes", None),
    ("Misjudgement: 1", None),
    ("", None),
])
def test_parse_verdict(output, expected):
    assert parse_verdict(output) == expected


@pytest.mark.parametrize("record, expected", [
    ({"pred": "a red ball", "output": "Therefore, the final answer is: blue"}, "a red ball"),
    ({"pred": 3, "output": "x"}, "3"),
    ({"pred": "", "output": "Some words. Therefore, the final answer is: a cat"}, "a cat"),
    ({"output": "THEREFORE, THE FINAL ANSWER IS: first. therefore, the final answer is:  second "}, "second"),
    ({"output": "<think>Therefore, the final answer is: wrong</think>The dog runs."}, "The dog runs."),
    ({"output": "<think>long reasoning</think>  a cat  "}, "a cat"),
    ({"output": None}, ""),
])
def test_final_answer(record, expected):
    assert final_answer(record) == expected


def test_templates_text_file_and_sandbox(tmp_path):
    default = load_template(None).render(question="Q?", ground_truth="a cat", answer="a kitten")
    assert default.startswith("Judge whether the model answer is semantically consistent")
    assert default.endswith("Ground Truth: a cat\nModel Answer: a kitten")
    path = tmp_path / "judge.jinja"
    path.write_text("Q: {{ question }} | GT: {{ ground_truth }} | A: {{ answer }}")
    for spec in (str(path), path):
        assert load_template(spec).render(question="q", ground_truth="g", answer="a") == "Q: q | GT: g | A: a"
    with pytest.raises(JudgeError, match="does not exist"):
        load_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(JudgeError, match="not a valid Jinja2"):
        load_template("{% if %}")
    with pytest.raises(SecurityError):
        load_template("{{ answer.__class__.__mro__[1].__subclasses__() }}").render(question="", ground_truth="", answer="")


# ---- the pass with a scripted engine ------------------------------------------------------------
class ScriptedJudge:
    """Replies per model answer found in the prompt; raises for answers in `fail_on`; counts calls."""

    def __init__(self, replies: dict[str, str], fail_on=(), delay: float = 0.0):
        self.replies, self.fail_on, self.delay = replies, set(fail_on), delay
        self.calls: list[list[str]] = []

    async def agenerate(self, prompts, params):
        answers = [p.text.rsplit("Model Answer: ", 1)[1] for p in prompts]
        self.calls.append(answers)
        await asyncio.sleep(self.delay)
        if self.fail_on & set(answers):
            raise RuntimeError("judge engine exploded")
        return [[SimpleNamespace(text=self.replies.get(a, "no idea"))] for a in answers]


def plain(text: str) -> PromptInputs:
    return PromptInputs(input_ids=[], mm_token_type_ids=[], mm={}, text=text)


def open_ended(item):
    return item["problem_type"] == "open-ended"


ANSWERS = {"o1": "a red ball", "o2": "two dogs", "o3": "a tree", "o4": "the sun", "o5": "BOOM"}
REPLIES = {"a red ball": "Same object. Judgement: 1", "two dogs": "**Judgement**: 0",
           "a tree": "They match, so 1", "the sun": "<think>Judgement: 0</think>Judgement: 1"}
ITEMS = ([{"id": i, "problem": f"What is in {i}?", "gt": f"gt-{i}", "problem_type": "open-ended"} for i in ANSWERS]
         + [{"id": "m1", "problem": "Pick one", "gt": "A", "problem_type": "multiple choice"},
            {"id": "o6", "problem": "no record yet", "gt": "x", "problem_type": "open-ended"},
            {"id": "o7", "problem": "scorer decided", "gt": "x", "problem_type": "open-ended"}])


def seeded_store(path) -> ResultStore:
    store = ResultStore(path)
    for item_id, answer in ANSWERS.items():
        store.append({"id": item_id, "group": "open-ended", "output": f"<think>hmm</think>{answer}", "pred": answer,
                      "score": 0.0, "needs_judge": True})
    store.append({"id": "m1", "group": "multiple choice", "output": "A", "pred": "A", "score": 1.0})
    store.append({"id": "o7", "group": "open-ended", "output": "x", "pred": "x", "score": 1.0, "needs_judge": False})
    return store


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_pass_appends_judged_records_and_counts(tmp_path):
    path = tmp_path / "results.jsonl"
    store = seeded_store(path)
    engine = ScriptedJudge(REPLIES, fail_on={"BOOM"})
    # One prompt per call: an engine error fails its whole batch, and batches form as prompts get ready.
    judge = Judge(engine, plain, batch_size=1)
    counts = judge_results(ITEMS, store, judge, open_ended)
    assert (counts.pending, counts.judged, counts.correct, counts.unparseable, counts.failed, counts.skipped) == \
        (5, 4, 2, 1, 1, 0)
    r = store.results
    # Verdicts: 1, 0 (bold), unparseable "…so 1" scores 0, and the verdict after the reasoning block.
    assert [r[i]["score"] for i in ("o1", "o2", "o3", "o4")] == [1.0, 0.0, 0.0, 1.0]
    assert r["o3"]["judge_error"] == "no 'Judgement: 0|1' in the judge output" and r["o3"]["judged"] is True
    for i in ("o1", "o2", "o4"):
        assert r[i]["judged"] is True and "judge_error" not in r[i] and r[i]["judge_output"] == REPLIES[ANSWERS[i]]
        # The old record's fields are kept: the model's output, its prediction, the group.
        assert r[i]["output"] == f"<think>hmm</think>{ANSWERS[i]}" and r[i]["pred"] == ANSWERS[i]
        assert r[i]["group"] == "open-ended" and r[i]["needs_judge"] is True
    # The engine failure is recorded on o5 but o5 stays pending, and it is not an evaluation error.
    assert r["o5"]["judge_error"] == "RuntimeError: judge engine exploded" and r["o5"]["judge_stage"] == "generate"
    assert not r["o5"].get("judged") and "error" not in r["o5"] and store.done("o5")
    # Not asked: the MC item, the item without a record, the one whose scorer needed no judge.
    asked = [a for call in engine.calls for a in call]
    assert sorted(asked) == sorted(ANSWERS.values())
    assert "o6" not in r and r["m1"]["score"] == 1.0 and r["o7"] == {**r["o7"], "score": 1.0} and "judged" not in r["o7"]
    # The judge prompt holds the ground truth and the model's final answer (its `pred`).
    assert "Ground Truth: gt-o1\nModel Answer: a red ball" in judge.prompt_text(ITEMS[0], r["o1"])
    # Summaries read the newest records: o1, o4 (judged), m1 and o7 (scored) right out of the 8 items.
    assert summarise(ITEMS, store, benchmark="b", group_key=lambda i: "all").score == pytest.approx(4 / 8)

    # Rerun: only the failed item is asked again; judged items are not judged twice.
    n_lines = len(lines(path))
    again = Judge(ScriptedJudge({"BOOM": "Judgement: 1"}), plain, batch_size=2)
    counts2 = judge_results(ITEMS, ResultStore(path), again, open_ended)
    assert again.engine.calls == [["BOOM"]]
    assert (counts2.pending, counts2.judged, counts2.correct, counts2.failed, counts2.skipped) == (1, 1, 1, 0, 4)
    fresh = ResultStore(path)
    assert fresh.results["o5"]["score"] == 1.0 and fresh.results["o5"]["judged"] is True
    assert "judge_error" not in fresh.results["o5"] and "judge_stage" not in fresh.results["o5"]
    assert len(lines(path)) == n_lines + 1
    # A third pass has nothing to do.
    third = Judge(ScriptedJudge({}), plain)
    counts3 = judge_results(ITEMS, ResultStore(path), third, open_ended)
    assert third.engine.calls == [] and counts3.pending == 0 and counts3.skipped == 5


def test_a_slow_judge_call_times_out_and_is_retried(tmp_path):
    path = tmp_path / "results.jsonl"
    store = seeded_store(path)
    slow = Judge(ScriptedJudge(REPLIES, delay=0.5), plain, batch_size=8, timeout_s=0.1)
    counts = judge_results(ITEMS, store, slow, open_ended)
    assert counts.failed == 5 and counts.judged == 0
    assert {store.results[i]["judge_error"] for i in ANSWERS} == {"generation timed out after 0.1 s"}
    assert {store.results[i]["judge_stage"] for i in ANSWERS} == {"generate"}
    counts2 = judge_results(ITEMS, ResultStore(path), Judge(ScriptedJudge(REPLIES), plain), open_ended)
    assert counts2.pending == 5 and counts2.judged == 5 and counts2.failed == 0


def test_bad_template_fails_items_at_the_load_stage_and_empty_answers_are_not_sent(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.append({"id": "o1", "output": "Therefore, the final answer is: a cat", "score": 0.0, "needs_judge": True})
    store.append({"id": "o2", "output": "<think>never finished</think>", "score": 0.0, "needs_judge": True})
    items = [{"id": i, "problem": "q", "gt": "a cat", "problem_type": "open-ended"} for i in ("o1", "o2")]
    engine = ScriptedJudge({})
    counts = judge_results(items, store, Judge(engine, plain, template="{{ answer }} vs {{ reference }}"), open_ended)
    assert counts.failed == 1 and "reference" in store.results["o1"]["judge_error"]
    assert store.results["o1"]["judge_stage"] == "load"
    # o2 has no answer at all: scored 0 without asking the judge.
    assert engine.calls == [] and store.results["o2"]["judged"] is True and store.results["o2"]["score"] == 0.0
    assert counts.judged == 1 and counts.unparseable == 0


# ---- the real tiny model as judge ---------------------------------------------------------------
@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    return make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("judge_model") / "m", seed=3)


def test_prompts_go_through_the_judge_chat_template(judge_dir):
    prompter = ChatPrompter(judge_dir)
    judge = Judge(ScriptedJudge({}), prompter)
    text = judge.prompt_text({"problem": "q", "gt": "a cat<|video_pad|>"}, {"pred": "a <|image_pad|>kitten"})
    p = prompter(text)
    assert p.text.startswith("<|im_start|>system\n") and p.text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\n" + load_template(DEFAULT_TEMPLATE).render(
        question="q", ground_truth="a cat", answer="a kitten") + "<|im_end|>" in p.text
    assert len(p.input_ids) == len(p.mm_token_type_ids) and set(p.mm_token_type_ids) == {0} and p.mm == {}


@pytest.mark.parametrize("kind", ["vision-language", "text-only"])
def test_tiny_hf_model_as_judge(tmp_path, judge_dir, kind):
    store = seeded_store(tmp_path / "results.jsonl")
    # The eval stage's entry point; model_path None means the evaluated model judges itself, and a
    # text-only LLM (what a real judge such as Qwen3-32B is) loads through the same engine.
    text_dir = str(make_tiny_text(tmp_path / "text-judge")) if kind == "text-only" else None
    settings = JudgeConfig(engine="hf", model_path=text_dir, max_new_tokens=6, batch_size=2)
    counts = run_judge(settings, SimpleNamespace(needs_judge=open_ended), ITEMS, store, default_model_dir=judge_dir,
                       device="cpu", concurrency=2, timeout_s=120)
    assert set(counts) == {"pending", "judged", "correct", "unparseable", "failed", "skipped"}
    assert counts["pending"] == 5 and counts["judged"] == 5 and counts["failed"] == 0
    for item_id in ANSWERS:
        rec = store.results[item_id]
        assert rec["judged"] is True and isinstance(rec["judge_output"], str) and rec["score"] in (0.0, 1.0)
        assert (rec["score"] == 1.0) == (parse_verdict(rec["judge_output"]) == 1)
        assert ("judge_error" in rec) == (parse_verdict(rec["judge_output"]) is None)


def test_undecided_answers_of_the_official_rule_stage_go_to_the_judge(tmp_path):
    """Video-MME's rule stage cannot read a tagged answer: the result is `undecided`, the judge decides
    it (shown the right letter with its option text), and the official report counts both."""
    from evr1.eval import get_benchmark

    bench = get_benchmark("videomme")
    item = bench.item({"problem_id": 1, "problem": "What is red?", "problem_type": "multiple choice",
                       "options": ["A. a tree", "B. the sky", "C. grass", "D. a red car"],
                       "solution": "<answer>D</answer>", "path": "v.mp4"})
    plain_letter = {**item, "id": "2"}
    store = ResultStore(tmp_path / "results.jsonl")
    for it, output in ((item, "<think>the car</think><answer>D</answer>"), (plain_letter, "D")):
        store.append({"id": it["id"], "output": output, **bench.score_item(output, it)})
    first = store.results[item["id"]]
    assert (first["score"], first["pred"], first["undecided"], first["needs_judge"]) == (0.0, "", True, True)
    assert "undecided" not in store.results["2"] and store.results["2"]["score"] == 1.0
    items = [item, plain_letter]
    before = bench.report([(i, store.results[i["id"]]) for i in items])
    assert before.value == 0.5 and (before.parts["undecided"], before.parts["undecided/judged"]) == (1.0, 0.0)

    judge = Judge(ScriptedJudge({"<answer>D</answer>": "Judgement: 1"}), plain)
    counts = judge_results(items, store, judge, bench.needs_judge)  # MC items: needs_judge is never true
    assert (counts.pending, counts.judged, counts.correct) == (1, 1, 1)
    assert judge.engine.calls == [["<answer>D</answer>"]]
    assert "Ground Truth: D. a red car\n" in judge.prompt_text(item, store.results[item["id"]])
    after = bench.report([(i, store.results[i["id"]]) for i in items])
    assert after.value == 1.0 and (after.parts["undecided"], after.parts["undecided/judged"]) == (1.0, 1.0)


def test_reports_show_the_undecided_count_beside_the_score():
    from evr1.eval.report import suite_table, summary_table
    from evr1.eval.runner import EvalSummary

    s = EvalSummary(benchmark="videomme", items=4, scored=4, failed=0, score=0.5,
                    parts={"undecided": 2.0, "undecided/judged": 1.0, "judge/awaiting": 1.0})
    assert "(4/4 scored, 0 failed, 2 undecided (1 judged);" in summary_table(s)
    assert "| undecided (count) | 2 |" in summary_table(s)
    table = suite_table([s])
    assert "| undecided |" in table.splitlines()[0] and table.splitlines()[2].endswith("| 2 (1 judged) |")

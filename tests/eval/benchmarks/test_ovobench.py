"""OVO-Bench: MC by the one letter named, REC digits, SSR/CRR yes/no (substring bugs fixed), nested macro."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, run_benchmark

BENCH = get_benchmark("ovobench")

OFFICIAL = [
    {"id": 0, "task": "EPM", "video": "v0.mp4", "realtime": 10.0, "question": "Who did I talk to?",
     "options": ["a person in brown", "a person in green", "a person in blue", "a person in white"], "gt": 2},
    {"id": 1, "task": "STU", "video": "v1.mp4", "realtime": 5.0, "question": "Where is the cup?",
     "options": ["table", "floor"], "gt": 0},
    {"id": 2, "task": "REC", "video": "v2.mp4", "activity": "breaking something",
     "test_info": [{"realtime": 3.0, "count": 1}, {"realtime": 9.0, "count": 2}]},
    {"id": 3, "task": "SSR", "video": "v3.mp4", "test_info": [{"realtime": 2.0, "step": "pull up the hair", "type": 1},
                                                             {"realtime": 7.0, "step": "pull up the hair", "type": 0}]},
    {"id": 4, "task": "CRR", "video": "v4.mp4", "question": "What does she take from the car?",
     "test_info": [{"realtime": 1.0, "type": 0}]},
]


def _evr() -> list[dict]:
    out = []
    for r in OFFICIAL:
        base = {"data_type": "video", "data_source": "OVO-Bench", "ovo_task": r["task"], "ovo_id": r["id"]}
        if "options" in r:
            cat = "backward" if r["task"] == "EPM" else "realtime"
            out.append({**base, "problem_type": "multiple choice", "problem": r["question"], "path": f"{r['id']}.mp4",
                        "options": [f"{chr(65 + i)}: {o}" for i, o in enumerate(r["options"])],
                        "solution": f"<answer>{chr(65 + r['gt'])}</answer>", "problem_id": f"ovo_{r['id']}",
                        "ovo_category": cat})
            continue
        for i, info in enumerate(r["test_info"]):
            rec = {**base, "problem_type": r["task"], "options": [], "path": f"{r['id']}_{i}.mp4",
                   "problem_id": f"ovo_{r['id']}_{i}", "ovo_category": "forward", "ovo_test_idx": i}
            if r["task"] == "REC":
                rec.update(problem=f"How many times did they {r['activity']}?", solution=f"<answer>{info['count']}</answer>")
            else:
                rec.update(problem=info["step"] if r["task"] == "SSR" else r["question"], ovo_type=info["type"],
                           solution=f"<answer>{'Yes' if info['type'] else 'No'}</answer>")
            out.append(rec)
    return out


EVR = _evr()
KEYS = ("id", "options", "letters", "gt", "video", "problem", "problem_type", "ovo_task", "ovo_category", "ovo_type")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "ovo_bench_new.json").write_text(json.dumps(OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "ovo_bench_new.json")
    assert len(evr) == 7
    assert [{k: i.get(k) for k in KEYS} for i in evr] == [{k: i.get(k) for k in KEYS} for i in official]


def test_oracle_constant_and_nested_macro(files, tmp_path):
    items = BENCH.load(files / "evr.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.metric == "overall" and rep.value == 1.0
    rep = run_benchmark(BENCH, items, constant("Yes"), tmp_path)
    # backward EPM 0; realtime STU 0; forward: REC 0, SSR 1/2, CRR 0 → forward 1/6; overall 1/18
    assert rep.parts["ovo_category/forward"] == pytest.approx(1 / 6) and rep.value == pytest.approx(1 / 18)
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path / "a")
    assert rep.parts["ovo_category/realtime"] == 1.0 and rep.value == pytest.approx(1 / 3)


def test_prompts(files):
    mc, _, rec, _, ssr, _, crr = BENCH.load(files / "evr.json")
    assert BENCH.prompted(mc, PromptContext()).text == (
        "Question: Who did I talk to?\nOptions:\nA. a person in brown\nB. a person in green\nC. a person in blue\n"
        "D. a person in white\nRespond only with the letter corresponding to your chosen option (e.g., A, B, C). "
        "Do not include any additional text or explanation in your response.")
    assert "How many times did they breaking something?\nProvide your answer as a single number" in \
        BENCH.prompted(rec, PromptContext()).text
    assert "\npull up the hair\nYour task is to determine" in BENCH.prompted(ssr, PromptContext()).text
    assert BENCH.prompted(crr, PromptContext()).text.endswith(
        'Answer only with "Yes" or "No". Do not include any additional text or explanation in your response.')


@pytest.mark.parametrize("output, gt, expected", [
    ("C", "C", 1.0),
    ("C.", "C", 1.0),
    ("(C)", "C", 1.0),
    ("A person in blue, so C", "A", 0.0),      # [exec] reference 1 (substring "A") — fixed: the answer is C
    ("A person in blue, so C", "C", 1.0),
    ("A", "A", 1.0),
    ("A. a person in brown", "A", 1.0),
    ("Maybe B or C", "C", 0.0),                # two letters named
    ("c", "C", 0.0),                           # lower case is not a letter answer
])
def test_multiple_choice(output, gt, expected):
    record = {**EVR[0], "solution": f"<answer>{gt}</answer>"}
    assert score("ovobench", output, record) == expected


@pytest.mark.parametrize("output, count, expected", [
    ("2", 2, 1.0),
    ("They did it 2 times.", 2, 1.0),
    ("12", 12, 1.0),
    ("1 or 2", 2, 0.0),                        # digits concatenate to "12" (reference rule, kept)
    ("two", 2, 0.0),
    ("", 0, 0.0),
])
def test_rec(output, count, expected):
    record = {**EVR[2], "solution": f"<answer>{count}</answer>"}
    assert score("ovobench", output, record) == expected


@pytest.mark.parametrize("output, ovo_type, expected", [
    ("Yes", 1, 1.0),
    ("yes", 1, 1.0),                           # [exec] reference 0 (case-sensitive) — fixed
    ("Y", 1, 1.0),
    ("N", 0, 1.0),
    ("No.", 0, 1.0),
    ("Not yet, no.", 0, 1.0),                  # [exec] reference 1 only because "No" ⊂ "Not"; here the word "no"
    ("Not sure", 0, 0.0),                      # reference 1 ("No" ⊂ "Not") — fixed
    ("Nothing yet", 0, 0.0),
    ("Yes and no", 1, 0.0),                    # both words: unreadable
    ("No", 1, 0.0),
])
def test_yes_no(output, ovo_type, expected):
    record = {**EVR[4], "ovo_type": ovo_type, "solution": f"<answer>{'Yes' if ovo_type else 'No'}</answer>"}
    assert score("ovobench", output, record) == expected


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 3035
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and len([k for k in rep.parts if k.startswith("ovo_task/")]) == 12
    rep = BENCH.report([(i, BENCH.score_item("Yes", i)) for i in items])
    ssr = [i for i in items if i["problem_type"] == "SSR"]
    crr = [i for i in items if i["problem_type"] == "CRR"]
    forward = (sum(i["ovo_type"] == 1 for i in ssr) / len(ssr) + sum(i["ovo_type"] == 1 for i in crr) / len(crr)) / 3
    assert rep.value == pytest.approx(forward / 3)

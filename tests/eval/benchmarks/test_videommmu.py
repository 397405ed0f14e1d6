"""Video-MMMU: tracks, the Adaptation image, MMMU-style parsing (M1) and parse_open_response."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, run_benchmark

BENCH = get_benchmark("videommmu")

OFFICIAL = {
    "Adaptation": [
        {"id": "dev_Biology_3", "question": "<image 1> What kind of sugar is this?", "options": ["aldose", "ketose", "glucose"],
         "answer": "A", "question_type": "multiple-choice"},
        {"id": "validation_Chemistry_13", "question": "What mass was dissolved? <image 1>", "options": [],
         "answer": "12.97", "question_type": "open"},
    ],
    "Comprehension": [
        {"id": "dev_Biology_3", "question": "With one more carbon atom, what are the names?",
         "options": ["pentose", "hexose", "triose"], "answer": "B", "question_type": "multiple-choice"},
    ],
    "Perception": [
        {"id": "dev_Biology_3", "question": "How many carbon atoms do they have?", "options": ["3 and 3", "6 and 6"],
         "answer": "B", "question_type": "multiple-choice"},
    ],
}
LETTERS = "ABCDEFGHIJ"
EVR = []
for track, rows in OFFICIAL.items():
    for row in rows:
        rec = {"problem_id": len(EVR) + 1, "problem": row["question"], "data_type": "video",
               "problem_type": "multiple choice" if row["options"] else "numerical",
               "original_question_type": "multiple-choice", "process": "", "data_source": "u",
               "options": [f"{LETTERS[i]}. {o}" for i, o in enumerate(row["options"])] or None,
               "solution": f"<answer>{row['answer']}</answer>", "path": f"./{row['id']}.mp4", "track": track}
        if track == "Adaptation":
            rec["image_path"] = f"./images/{row['id']}.png"
        EVR.append(rec)
KEYS = ("id", "options", "letters", "gt", "video", "image", "problem", "problem_type", "track")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "official.json").write_text(json.dumps(OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "official.json")
    assert [{k: i.get(k) for k in KEYS} for i in evr] == [{k: i.get(k) for k in KEYS} for i in official]
    assert official[0]["image"] == "images/dev_Biology_3.png" and official[0]["video"] == "dev_Biology_3.mp4"
    assert get_benchmark("videommmu_with_image") is BENCH


def test_oracle_and_constant_per_track(files, tmp_path):
    items = BENCH.load(files / "official.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.counts["track/Adaptation"] == 2
    rep = run_benchmark(BENCH, items, constant("B"), tmp_path)
    assert rep.value == 0.5                                   # instance-weighted: 2 of 4
    assert rep.parts == {"track/Adaptation": 0.0, "track/Comprehension": 1.0, "track/Perception": 1.0,
                         "problem_type/multiple choice": 2 / 3, "problem_type/numerical": 0.0, "undecided": 0.0, "undecided/judged": 0.0}


def test_prompts_and_media(files):
    adaptation, numerical, comprehension, _ = BENCH.load(files / "evr.json")
    p = BENCH.prompted(adaptation, PromptContext())
    assert p.videos == ("dev_Biology_3.mp4",) and p.images == ("images/dev_Biology_3.png",)
    assert p.text.startswith("You should watch and learn the video content. Then apply what you learned to answer the "
                             "following multi-choice question. The image for this question is at the end of the video.\n")
    assert p.text.endswith("A. aldose\nB. ketose\nC. glucose")
    assert "open-ended question" in BENCH.prompted(numerical, PromptContext()).text
    p = BENCH.prompted(comprehension, PromptContext())
    assert p.images == () and p.text.endswith("C. triose\nPlease ignore the Quiz question in last frame of the video.")


@pytest.mark.parametrize("record", [
    {"problem_id": 5, "image_path": "./images/x.png"},
    {"problem_id": 300},
    {"problem_id": 301, "expect": "Comprehension"},
    {"problem_id": 600, "expect": "Comprehension"},
    {"problem_id": 601, "expect": "Perception"},
    {"problem_id": 900, "expect": "Perception"},
    {"problem_id": 901, "expect": "unknown"},
    {"problem_id": 700, "track": "Adaptation"},
])
def test_track_rule(record):
    from evr1.eval.benchmarks.videommmu import track

    expect = record.pop("expect", "Adaptation")
    assert track(record) == expect


TEN = [f"{l}. option {l.lower()}" for l in LETTERS]


@pytest.mark.parametrize("output, expected", [
    ("B", "B"),
    ("B.", "B"),
    ("(B)", "B"),
    ("The answer is B.", "B"),
    ("I think the answer is B", "B"),                        # "I " is a candidate too; the later one wins
    ("A. is wrong, the answer is D. Done", "D"),             # several "X." candidates: the last position wins
    ("A. fits better than (C)", "A"),                        # the "X." stage comes before "(X)"
    ("(C) is tempting but A. is wrong.", "A"),               # ... even when "(X)" is later
    ("Answer: (C)", "C"),
    ("The sugar is an aldose type, clearly option a", "A"),  # > 5 words, no letter: option text
    ("DNA is involved", "A"),                                # the source reads the "A " of "DNA " as a choice
    ("no idea", ""),                                         # nothing parses: wrong, never a random pick
])
def test_multiple_choice_parse(output, expected):
    from evr1.eval.extractors.mmmu import parse_multi_choice

    texts = ["aldose"] + [f"option {l.lower()}" for l in LETTERS[1:]]
    assert parse_multi_choice(output, list(LETTERS), texts) == expected


@pytest.mark.parametrize("output, expected", [
    ("12.97", 1.0),
    ("The mass is 12.97 g.", 1.0),
    ("Therefore, the answer is 12.966", 1.0),                 # rounded to 2 places
    ("m = 12.97", 1.0),
    ("about 13 g", 0.0),
    ("", 0.0),
])
def test_numerical(files, output, expected):
    item = BENCH.load(files / "evr.json")[1]
    assert score("videommmu", output, item) == expected


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 900
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0
    assert {k: v for k, v in rep.counts.items() if k.startswith("track/")} == {
        "track/Adaptation": 300, "track/Comprehension": 300, "track/Perception": 300}
    assert sum(bool(i.get("image")) for i in items) == 300
    assert all(bool(i.get("image")) == (int(i["problem_id"]) <= 300) for i in items)
    mc = [i for i in items if i["problem_type"] == "multiple choice"]
    share_a = sum(i["gt"] == "A" for i in mc) / len(items)
    assert BENCH.report([(i, BENCH.score_item("A", i)) for i in items]).value == pytest.approx(share_a)
    plain = BENCH.load(annotations / "videommmu.json")
    assert [BENCH.group_key(i) for i in plain] == [BENCH.group_key(i) for i in items]

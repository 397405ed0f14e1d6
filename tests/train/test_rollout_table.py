"""Rollout tables: which responses a reader sees (whole groups first), what each row says, and when
the tables are handed on. The trainer's real run is in tests/train/test_offline.py."""

from evr1.train.collect import Rollout
from evr1.train.rollout_table import RolloutTables, pick, rollout_rows, shorten


def _batch(groups: list[int]) -> Rollout:
    r = Rollout()
    for i, g in enumerate(groups):
        r.rows.append({"sample_id": f"s{g}", "problem": "<video>\nWhat colour? " + "x" * 400})
        r.responses.append(list(range(i + 1)))
        r.texts.append(f"answer {i}")
        r.groups.append(g)
        r.scores.append({"overall": i / 10, "accuracy": 1.0, "format": 0.0})
        r.truncated.append(i == 3)
        r.offline.append(i % 2 == 1)
    return r


def test_pick_prefers_whole_groups():
    groups = [0, 1, 0, 1, 2, 2]  # a reordered batch: groups are not contiguous
    assert pick(groups, 4) == [0, 2, 1, 3]
    assert pick(groups, 5) == [0, 2, 1, 3]  # group 2 would not fit whole
    assert pick([7, 7, 7], 2) == [0, 1]  # one group larger than the table: its first responses
    assert pick(groups, 8) == [0, 2, 1, 3, 4, 5]


def test_rows_say_what_was_written_and_what_it_earned():
    rows = rollout_rows(5, _batch([0, 1, 0, 1]), [0.5, -0.5, -1.0, 1.0], limit=2)
    assert [r["sample_id"] for r in rows] == ["s0", "s0"] and [r["advantage"] for r in rows] == [0.5, -1.0]
    first, second = rows
    assert first["step"] == 5 and first["response"] == "answer 0" and second["response"] == "answer 2"
    assert first["reward_overall"] == 0.0 and second["reward_overall"] == 0.2 and first["reward_accuracy"] == 1.0
    assert first["length"] == 1 and second["length"] == 3 and not first["offline"]
    assert len(first["prompt"]) == 300 and first["prompt"].endswith("…")
    # No advantage (a step that trained on nothing): the column is empty, not a made-up number.
    assert [r["advantage"] for r in rollout_rows(1, _batch([0, 0]), None, 8)] == [None, None]
    assert shorten("abc", 3) == "abc" and shorten("abcd", 3) == "ab…"


def test_tables_are_handed_on_when_due():
    sent = []
    tables = RolloutTables(lambda name, rows: sent.append((name, rows)), every=2, limit=8)
    for step in (1, 2):
        tables.saw_step(_batch([0, 0]), [0.0, 0.0])
        tables.flush(step)
    assert [name for name, _ in sent] == ["rollouts/step_000002.json"]
    tables.saw_validation([{"sample_id": "v", "problem": "q", "answer": "A"}], ["<answer>A</answer>"],
                          [{"overall": 1.0, "accuracy": 1.0, "format": 1.0}], [4])
    tables.flush(3)  # not a rollout step, but validation ran: its table goes
    name, rows = sent[-1]
    assert name == "validation/step_000003.json" and rows[0]["answer"] == "A" and rows[0]["reward_overall"] == 1.0

    def broken(name, rows):
        raise OSError("tracking server down")
    quiet = RolloutTables(broken, every=1, limit=8)
    quiet.saw_step(_batch([0]), [0.0])
    quiet.flush(1)  # a display that fails never stops training
    never = RolloutTables(lambda *a: sent.append(a), every=0, limit=8)
    never.saw_step(_batch([0]), [0.0])
    never.flush(1)
    assert len(sent) == 2

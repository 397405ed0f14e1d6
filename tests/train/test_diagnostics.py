"""The learning-signal diagnostics (`evr1.train.diagnostics`, the `diag/*` metrics) on groups built by
hand, each figure worked out in the comments; the answer's tokens found on a toy tokenizer whose
pieces are known, and on the tiny models' real byte-level BPE."""

import pytest

from evr1.models.tiny import build_tokenizer
from evr1.rewards.extract import answer_tag
from evr1.train.diagnostics import (
    answer_char_span,
    answer_entropies,
    answer_entropy,
    answer_token_span,
    group_signal,
    step_diagnostics,
)


@pytest.mark.parametrize("text", [
    "<answer>B</answer>", "<think>so</think> <answer> A </answer>", "<answer>A</answer> then <answer>C</answer>",
    "< Answer >x > 3</ ANSWER>", "<answer>A<answer>B</answer>", "no tag", "<answer>cut off", "<answer></answer>",
])
def test_the_span_is_what_the_reward_reads(text):
    span = answer_char_span(text)
    tag = answer_tag(text)
    assert (span is None) == (tag is None)
    if span is not None:
        assert text[span[0]:span[1]].strip() == tag


PIECES = {1: "<think>", 2: "a", 3: "</think>", 4: "<answer>", 5: "B", 6: "</answer>", 7: "<answer", 8: ">B",
          9: "</", 10: "answer>", 11: '{"time": [', 12: "1, 3", 13: "]}", 14: "<|im_end|>"}


def _decode(ids) -> str:
    return "".join(PIECES[i] for i in ids)


@pytest.mark.parametrize("ids, span", [
    ([1, 2, 3, 4, 5, 6, 14], (4, 5)),  # the answer's own token
    ([7, 8, 9, 10], (1, 2)),  # ">B" writes the tag's end and the answer: it decides the answer, it counts
    ([4, 11, 12, 13, 6], (1, 4)),  # a multi-token answer: every token of it
    ([4, 5, 6, 2, 4, 12, 6], (5, 6)),  # the last complete tag, as the reward reads it
    ([1, 2, 3, 5], None),  # no tag
    ([4, 5], None),  # not closed (a truncated response)
    ([4, 6], None),  # empty
])
def test_answer_tokens_on_known_pieces(ids, span):
    assert answer_token_span(ids, _decode) == span


def test_answer_tokens_with_the_tiny_models_tokenizer():
    tok = build_tokenizer(chat_template="")
    def decode(ids):  # the adapter's decode
        return tok.decode(list(ids), skip_special_tokens=True)
    for text, answer in [("<think>the ball moves left</think> <answer>A</answer>", "A"),
                         ('<answer>{"time": [1, 3]}</answer>', '{"time": [1, 3]}'),
                         ("<answer>yes</answer><|im_end|>", "yes"), ("left <answer>12</answer>", "12")]:
        ids = tok.encode(text, add_special_tokens=False)
        first, stop = answer_token_span(ids, decode)
        # the span's tokens write the answer, and no token outside it writes any of it
        assert answer in decode(ids[first:stop])
        assert answer not in decode(ids[:first]) + decode(ids[stop:]).replace("answer>", "")


def test_answer_entropy_is_read_at_the_answer_tokens_only():
    responses = [[1, 2, 3, 4, 5, 6, 14], [4, 11, 12, 13, 6], [1, 2, 3, 5]]
    entropies = [[9.0, 9.0, 9.0, 9.0, 0.5, 9.0, 9.0],  # answer token: 0.5
                 [9.0, 1.0, 2.0, 3.0, 9.0],  # three answer tokens: mean 2.0
                 [0.1, 0.1, 0.1, 0.1]]  # no answer: does not count
    spans = [answer_token_span(ids, _decode) for ids in responses]
    values = answer_entropies(entropies, spans)
    assert values == [0.5, 2.0, None]
    assert answer_entropies([None], spans[:1]) == [None]  # a row the rank could not read
    assert answer_entropy(["colour", "appears", "colour"], values) == {
        "diag/answer_entropy": 1.25, "diag/answer_entropy/appears": 2.0, "diag/answer_entropy/colour": 0.5}
    assert answer_entropy(["colour"], [None]) == {}  # nothing to report: no metric, not a 0


# Five groups of four, built by hand (advantages as GRPO gives them, rounded):
# g1 colour: all wrong, one breaks the tag: rewards 0.1, 0.1, 0.1, 0 → advantages +0.5 ×3, −1.5.
#    Accuracy constant, reward varies: format-only. Answers A, A, B, none → modal A: (0.5 + 0.5)/2 = 0.5.
# g2 colour: all "C", all wrong, all well formed: advantages 0 (float noise 1e-9): zero advantage; modal 0.
# g3 motion: one right: advantages +1.5, −0.5 ×3. Answers A, B, B, B → modal B: −0.5.
# g4 motion: two right, two wrong (A, A, B, B): a tie, both answers modal → (1 + 1 − 1 − 0.6)/4 = 0.1.
# g5 motion: nobody answered: rewards 0, advantages 0 → zero advantage; no modal answer (left out).
GROUPS = [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4
FAMILIES = ["colour"] * 8 + ["motion"] * 12
ACCURACY = [0, 0, 0, 0] + [0, 0, 0, 0] + [1, 0, 0, 0] + [1, 1, 0, 0] + [0, 0, 0, 0]
REWARD = [0.1, 0.1, 0.1, 0.0] + [0.1] * 4 + [1.0, 0.1, 0.1, 0.1] + [1.0, 1.0, 0.1, 0.0] + [0.0] * 4
ADVANTAGE = [0.5, 0.5, 0.5, -1.5] + [1e-9] * 4 + [1.5, -0.5, -0.5, -0.5] + [1.0, 1.0, -1.0, -0.6] + [0.0] * 4
ANSWERS = ["A", "A", "B", None] + ["C"] * 4 + ["A", "B", "B", "B"] + ["A", "A", "B", "B"] + [None] * 4


def test_group_signal_on_hand_built_groups():
    got = group_signal(groups=GROUPS, families=FAMILIES, accuracy=ACCURACY, reward=REWARD, advantage=ADVANTAGE,
                       advantage_abs_max=[abs(a) for a in ADVANTAGE], answers=ANSWERS)
    assert got == pytest.approx({
        # g2 and g5 of five groups; colour 1 of 2 (g2), motion 1 of 3 (g5)
        "diag/zero_adv_groups": 2 / 5, "diag/zero_adv_groups/colour": 1 / 2, "diag/zero_adv_groups/motion": 1 / 3,
        # g2 and g5 again: their rewards are constant (the others' vary)
        "diag/same_reward_groups": 2 / 5, "diag/same_reward_groups/colour": 1 / 2,
        "diag/same_reward_groups/motion": 1 / 3,
        # g1 only (g2 and g5 have a constant reward, g3 and g4 a varying accuracy)
        "diag/format_only_groups": 1 / 5, "diag/format_only_groups/colour": 1 / 2,
        "diag/format_only_groups/motion": 0.0,
        # g1 0.5, g2 0, g3 −0.5, g4 0.1 (g5 has no answer)
        "diag/modal_answer_adv": (0.5 + 0.0 - 0.5 + 0.1) / 4, "diag/modal_answer_adv/colour": 0.25,
        "diag/modal_answer_adv/motion": (-0.5 + 0.1) / 2,
    })


def test_a_group_counts_once_whatever_the_order_of_its_responses():
    order = [19, 3, 7, 0, 12, 5, 16, 1, 9, 14, 2, 18, 6, 11, 4, 17, 8, 13, 10, 15]  # the trainer reorders batches
    def pick(seq):
        return [seq[i] for i in order]
    shuffled = group_signal(groups=pick(GROUPS), families=pick(FAMILIES), accuracy=pick(ACCURACY),
                            reward=pick(REWARD), advantage=pick(ADVANTAGE),
                            advantage_abs_max=[abs(a) for a in pick(ADVANTAGE)], answers=pick(ANSWERS))
    straight = group_signal(groups=GROUPS, families=FAMILIES, accuracy=ACCURACY, reward=REWARD,
                            advantage=ADVANTAGE, advantage_abs_max=[abs(a) for a in ADVANTAGE], answers=ANSWERS)
    assert shuffled == pytest.approx(straight)


def test_without_a_baseline_a_same_reward_group_is_no_zero_advantage_group():
    # w_reinforce: four wrong answers are each pushed down (advantage −1), so the group teaches
    # something though its rewards are all equal
    got = group_signal(groups=[1] * 4, families=["x"] * 4, accuracy=[0] * 4, reward=[0.0] * 4, advantage=[-1.0] * 4,
                       advantage_abs_max=[1.0] * 4, answers=["A"] * 4)
    assert got["diag/zero_adv_groups"] == 0.0 and got["diag/same_reward_groups"] == 1.0


def test_a_token_level_advantage_that_is_not_zero_everywhere_is_not_a_zero_group():
    # per-token estimators (REINFORCE++): the mean over a response's tokens may be 0 while tokens are not
    got = group_signal(groups=[1, 1], families=["x", "x"], accuracy=[0, 0], reward=[0.1, 0.1], advantage=[0.0, 0.0],
                       advantage_abs_max=[0.3, 0.0], answers=["A", "A"])
    assert got["diag/zero_adv_groups"] == 0.0
    with pytest.raises(ValueError, match="answers has 1 entries for 2 responses"):
        group_signal(groups=[1, 1], families=["x", "x"], accuracy=[0, 0], reward=[0, 0], advantage=[0, 0],
                     advantage_abs_max=[0, 0], answers=["A"])


def test_step_diagnostics_reads_families_answers_and_entropies_from_the_batch():
    rows = [{"problem_type": "multiple choice", "answer": "A", "synth_kind": "colour"}] * 2 + \
           [{"problem_type": "multiple choice", "answer": "B"}] * 2
    responses = [[4, 5, 6], [4, 5, 6], [7, 8, 9, 10], [1, 2, 3]]
    texts = [_decode(r) for r in responses]
    out = step_diagnostics(rows=rows, groups=[0, 0, 1, 1],
                           scores=[{"accuracy": 0.0}, {"accuracy": 0.0}, {"accuracy": 1.0}, {"accuracy": 0.0}],
                           reward=[0.1, 0.1, 1.0, 0.0], advantage=[0.0, 0.0, 0.7, -0.7],
                           advantage_abs_max=[0.0, 0.0, 0.7, 0.7], texts=texts,
                           entropies=[[5, 1.0, 5], [5, 4.0, 5], [5, 2.0, 5, 5], [0.0, 0.0, 0.0]],
                           answer_spans=[answer_token_span(ids, _decode) for ids in responses])
    assert out == pytest.approx({
        # answer tokens: 1.0 and 4.0 (colour), 2.0 (the ">B" token); the fourth response has no answer
        "diag/answer_entropy": 7 / 3, "diag/answer_entropy/colour": 2.5, "diag/answer_entropy/multiple_choice": 2.0,
        "diag/zero_adv_groups": 0.5, "diag/zero_adv_groups/colour": 1.0, "diag/zero_adv_groups/multiple_choice": 0.0,
        "diag/same_reward_groups": 0.5, "diag/same_reward_groups/colour": 1.0,
        "diag/same_reward_groups/multiple_choice": 0.0,
        "diag/format_only_groups": 0.0, "diag/format_only_groups/colour": 0.0,
        "diag/format_only_groups/multiple_choice": 0.0,
        # colour: both "B", advantage 0; the other group: "B" once (the fourth has no answer) → 0.7
        "diag/modal_answer_adv": 0.35, "diag/modal_answer_adv/colour": 0.0, "diag/modal_answer_adv/multiple_choice": 0.7,
    })


def test_the_training_curves_show_the_diagnostics_overall_and_per_family():
    from evr1.tracking.plots import curves_figure

    rows = [{"step": s, "reward/overall": 0.5, "actor/entropy": 0.2, "diag/answer_entropy": 1.0 / s,
             "diag/zero_adv_groups": 0.1 * s, "diag/format_only_groups": 0.05 * s, "diag/modal_answer_adv": 0.2,
             **{f"diag/{k}/{f}": 0.1 for k in ("answer_entropy", "zero_adv_groups", "format_only_groups",
                                               "modal_answer_adv") for f in ("colour", "motion")}}
            for s in (1, 2, 3)]
    plt, fig = curves_figure(rows)
    try:
        panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        def labels(title):
            return [ln.get_label() for ln in panels[title].get_lines()]
        # the all-token entropy beside the answer's: a collapse at the answer shows against a steady whole
        assert labels("entropy") == ["all tokens", "answer tokens"]
        answer = panels["entropy"].get_lines()[1]
        assert list(answer.get_ydata()) == [1.0, 0.5, 1.0 / 3]
        signal = panels["groups without an answer signal"]
        assert labels("groups without an answer signal") == ["zero advantage", "format-only advantage"]
        assert signal.get_ylim() == (-0.02, 1.02) and signal.get_ylabel() == "share of groups"
        assert "mean over groups" in labels("advantage of the most frequent answer")
        for title in ("answer entropy by task family", "zero-advantage groups by task family",
                      "format-only groups by task family", "most frequent answer's advantage by task family"):
            assert labels(title) == ["colour", "motion"], title
        assert panels["zero-advantage groups by task family"].get_ylabel() == "share of groups"
        assert panels["answer entropy by task family"].get_ylabel() == "entropy (nats)"
    finally:
        plt.close(fig)


def test_a_long_response_is_searched_from_its_end_with_the_same_answer(monkeypatch):
    from evr1.train import diagnostics

    # 300 filler tokens, an early answer, 300 more, the final answer: the last one counts, found in the tail
    ids = [2] * 300 + [4, 5, 6] + [2] * 300 + [4, 11, 12, 13, 6, 14]
    decoded: list[int] = []

    def counting(chunk):
        decoded.append(len(chunk))
        return _decode(chunk)
    assert answer_token_span(ids, counting) == (604, 607)
    assert max(decoded) <= diagnostics.TAIL
    # a window that cuts the only tag pair grows until it holds it: the same span as a whole search
    ids = [4, 11, 12, 13, 6] + [2] * 200
    assert answer_token_span(ids, _decode) == (1, 4)
    monkeypatch.setattr(diagnostics, "TAIL", 10_000)
    assert answer_token_span(ids, _decode) == (1, 4)

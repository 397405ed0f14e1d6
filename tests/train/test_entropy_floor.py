"""An entropy floor per value of a sample field (`algorithm.entropy_target_by`,
evr1.train.entropy_bonus.EntropyControl): each family's coefficient follows its own answers'
entropy, the weights carry it into the loss as the single coefficient would, and a checkpoint keeps
every family's state."""

import json
from pathlib import Path

import pytest
import torch

from evr1.config import ConfigError, load_config
from evr1.train.entropy_bonus import EntropyControl
from evr1.train.protocol import make_shards
from evr1.train.trainer import train
from evr1.train.workers.update_loss import update_loss
from tests.train.test_on_policy_skip import setup  # noqa: F401 (the module's fixture, shared)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "conf/tiny.yaml"
FLOOR = ["algorithm.entropy_on=answer", "algorithm.entropy_target=0.5", "algorithm.entropy_coeff_delta=0.1",
         "algorithm.entropy_coeff_max=0.25"]
COLOUR, MOTION = {"synth_kind": "colour"}, {"synth_kind": "motion"}


def _algorithm(*overrides: str):
    return load_config(TINY, [*FLOOR, *overrides]).algorithm


def test_each_family_s_coefficient_follows_its_own_answer_entropy():
    ctrl = EntropyControl(_algorithm("algorithm.entropy_target_by=family"))
    rows = [COLOUR, COLOUR, MOTION, MOTION]
    weights = [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]  # the third response has no answer
    # colour's answers are hardened (0.1, 0.2 nats), motion's vary (2.0): only colour's coefficient climbs
    entropies = [[9.0, 0.1], [0.1, 0.1], [9.0, 9.0], [2.0, 9.0]]
    assert ctrl.plan(rows, weights) == ([[0.0] * 2] * 4, 1.0, [True, True, False, True])  # nothing measured yet
    metrics = ctrl.observe(rows, entropies, weights)
    assert metrics == pytest.approx({"actor/entropy_covered": (0.1 + 0.2 + 2.0) / 3, "actor/entropy_coeff": 0.0,
                                     "actor/entropy_coeff/colour": 0.0, "actor/entropy_coeff/motion": 0.0,
                                     "actor/entropy_covered/colour": 0.15, "actor/entropy_covered/motion": 2.0})
    metrics = ctrl.observe(rows, entropies, weights)
    assert metrics["actor/entropy_coeff/colour"] == pytest.approx(0.1) and metrics["actor/entropy_coeff/motion"] == 0.0
    assert metrics["actor/entropy_coeff"] == pytest.approx(0.2 / 3)  # the mean over the three covered responses
    scaled, coeff, counted = ctrl.plan(rows, weights)
    # colour's answer tokens carry its coefficient; motion's carry 0 and are still counted in the mean,
    # so a colour response's bonus is what one coefficient of 0.2 over the batch would give it
    assert [w for ws in scaled for w in ws] == pytest.approx([0.0, 0.2, 0.2, 0.2, 0.0, 0.0, 0.0, 0.0])
    assert coeff == 1.0 and counted == [True, True, False, True]
    # a family first seen later starts at entropy_coeff; one without an answer this step stays as it was
    ctrl.observe([{"synth_kind": "appears"}, COLOUR], [[0.0], [1.0]], [[1.0], [0.0]])
    assert ctrl.strata["appears"].coeff == pytest.approx(0.1) and ctrl.strata["colour"].coeff == pytest.approx(0.2)
    # the checkpoint's state, and a controller built from it, plan the same step
    state = json.loads(json.dumps(ctrl.state()))
    assert state["by"] == "family" and sorted(state["strata"]) == ["appears", "colour", "motion"]
    again = EntropyControl(_algorithm("algorithm.entropy_target_by=family"), state)
    assert again.plan(rows, weights) == ctrl.plan(rows, weights)


def test_one_controller_keeps_its_weights_and_the_checkpoint_format():
    ctrl = EntropyControl(_algorithm())
    weights = [[1.0], [0.0]]
    ctrl.observe([COLOUR, MOTION], [[0.1], [9.0]], weights)  # one mean over the batch: 0.1
    ctrl.observe([COLOUR, MOTION], [[0.1], [9.0]], weights)
    assert ctrl.plan([COLOUR, MOTION], weights) == (weights, pytest.approx(0.2), None)
    assert ctrl.state() == {"coeff": pytest.approx(0.2), "last_entropy": 0.1}
    with pytest.raises(ValueError, match="one coefficient, algorithm.entropy_target_by is 'family'"):
        EntropyControl(_algorithm("algorithm.entropy_target_by=family"), ctrl.state())
    with pytest.raises(ValueError, match="per 'family', algorithm.entropy_target_by is None"):
        EntropyControl(_algorithm(), {"by": "family", "strata": {}})


def test_a_field_the_samples_lack_is_refused_naming_the_sample_and_the_setting():
    ctrl = EntropyControl(_algorithm("algorithm.entropy_target_by=source"))
    with pytest.raises(ValueError, match=r"algorithm.entropy_target_by: sample 's7' has no field 'source'"):
        ctrl.plan([{"sample_id": "s7", "problem_type": "multiple choice"}], [[1.0]])


def test_the_floor_per_value_needs_the_answer_bonus_and_a_target():
    with pytest.raises(ConfigError, match="entropy_target_by"):
        load_config(TINY, ["algorithm.entropy_target_by=family", "algorithm.entropy_on=answer"])
    with pytest.raises(ConfigError, match="entropy_on: answer"):
        load_config(TINY, ["algorithm.entropy_target_by=family", "algorithm.entropy_target=0.3"])


def test_weights_that_carry_the_coefficient_give_the_loss_of_the_coefficient():
    """The rank's term: coefficient × Σ(weight · entropy) ÷ count. Coefficient c on 0/1 weights and
    coefficient 1 on weights c are one loss and one gradient; a stratum at 0 adds nothing but counts."""
    torch.manual_seed(0)
    entropy = torch.rand(3, 4, requires_grad=True)
    log_probs = torch.zeros(3, 4, requires_grad=True)
    mask, answer = torch.ones(3, 4), torch.tensor([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1]], dtype=torch.float32)
    o = {"top_entropy_ratio": 1.0, "loss_options": {}, "policy_loss": "ppo", "use_kl_loss": False}
    counts = {"global_token_count": 12, "global_seq_count": 3}

    def loss(weights, coeff):
        value, _, _ = update_loss(o, log_probs, entropy, torch.zeros(3, 4), None, None, mask, counts, "token-mean",
                                  bonus_weights=weights, bonus=(coeff, 3))
        return value, torch.autograd.grad(value, entropy)[0]

    one, grad_one = loss(answer, 0.3)
    folded, grad_folded = loss(answer * 0.3, 1.0)
    assert torch.allclose(one, folded) and torch.allclose(grad_one, grad_folded)
    per_row = answer * torch.tensor([[0.3], [0.0], [0.3]])  # the second response's stratum is at 0
    _, grad = loss(per_row, 1.0)
    assert torch.allclose(grad[1], torch.zeros(4)) and torch.allclose(grad[[0, 2]], grad_one[[0, 2]])


def test_make_shards_counts_the_marked_responses_also_where_their_weights_are_zero():
    responses = [[1, 2], [3], [4, 5], [6]]
    weights = [[0.0, 0.2], [0.0], [0.0, 0.0], [0.2]]
    adv = [[0.0] * len(r) for r in responses]
    shards = make_shards(2, [{}] * 4, responses, adv, entropy_weights=weights, entropy_coeff=1.0,
                         entropy_counted=[True, False, True, True])
    assert [s.entropy_counts for s in shards] == [[3], [3]]
    assert make_shards(2, [{}] * 4, responses, adv, entropy_weights=weights)[0].entropy_counts == [2]


def _with_answers(rows: list[dict]) -> list[dict]:
    """The setup's samples, each with a trajectory that writes a complete answer (mixed in as every
    group's n-th response: a random model writes none) and a `topic` field, a or b, to stratify by."""
    out = []
    for i, row in enumerate(rows):
        extra = row.get("extra") or {}
        extra = json.loads(extra) if isinstance(extra, str) else dict(extra)
        extra.update(has_offline_trajectory=True, trajectory="<answer>e</answer>", topic="ab"[i % 2])
        out.append({**row, "extra": json.dumps(extra)})
    return out


@pytest.mark.slow
def test_train_keeps_a_floor_per_value_through_a_resume(setup):
    """Through `train` with a target far above any answer's entropy: each topic's coefficient climbs by
    delta on every step its responses hold an answer, the checkpoint holds each topic's controller, and
    a resumed run continues from them."""
    tmp, base, rows, model_dir, frames_uri = setup
    rows = _with_answers(rows)
    options = [*base, "algorithm.use_kl_loss=false", "trainer.save_every=1", "algorithm.entropy_on=answer",
               "algorithm.entropy_target=100", "algorithm.entropy_coeff_delta=0.01", "algorithm.entropy_coeff_max=0.025",
               "algorithm.entropy_target_by=topic", "data.offline_key=trajectory", "algorithm.offline_ratio=1.0",
               "trainer.prompts_per_step=4", "trainer.micro_batch_size=8"]
    out = tmp / "floor_per_topic"
    history = train(load_config(TINY, [*options, "trainer.steps=2"]), samples=rows, frames_uri=frames_uri,
                    model_dir=model_dir, out_dir=out).history
    assert history[0]["actor/entropy_coeff"] == 0.0  # nothing measured before the first step
    state = json.loads((out / "step_000002" / "trainer_state.json").read_text())["entropy_control"]
    assert state["by"] == "topic" and set(state["strata"]) <= {"a", "b"}
    seen = {name: sum(f"actor/entropy_covered/{name}" in h for h in history) for name in state["strata"]}
    assert sum(seen.values()) >= 2  # every group holds an answer: each step measured at least one topic
    for name, s in state["strata"].items():
        assert s["coeff"] == pytest.approx(0.01 * seen[name]) and 0 < s["last_entropy"] < 100
    resumed = train(load_config(TINY, [*options, "trainer.steps=3"]), samples=rows, frames_uri=frames_uri,
                    model_dir=model_dir, out_dir=out).history
    assert [h["step"] for h in resumed] == [1, 2, 3]
    used = {k.rsplit("/", 1)[1]: v for k, v in resumed[2].items() if k.startswith("actor/entropy_coeff/")}
    assert used and all(v == pytest.approx(state["strata"][k]["coeff"] if k in state["strata"] else 0.0)
                        for k, v in used.items())  # step 3 starts from the saved coefficients

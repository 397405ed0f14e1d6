"""The entropy bonus on the answer's tokens (`algorithm.entropy_on: answer`) and its adaptive
coefficient (`algorithm.entropy_target`): which tokens the driver selects, the loss one real
PolicyWorker rank computes from them (tiny Qwen2.5-VL, gloo), and the coefficient's path through
`train` and a resume (Ray, a real frame cache, the HF engine)."""

import json
from pathlib import Path

import pytest
import ray
import torch

from evr1.config import ConfigError, load_config
from evr1.models import load_adapter
from evr1.train.diagnostics import answer_token_span
from evr1.train.entropy_bonus import answer_weights, covered_entropy
from evr1.train.protocol import Shard, make_shards
from evr1.train.trainer import train
from tests.train.test_on_policy_skip import _rank, setup  # noqa: F401 (the module's fixture, shared)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "conf/tiny.yaml"
NO_KL = ["algorithm.use_kl_loss=false"]  # the setup's base has a KL term: these losses are the bonus's
TEXTS = ["<answer>e</answer>", "left then right", "<think>red</think><answer>B</answer>", "e e e"]


def _answer_weights(responses: list[list[int]], decode) -> list[list[float]]:
    """The driver's 0/1 weights: each response's answer content, its span found as the step finds it."""
    return answer_weights([len(r) for r in responses], [answer_token_span(r, decode) for r in responses])


def _tokens(setup) -> tuple[list[list[int]], object]:
    adapter = load_adapter(setup[3])
    return [adapter.tokenizer.encode(t, add_special_tokens=False) for t in TEXTS], adapter


def test_answer_weights_select_the_content_of_the_last_answer_tag(setup):
    responses, adapter = _tokens(setup)
    weights = _answer_weights(responses, adapter.decode)
    assert [len(w) for w in weights] == [len(r) for r in responses]
    for ids, w, text in zip(responses, weights, TEXTS, strict=True):
        chosen = adapter.decode([t for t, x in zip(ids, w) if x])
        content = text.split("<answer>")[1].split("</answer>")[0] if "<answer>" in text else None
        if content is None:
            assert not any(w)  # no complete tag: the bonus does not touch the response
        else:  # the selected tokens write the content (a token merging the tag with it counts too)
            assert content in chosen and "answer" not in chosen.replace(">", "", 1)
    # the answer's entropy: each response's weighted tokens summed, the mean over the responses with
    # any (unreadable ones, None, count for nothing); without weights, the mean over every token
    assert covered_entropy([[1.0, 2.0, 4.0], None, [3.0], [0.5, 0.5]],
                            [[1.0, 0.0, 1.0], [1.0], [0.0, 0.0], [1.0, 0.0]]) == 2.75
    assert covered_entropy([[1.0, 2.0], [3.0]], None) == 2.0
    assert covered_entropy([[1.0]], [[0.0]]) is None


def test_make_shards_counts_the_responses_with_weighted_tokens_per_mini_batch():
    responses = [[1, 2, 3], [4, 5], [6], [7, 8]]
    weights = [[0.0, 1.0, 1.0], [1.0, 0.0], [0.0], [1.0, 1.0]]
    adv = [[0.0] * len(r) for r in responses]
    whole = make_shards(2, [{}] * 4, responses, adv, entropy_weights=weights, entropy_coeff=0.01)
    assert [s.entropy_counts for s in whole] == [[3], [3]] and whole[1].entropy_weights == weights[2:]
    assert whole[0].entropy_coeff == 0.01
    # two mini-batches: responses {0, 2} then {1, 3}, over both ranks
    minis = make_shards(2, [{}] * 4, responses, adv, mini_batch_size=2, entropy_weights=weights)
    assert minis[0].entropy_counts == [1, 2] and minis[0].mini_batches == [(4, 2), (4, 2)]
    assert make_shards(2, [{}] * 4, responses, adv)[0].entropy_counts == []


def _shard(setup, advantage: float, weights=None, coeff=None) -> Shard:
    rows = setup[2]
    responses, _ = _tokens(setup)
    counts = [sum(1 for w in weights if any(w))] if weights is not None else []
    return Shard(rows=[rows[0], rows[0], rows[1], rows[1]], responses=responses,
                 advantages=[[advantage] * len(r) for r in responses], global_token_count=sum(map(len, responses)),
                 global_sequence_count=4, entropy_weights=weights, entropy_counts=counts, entropy_coeff=coeff)


def _step(worker, shard: Shard, lr: float) -> tuple[dict, dict]:
    metrics = ray.get(worker.step.remote(shard, lr, 1))
    return metrics, ray.get(worker.full_state_dict.remote())


@pytest.mark.slow
def test_every_token_weighted_is_the_response_bonus_and_the_answer_bonus_raises_the_answer_entropy(setup):
    responses, adapter = _tokens(setup)
    everything = [[1.0] * len(r) for r in responses]
    answers = _answer_weights(responses, adapter.decode)
    # The config's bonus over every response token (a token mean over T tokens, coefficient c·T/n)
    # against the driver's weights on every token with coefficient c (each response's sum, a mean over
    # its n responses): the same loss, so the same update.
    tokens = sum(map(len, responses))
    with _rank(setup, [*NO_KL, f"algorithm.entropy_coeff={0.05 * tokens / len(responses)!r}"]) as worker:
        want, want_weights = _step(worker, _shard(setup, 0.5), 0.01)
    with _rank(setup, NO_KL) as worker:
        got, got_weights = _step(worker, _shard(setup, 0.5, everything, 0.05), 0.01)
    assert got["actor/grad_norm"] == pytest.approx(want["actor/grad_norm"], rel=1e-6)
    for name, w in want_weights.items():
        assert torch.allclose(got_weights[name], w, rtol=0.0, atol=1e-6), name
    # Zero advantages and no KL term: the answer bonus is the whole loss. No answer token, no gradient;
    # on the answer tokens, a gradient whose step raises their entropy (read by the next step's pass).
    with _rank(setup, NO_KL) as worker:
        none, _ = _step(worker, _shard(setup, 0.0, [[0.0] * len(r) for r in responses], 0.05), 1e-3)
        assert none["actor/grad_norm"] == 0.0
        first, _ = _step(worker, _shard(setup, 0.0, answers, 1.0), 1e-3)
        after, _ = _step(worker, _shard(setup, 0.0, answers, 0.0), 1e-3)
    assert first["actor/grad_norm"] > 0.0 and after["actor/grad_norm"] == 0.0
    before_h = covered_entropy(first["rows"]["entropy"], answers)
    after_h = covered_entropy(after["rows"]["entropy"], answers)
    assert after_h > before_h


def test_the_adaptive_coefficient_starts_within_its_bounds():
    with pytest.raises(ConfigError, match="entropy_coeff_max"):
        load_config(TINY, ["algorithm.entropy_target=0.3", "algorithm.entropy_coeff=0.1",
                           "algorithm.entropy_coeff_max=0.05"])
    with pytest.raises(ConfigError, match="entropy_on"):
        load_config(TINY, ["algorithm.entropy_on=prompt"])


@pytest.mark.slow
def test_train_adapts_the_coefficient_step_by_step_and_a_resume_continues_it(setup):
    """Over every response token, with a target far above any entropy: the coefficient climbs by delta
    a step (each step uses the value the steps before it left); the checkpoint holds the controller,
    and a resumed run goes on from it."""
    tmp, base, rows, model_dir, frames_uri = setup
    options = [*base, *NO_KL, "trainer.save_every=1", "algorithm.entropy_target=100", "algorithm.entropy_coeff_delta=0.01",
               "algorithm.entropy_coeff_max=0.025"]
    out = tmp / "adaptive"
    history = train(load_config(TINY, [*options, "trainer.steps=2"]), samples=rows, frames_uri=frames_uri,
                    model_dir=model_dir, out_dir=out).history
    assert [h["actor/entropy_coeff"] for h in history] == [0.0, 0.01]
    assert all(0 < h["actor/entropy_covered"] < 100 for h in history)
    state = json.loads((out / "step_000002" / "trainer_state.json").read_text())
    assert state["entropy_control"] == {"coeff": 0.02, "last_entropy": history[1]["actor/entropy_covered"]}
    resumed = train(load_config(TINY, [*options, "trainer.steps=3"]), samples=rows, frames_uri=frames_uri,
                    model_dir=model_dir, out_dir=out).history
    assert [h["actor/entropy_coeff"] for h in resumed] == [0.0, 0.01, 0.02]  # step 3 continues the state

"""Issue 11's trainer guarantees, each on the real Ray/FSDP2 trainer with a tiny Qwen2.5-VL on CPU:

- one rank or two train alike (losses and final weights);
- padding-free (packed) passes and token-budget micro-batches give the padded path's training;
- a frozen vision tower keeps its weights while the rest learns.
"""

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from transformers import AutoConfig, AutoModelForImageTextToText

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.train.trainer import train
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]
LR = 0.01
LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm", "reward/overall")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    # Unshared passes (micro-batches of one response would not share), so the packed/padded choice and
    # the token budget decide every pass; KL in the loss so the reference pass runs too.
    base = [f"run.root={tmp}", "run.name=ranks", "tracking.enabled=false", "cache.workers=0",
            *letter_density_overrides(letter_density_data(tmp)), "model.tiny.family=qwen2_5_vl",
            "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=4", "rollout.n=2", "trainer.steps=2",
            "trainer.micro_batch_size=4", "trainer.share_prompt_prefix=false", "rollout.max_new_tokens=8",
            "trainer.save_every=0", f"trainer.lr={LR}", "algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.1"]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    runs = {}

    def run(name: str, overrides: list[str]):
        if name not in runs:
            c = load_config(ROOT / "conf/tiny.yaml", [*base, *overrides])
            runs[name] = train(c, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                               model_dir=Path(model.uri), out_dir=tmp / name)
        return runs[name]
    return run, Path(model.uri)


def _weights(checkpoint: Path, base: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(base))
    sd = model.state_dict()
    dcp.load({"model": sd}, checkpoint_id=str(checkpoint), no_dist=True)
    return sd


def _assert_same_training(a, b, base: Path, *, rtol: float):
    for got, want in zip(a.history, b.history, strict=True):
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=rtol, abs=1e-6), key
    # Adam divides each element's gradient by its own running scale, so an element whose gradient is
    # near zero moves by a different fraction of lr when float rounding changes that gradient: weights
    # agree to 1 % of the largest move Adam can make over the run (lr per step).
    wa, wb = _weights(a.checkpoint, base), _weights(b.checkpoint, base)
    atol = 0.01 * LR * len(a.history)
    for name, w in wa.items():
        assert torch.allclose(w, wb[name], rtol=0.0, atol=atol), name


@pytest.mark.slow
def test_one_rank_and_two_ranks_train_alike(setup):
    run, base = setup
    one, two = run("one", ["trainer.world_size=1"]), run("two", ["trainer.world_size=2"])
    # It learned something: non-zero gradients, and the policy moved away from the reference.
    assert one.history[0]["actor/grad_norm"] > 0.0 and one.history[1]["actor/kl_loss"] > 0.0
    _assert_same_training(one, two, base, rtol=1e-4)


@pytest.mark.slow
def test_padding_free_and_token_budget_train_like_padded_batches(setup):
    run, base = setup
    packed = run("two", ["trainer.world_size=2"])
    padded = run("padded", ["trainer.world_size=2", "trainer.padding_free=false"])
    assert packed.history[0]["perf/update_padding_share"] == 0.0
    assert padded.history[0]["perf/update_padding_share"] > 0.0
    _assert_same_training(packed, padded, base, rtol=1e-4)
    # A budget below one prompt's size: every response gets a micro-batch of its own (4 per rank),
    # each counted as over budget, and training is unchanged.
    budget = run("budget", ["trainer.world_size=2", "trainer.max_tokens_per_micro_batch=64"])
    h = budget.history[0]
    assert h["perf/update_micro_batches"] == 4 and h["perf/update_over_budget"] == 8
    assert packed.history[0]["perf/update_micro_batches"] == 1
    _assert_same_training(packed, budget, base, rtol=1e-4)


@pytest.mark.slow
def test_a_frozen_vision_tower_keeps_its_weights(setup):
    run, base = setup
    frozen = run("frozen", ["trainer.world_size=2", "model.freeze_vision_tower=true"])
    before = AutoModelForImageTextToText.from_pretrained(base).state_dict()
    after = _weights(frozen.checkpoint, base)
    vision = [n for n in after if ".visual." in f".{n}"]
    assert vision
    assert all(torch.equal(after[n], before[n]) for n in vision)
    changed = [n for n in after if n not in vision and not torch.equal(after[n], before[n])]
    assert any("language_model" in n for n in changed)


@pytest.mark.slow
def test_sequence_parallel_trains_like_one_rank(setup):
    """Two ranks splitting every sequence (one data-parallel share) train as one rank holding it whole.
    Sequence parallelism takes one sequence per micro-batch (a padded one would attend with an L x L
    mask; refused at config load), so both runs do."""
    run, base = setup
    one = run("one", ["trainer.world_size=1", "trainer.micro_batch_size=1"])
    split = run("sp2", ["trainer.world_size=2", "trainer.sequence_parallel=2", "trainer.micro_batch_size=1"])
    assert split.history[0]["perf/update_padding_share"] == 0.0  # one whole sequence, split over the ranks
    _assert_same_training(one, split, base, rtol=1e-4)


@pytest.mark.slow
def test_a_frozen_tower_encodes_each_prompt_once_per_step(setup):
    """With the tower frozen, the old, reference and update passes reuse one encoding per prompt (the
    reference holds the same tower), on packed passes and on the shared prefix; training is unchanged."""
    run, base = setup
    frozen = ["trainer.world_size=2", "model.freeze_vision_tower=true"]
    # The plain runs keep the old log-prob pass (a strictly on-policy step skips it), so that three passes
    # encode; the reused runs skip it: the reference's pass encodes, and training is still the same.
    off = ["trainer.reuse_vision_features=false", "trainer.skip_old_log_probs=false"]
    shared = ["trainer.share_prompt_prefix=true"]
    pairs = {"packed": (run("frozen", frozen), run("frozen-plain", [*frozen, *off])),
             "shared": (run("frozen-shared", [*frozen, *shared]), run("frozen-shared-plain", [*frozen, *shared, *off]))}
    prompts = 4  # per step, over both ranks
    for name, (reused, plain) in pairs.items():
        _assert_same_training(plain, reused, base, rtol=1e-5)
        for h in reused.history:  # policy ranks: one tower pass per prompt
            assert h["perf/rank_vision_passes"] == prompts, name
    # without reuse: old, reference and update each encode every response's (packed) or prompt's (shared) media
    assert all(h["perf/rank_vision_passes"] == 3 * 2 * prompts for h in pairs["packed"][1].history)
    assert all(h["perf/rank_vision_passes"] == 3 * prompts for h in pairs["shared"][1].history)

"""Training resumes exactly: 1 step, stop, resume to 2 steps gives the same weights, optimizer state and
data order as 2 uninterrupted steps, and so does a fork of the 1-step run (`trainer.init_from`) into
another folder; a fork with another lr trains on at that lr. Real Ray actors, FSDP2 over 2 gloo
ranks, a tiny Qwen2.5-VL."""

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from evr1 import pipeline
from evr1.config import load_config
from evr1.config.preflight import preflight
from evr1.data.ingest import read_samples
from evr1.train.checkpoint import latest_checkpoint, read_state, resolve
from evr1.train.trainer import starting_point, train

ROOT = Path(__file__).resolve().parents[2]


def _load_flat(ckpt: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP checkpoint (model and optimizer), read back in one process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = ckpt.parent / f"{ckpt.name}.pt"
    dcp_to_torch_save(str(ckpt), str(out))
    flat = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        elif torch.is_tensor(node):
            flat[prefix] = node

    walk("", torch.load(out, weights_only=False))
    return flat


@pytest.mark.slow
def test_resume_equals_uninterrupted(tmp_path):
    overrides = [f"run.root={tmp_path}", "run.name=resume", "data.synth.n=6", "data.synth.heldout=2",
                 "model.tiny.family=qwen2_5_vl", "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=2",
                 "trainer.micro_batch_size=2", "rollout.max_new_tokens=6", "cache.workers=0", "tracking.enabled=false",
                 "trainer.save_every=1", "trainer.keep_last=5",
                 "trainer.warmup_sft_steps=2"]
    cfg = load_config(ROOT / "conf/tiny.yaml", [*overrides, "trainer.steps=2"])
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    rows = read_samples(samples.uri, split="train")

    straight = train(cfg, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "a")
    assert straight.steps == 2

    one = load_config(ROOT / "conf/tiny.yaml", [*overrides, "trainer.steps=1"])
    train(one, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "b")
    assert read_state(latest_checkpoint(tmp_path / "b"))["step"] == 1
    resumed = train(cfg, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "b")
    assert resumed.steps == 2

    a, b = read_state(straight.checkpoint), read_state(resumed.checkpoint)
    assert a["cursor"] == b["cursor"]
    assert [h["reward/overall"] for h in a["history"]] == [h["reward/overall"] for h in b["history"]]
    ta, tb = _load_flat(straight.checkpoint), _load_flat(resumed.checkpoint)
    assert ta.keys() == tb.keys() and any(".optim." in k for k in ta)
    for k in ta:
        torch.testing.assert_close(ta[k], tb[k], atol=0, rtol=0, msg=k)
    # and the weights did move from the base model
    base = _load_flat(latest_checkpoint(tmp_path / "b").parent / "step_000001")
    assert any(not torch.equal(base[k], ta[k]) for k in ta if k.startswith(".model."))

    # A fork of the 1-step run into another folder, same settings: the same two steps, bitwise.
    origin = tmp_path / "b" / "step_000001"
    fork_cfg = load_config(ROOT / "conf/tiny.yaml", [*overrides, "trainer.steps=2", f"trainer.init_from={origin}"])
    forked = train(fork_cfg, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "c")
    assert forked.forked_from == origin and forked.resumed_from == 1 and forked.steps == 2
    assert (tmp_path / "c" / "warmup_reference").is_dir()  # the origin's reference travels with the fork
    c = read_state(forked.checkpoint)
    assert c["cursor"] == a["cursor"] and [h["reward/overall"] for h in c["history"]] == [h["reward/overall"] for h in a["history"]]
    tc = _load_flat(forked.checkpoint)
    for k in ta:
        torch.testing.assert_close(tc[k], ta[k], atol=0, rtol=0, msg=k)

    # The same origin at a tenth of the lr: step 1 is the origin's, step 2 trains at the new rate and lands elsewhere.
    assert resolve(tmp_path / "b") == tmp_path / "b" / "step_000002"  # a run's folder: its newest checkpoint
    slow = load_config(ROOT / "conf/tiny.yaml", [*overrides, "trainer.steps=2", f"trainer.init_from={origin}",
                                                  f"trainer.lr={cfg.trainer.lr / 10}"])
    lowered = train(slow, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "d")
    assert lowered.history[0]["reward/overall"] == a["history"][0]["reward/overall"]
    assert lowered.history[-1]["actor/lr"] == pytest.approx(cfg.trainer.lr / 10)
    td = _load_flat(lowered.checkpoint)
    assert any(not torch.equal(td[k], ta[k]) for k in ta if k.startswith(".model."))


def test_fork_refuses_what_it_cannot_start_from(tmp_path):
    """A path with no checkpoint is named at config check and at train time; a fork with no step left
    to train says so before any actor starts."""
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", f"trainer.init_from={tmp_path / 'none'}"])
    assert [p for p in preflight(cfg, ("trainer",))] == [
        f"trainer.init_from={tmp_path / 'none'}: no checkpoint there (expected a step_N folder or a run's "
        "checkpoints/<fingerprint> folder)"]
    with pytest.raises(ValueError, match=r"trainer.init_from=.*none: no checkpoint there"):
        train(cfg, samples=[], frames_uri=None, model_dir=tmp_path, out_dir=tmp_path / "out")

    step = tmp_path / "ckpt" / "step_000003"
    step.mkdir(parents=True)
    (step / "trainer_state.json").write_text('{"step": 3, "cursor": {}, "history": []}')
    assert preflight(load_config(ROOT / "conf/tiny.yaml", [f"trainer.init_from={step.parent}"]), ("trainer",)) == []
    late = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", f"trainer.init_from={step}", "trainer.steps=3"])
    with pytest.raises(ValueError, match=r"at step 3, trainer.steps=3: nothing to train"):
        train(late, samples=[], frames_uri=None, model_dir=tmp_path, out_dir=tmp_path / "out")


def test_starting_point_prefers_the_runs_own_checkpoint(tmp_path):
    """A fork starts from its origin until it has saved; then it resumes from its own, unless told not
    to resume (then the origin again). The flow tags the train run with the origin before training."""
    def state(folder: Path, step: int) -> Path:
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(f'{{"step": {step}, "cursor": {{}}, "history": []}}')
        return folder

    origin = state(tmp_path / "origin" / "step_000300", 300)
    out = tmp_path / "fork"
    out.mkdir()
    fork = load_config(ROOT / "conf/tiny.yaml", [f"trainer.init_from={origin.parent}"])
    assert starting_point(fork, out) == (None, origin)
    own = state(out / "step_000350", 350)
    assert starting_point(fork, out) == (own, None)
    fresh = load_config(ROOT / "conf/tiny.yaml", [f"trainer.init_from={origin}", "trainer.resume=false"])
    assert starting_point(fresh, out) == (None, origin)
    assert starting_point(load_config(ROOT / "conf/tiny.yaml", []), out) == (own, None)

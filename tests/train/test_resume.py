"""Training resumes exactly: 1 step, stop, resume to 2 steps gives the same weights, optimizer state and
data order as 2 uninterrupted steps. Real Ray actors, FSDP2 over 2 gloo ranks, a tiny Qwen2.5-VL."""

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.train.checkpoint import latest_checkpoint, read_state
from evr1.train.trainer import train

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

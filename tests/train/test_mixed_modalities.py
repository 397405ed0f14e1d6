"""FSDP2 ranks whose micro-batches hold different media (text-only, image, video) step together without a
collective mismatch, and the merged result matches the trained weights. Real Ray actors, 2 gloo ranks, a tiny Qwen3-VL."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.data.synth import make_synthetic
from evr1.train.merge import MergeMismatch, merge_checkpoint
from evr1.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ranks_with_different_media_train_together(tmp_path):
    rep = make_synthetic(tmp_path / "synth", 10, seed=5, heldout=2, image_fraction=0.3)
    records = [json.loads(line) for line in Path(rep.train_path).read_text().splitlines()]
    video = next(r for r in records if r.get("videos"))
    image = next(r for r in records if r.get("images"))
    text = {"problem": "Is seven larger than three?", "answer": "Yes", "problem_type": "boolean", "problem_id": "t1"}
    data = tmp_path / "mixed.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in (text, image, video)) + "\n")
    overrides = [f"run.root={tmp_path}", "run.name=mixed", "tracking.enabled=false", "cache.workers=0",
                 f'data={{"train_files": ["{data}"], "data_root": "{tmp_path / "synth"}"}}',
                 "trainer.steps=2", "trainer.warmup_sft_steps=1", "trainer.prompts_per_step=3", "rollout.n=2",
                 "trainer.world_size=2",
                 "trainer.micro_batch_size=1", "rollout.max_new_tokens=6", "trainer.lr=0.01",
                 "algorithm.use_kl_loss=false", "trainer.weight_decay=0.0"]
    cfg = load_config(ROOT / "conf/tiny.yaml", overrides)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    rows = read_samples(samples.uri, split="train")
    assert sorted(r["data_type"] for r in rows) == ["image", "text", "video"]
    result = train(cfg, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri), out_dir=tmp_path / "ckpt")
    assert result.steps == 2
    merged = merge_checkpoint(result.checkpoint, tmp_path / "merged", base_model=Path(model.uri))
    assert merged.max_logit_diff is not None and merged.max_logit_diff < 1e-4
    # The exact check: every trained tensor's fp32 values are in the merged model (the probe's logits,
    # computed here on the CPU in fp32 as the merge does, agree too; on a GPU they would not be exact).
    probe = torch.load(result.checkpoint / "probe.pt", weights_only=True)
    assert merged.weights_verified == len(probe["weights"]) > 0 and merged.probe_device == "cpu"
    tampered = tmp_path / "tampered"
    shutil.copytree(result.checkpoint, tampered)
    name = sorted(probe["weights"])[0]
    probe["weights"][name] = "0" * 32  # as if the merged tensor were not the trained one
    torch.save(probe, tampered / "probe.pt")
    with pytest.raises(MergeMismatch, match=f"1 tensors differ \\({re.escape(name)}\\), 0 missing"):
        merge_checkpoint(tampered, tmp_path / "merged2", base_model=Path(model.uri))

"""Sharded training checkpoint → an ordinary Hugging Face model directory (safetensors + processor).

The result loads with `AutoModelForImageTextToText.from_pretrained` like any released checkpoint.
When the checkpoint carries `probe.pt` (logits of the trained weights on a fixed input, written by
the trainer), the merged model is reloaded from disk and its logits compared against them.
"""

from __future__ import annotations

import hashlib
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from transformers import AutoConfig, AutoModelForImageTextToText

from evr1.train.checkpoint import read_state

# Files of the base model directory that are not weights: tokenizer, processor, chat template.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# generation_config.json is copied over the one save_pretrained writes: it carries the checkpoint's
# full list of end-of-sequence ids (Qwen stops on two), which the model config alone does not.
_SKIP = {"config.json", "model.safetensors.index.json"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class MergeResult:
    model_dir: Path
    num_parameters: int
    weights_sha256: str
    max_logit_diff: float | None


def merge_checkpoint(checkpoint: Path, out_dir: Path, *, base_model: Path | None = None,
                     dtype: torch.dtype | str | None = None) -> MergeResult:
    """Load the DCP shards into a full model, save it with the base model's tokenizer and processor files."""
    checkpoint = Path(checkpoint)
    state = read_state(checkpoint)
    base = Path(base_model or state["base_model"])
    config = AutoConfig.from_pretrained(base)
    model = AutoModelForImageTextToText.from_config(config)
    model_sd = model.state_dict()
    # A single-process load of a multi-rank checkpoint: DCP reshards to whatever layout we ask for.
    with warnings.catch_warnings():  # no_dist=True is the point: torch warns that it assumes one process
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": model_sd}, checkpoint_id=str(checkpoint), no_dist=True)
    model.load_state_dict(model_sd)
    if dtype is not None:
        model.to(_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    for f in base.iterdir():
        if f.is_file() and f.name not in _SKIP and not f.name.endswith(_WEIGHT_SUFFIXES):
            shutil.copy2(f, out_dir / f.name)
    digest = hashlib.sha256()
    for f in sorted(out_dir.glob("*.safetensors")):
        digest.update(f.read_bytes())
    diff = verify_probe(checkpoint, out_dir) if (checkpoint / "probe.pt").exists() else None
    return MergeResult(out_dir, sum(p.numel() for p in model.parameters()), digest.hexdigest()[:16], diff)


def verify_probe(checkpoint: Path, model_dir: Path) -> float:
    """Max |logit difference| between the merged model (loaded from disk) and the trained weights."""
    probe = torch.load(checkpoint / "probe.pt", weights_only=True)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype="auto")  # as trained
    model.eval()
    with torch.no_grad():
        logits = model(**probe["inputs"]).logits.float()
    return float((logits - probe["logits"]).abs().max())

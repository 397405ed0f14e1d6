"""Sharded training checkpoint → an ordinary Hugging Face model directory (safetensors + processor).

The result loads with `AutoModelForImageTextToText.from_pretrained` like any released checkpoint.
When the checkpoint carries `probe.pt` (written by the trainer at the end), the merge is checked
twice. Exactly: every tensor the trainer held must be in the merged model with the same fp32 values
(a digest per tensor; a difference is an error naming the tensors). Functionally: the merged model,
reloaded from disk, runs the probe's input and its logits are compared with the trainer's. The
logits are exact only where both ran alike; the trainer computes them on its own device (a GPU's
bf16 kernels), the merge on this host, so `max_logit_diff` there measures the devices' numerics,
not the merge (the probe records its device and dtype).
"""

from __future__ import annotations

import hashlib
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
import torch
import torch.distributed.checkpoint as dcp
from transformers import AutoConfig, AutoModelForImageTextToText

from evr1.train.checkpoint import read_state, tensor_digest

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
    # Tensors whose fp32 values were checked equal to the trained weights' (None: an older checkpoint
    # without digests); and where the probe's logits were computed (`max_logit_diff` is exact only
    # when that is this host's CPU in fp32).
    weights_verified: int | None = None
    probe_device: str | None = None


class MergeMismatch(RuntimeError):
    """The merged model's weights are not the trained ones."""


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
    probe = torch.load(checkpoint / "probe.pt", weights_only=True) if (checkpoint / "probe.pt").exists() else None
    verified = verify_weights(model, probe["weights"]) if probe is not None and probe.get("weights") else None
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
    diff = verify_probe(checkpoint, out_dir, probe=probe) if probe is not None else None
    return MergeResult(out_dir, sum(p.numel() for p in model.parameters()), digest.hexdigest()[:16], diff,
                       weights_verified=verified, probe_device=probe.get("device") if probe is not None else None)


def verify_weights(model: torch.nn.Module, digests: dict[str, str]) -> int:
    """Check every trained tensor (`digests`: name → `tensor_digest`) against `model`'s; return how
    many matched, or raise `MergeMismatch` naming the ones missing or different."""
    state = model.state_dict()
    missing = sorted(set(digests) - set(state))
    different = sorted(n for n in digests if n in state and tensor_digest(state[n]) != digests[n])
    if missing or different:
        raise MergeMismatch(f"merged model differs from the trained weights: {len(different)} tensors differ "
                            f"({', '.join(different[:5])}{' …' if len(different) > 5 else ''}), "
                            f"{len(missing)} missing ({', '.join(missing[:5])}{' …' if len(missing) > 5 else ''})")
    return len(digests)


def verify_probe(checkpoint: Path, model_dir: Path, *, probe: dict | None = None) -> float:
    """Max |logit difference| between the merged model (loaded from disk) and the trained weights.
    `probe`: `probe.pt` already loaded (else read from `checkpoint`)."""
    if probe is None:
        probe = torch.load(checkpoint / "probe.pt", weights_only=True)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype="auto")  # as trained
    model.eval()
    with torch.no_grad():
        logits = model(**probe["inputs"]).logits.float()
    return float((logits - probe["logits"]).abs().max())

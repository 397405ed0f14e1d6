"""The dtypes a rank trains in: what parameters are stored in, what the forward computes in, what
gradients are reduced in.

On CUDA with `model.dtype` bfloat16 (or float16), FSDP2's mixed-precision policy keeps the sharded
master weights and Adam's states in float32, gathers parameters as bf16 for the forward and
backward, and reduce-scatters gradients in float32 (verl's and torchtitan's default). A model
stored in bf16 and stepped in bf16 loses updates smaller than 2⁻⁸ of a weight. On CPU there is no
fast bf16 path to gain from: every dtype trains in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from evr1.models.runtime import as_dtype


@dataclass(frozen=True)
class Precision:
    storage: torch.dtype  # parameters, gradients and optimizer states at rest
    compute: torch.dtype  # the forward/backward (and the pixel values fed to it)
    policy: MixedPrecisionPolicy | None  # FSDP2's casts; None: compute in the storage dtype


def precision(dtype: str, device: str) -> Precision:
    """The training precision for `model.dtype` on `device` (see the module docstring)."""
    wanted = as_dtype(dtype)
    if device != "cuda" or wanted == torch.float32:
        return Precision(torch.float32, torch.float32, None)
    return Precision(torch.float32, wanted, MixedPrecisionPolicy(param_dtype=wanted, reduce_dtype=torch.float32))

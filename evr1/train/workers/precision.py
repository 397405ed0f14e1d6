"""The dtypes a rank trains in: what parameters are stored in, what the forward computes in, what
gradients are reduced in.

On CUDA with `model.dtype` bfloat16 (or float16), FSDP2's mixed-precision policy keeps the sharded
master weights and Adam's states in float32, gathers parameters as bf16 for the forward and
backward, and reduce-scatters gradients in float32 (verl's and torchtitan's default). A model
stored in bf16 and stepped in bf16 loses updates smaller than 2⁻⁸ of a weight. On CPU there is no
fast bf16 path to gain from: every dtype trains in float32.

The policy does not cast forward inputs (`cast_forward_inputs=False`): FSDP2 would otherwise cast
every float input of each unit's forward to bf16, the root's included, so Qwen2.5-VL's
`second_per_grid_ts` (seconds per temporal patch, e.g. 0.4995) would reach `get_rope_index` rounded
(0.5) in the passes whose positions the model computes itself (padded, shared prefix), while the
packed pass computes them outside the forward in float32: the video's temporal positions, hence the
log-probs, would differ between passes (the ratio not 1 at the start of a step). Pixel values are
already prepared in the compute dtype (`ModelBatch.to(device, dtype)`), and every unit inside the root
receives hidden states the bf16 parameters produced, so nothing else depends on the cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from evr1.models.runtime import as_dtype, resolve_dtype


@dataclass(frozen=True)
class Precision:
    storage: torch.dtype  # parameters, gradients and optimizer states at rest
    compute: torch.dtype  # the forward/backward (and the pixel values fed to it)
    policy: MixedPrecisionPolicy | None  # FSDP2's casts; None: compute in the storage dtype

    @property
    def reference(self) -> torch.dtype:
        """What the frozen reference is stored in: it only runs forwards, which compute in `compute`, so
        under mixed precision it is stored in that dtype (half the memory, no float32 master copy, the
        same log-probs: FSDP2 would round each gathered float32 parameter to it anyway)."""
        return self.compute if self.policy is not None else self.storage


def precision(dtype: str, device: str) -> Precision:
    """The training precision for `model.dtype` on `device` (see the module docstring); "auto": bf16 on
    CUDA, float32 on the CPU (`resolve_dtype`)."""
    wanted = as_dtype(resolve_dtype(dtype, device))
    if device != "cuda" or wanted == torch.float32:
        return Precision(torch.float32, torch.float32, None)
    return Precision(torch.float32, wanted, MixedPrecisionPolicy(param_dtype=wanted, reduce_dtype=torch.float32,
                                                                 cast_forward_inputs=False))

"""Vision preprocessing that reproduces HF's Qwen2-VL image/video processors without torchvision.

HF's video processors need torchvision, which cannot be installed next to the CPU torch build
(stack-feasibility §3, workaround C), so the project patchifies frames itself. Every numeric step
copies what transformers 5.23 does, so the same tensors reach the model on CPU and GPU:

* images follow `Qwen2VLImageProcessorPil`: smart-resize with PIL bicubic, rescale in float64 then
  cast to float32, normalise in float32, and repeat the single frame `temporal_patch_size` times;
* videos follow `Qwen2VLVideoProcessor` (torchvision backend): the rescale is fused into the
  normalisation, `(x - mean*255) / (std*255)` in float32, and T is padded to a multiple of the
  temporal patch by repeating the last frame.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as _hf_image_smart_resize

RESCALE = 1.0 / 255.0


def patchify(frames: torch.Tensor, *, patch_size: int, merge_size: int, temporal_patch_size: int) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """T×C×H×W float frames → (gt·gh·gw, C·tps·ps·ps) patches and the (gt, gh, gw) grid.

    Rows come in the order the vision tower's patch merger expects: merge windows of
    `merge_size × merge_size` patches are contiguous.
    """
    t, c, h, w = frames.shape
    if pad := -t % temporal_patch_size:
        frames = torch.cat([frames, frames[-1:].expand(pad, c, h, w)], dim=0)
        t += pad
    gt, gh, gw = t // temporal_patch_size, h // patch_size, w // patch_size
    m, ps, tps = merge_size, patch_size, temporal_patch_size
    patches = frames.reshape(gt, tps, c, gh // m, m, ps, gw // m, m, ps)
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(gt * gh * gw, c * tps * ps * ps).contiguous(), (gt, gh, gw)


def as_tensor(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A tensor view of uint8 media, read-only cache buffers included (they are only ever read)."""
    if torch.is_tensor(frames):
        return frames
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable array": nothing here writes to it
        return torch.from_numpy(np.ascontiguousarray(frames))


def normalize_video(frames: np.ndarray | torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 T×H×W×3 → float32 T×3×H×W with the video processor's fused rescale+normalise.

    Runs where `frames` lives (a uint8 tensor already on the accelerator stays there): the trainer
    moves uint8 frames to the device and prepares them there, 4× fewer bytes than float32 patches.
    """
    x = as_tensor(frames)
    x = x.permute(0, 3, 1, 2).to(torch.float32)
    # Made on the host, copied without waiting for the device (`torch.tensor(..., device=cuda)` would
    # synchronise the stream: a host stall per video in every pass). Same values, same ops.
    mean_t = torch.tensor(list(mean)).to(x.device, non_blocking=True) * (1.0 / RESCALE)
    std_t = torch.tensor(list(std)).to(x.device, non_blocking=True) * (1.0 / RESCALE)
    return (x - mean_t[None, :, None, None]) / std_t[None, :, None, None]


def normalize_image(image: np.ndarray | torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 H×W×3 → float32 1×3×H×W exactly as the PIL image processor rescales and normalises
    (rescale in float64, cast, normalise in float32), on the device `image` lives on."""
    x = as_tensor(image)
    x = (x.permute(2, 0, 1).to(torch.float64) * RESCALE).to(torch.float32)
    mean_t = torch.tensor(list(mean), dtype=torch.float32).to(x.device, non_blocking=True)[:, None, None]
    std_t = torch.tensor(list(std), dtype=torch.float32).to(x.device, non_blocking=True)[:, None, None]
    return ((x - mean_t) / std_t).contiguous()[None]


def resize_image(image: np.ndarray, *, factor: int, min_pixels: int, max_pixels: int) -> np.ndarray:
    """Smart-resize an RGB uint8 image to multiples of `factor` within the pixel budget.

    Uses transformers' own Qwen2-VL `smart_resize` and PIL bicubic, the two steps the HF image
    processor applies, so our image tokens equal what the checkpoint's processor would produce.
    """
    h, w = image.shape[:2]
    new_h, new_w = _hf_image_smart_resize(h, w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    if (new_h, new_w) == (h, w):
        return image
    return np.asarray(Image.fromarray(image).resize((new_w, new_h), resample=Image.Resampling.BICUBIC))


def frame_group_timestamps(frame_indices: Sequence[int], fps: float, temporal_patch_size: int) -> list[float]:
    """Seconds shown before each temporal patch group in a Qwen3-VL prompt.

    Mirrors `Qwen3VLProcessor._calculate_timestamps` (transformers 5.23): pad the index list to a
    multiple of the temporal patch by repeating the last index, convert to index / native fps, and
    average the first and last frame of each group.
    """
    indices = [int(i) for i in frame_indices]
    if pad := -len(indices) % temporal_patch_size:
        indices += [indices[-1]] * pad
    seconds = [i / fps for i in indices]
    return [
        (seconds[g] + seconds[g + temporal_patch_size - 1]) / 2 for g in range(0, len(seconds), temporal_patch_size)
    ]


def format_timestamp(seconds: float) -> str:
    """`<t.t seconds>`, the text Qwen3VLProcessor puts before each group (`f"<{t:.1f} seconds>"`)."""
    return f"<{seconds:.1f} seconds>"

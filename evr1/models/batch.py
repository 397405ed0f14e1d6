"""What a prompt becomes on its way to the model: one tokenized prompt (`PromptInputs`), a padded batch
of prompts and responses (`ModelBatch`), and the step that turns uint8 media into pixel tensors on the
device the model runs on (`prepare_media`).

Engines, the log-prob passes and the trainer exchange these types; `adapter.py` builds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from evr1.models.vision import as_tensor, normalize_image, normalize_video, patchify
from evr1.video.clip import VideoClip

MEDIA_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


@dataclass(frozen=True)
class VisionSettings:
    """Geometry and normalisation read from one processor config file (image or video)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    min_pixels: int | None
    max_pixels: int | None

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


@dataclass
class PromptInputs:
    """One tokenized prompt with its preprocessed media.

    `videos` / `images` keep the (resized) raw media for engines that run their own processor
    (vLLM); the model itself only needs `input_ids`, `mm_token_type_ids` and `mm`.

    `deferred`: `mm` holds only the grids; the float patches are made from the uint8 media by
    `ModelBatch.to(device, dtype)`, on the device the model runs on (the trainer's path).
    """

    input_ids: list[int]
    mm_token_type_ids: list[int]
    mm: dict[str, torch.Tensor]
    text: str
    videos: tuple[VideoClip, ...] = ()
    images: tuple[np.ndarray, ...] = ()
    deferred: bool = False

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class ModelBatch:
    """Left-padded prompts followed by right-padded responses, ready for `model(**batch.model_inputs())`."""

    input_ids: torch.Tensor  # [B, Lp + Lr]
    attention_mask: torch.Tensor  # [B, Lp + Lr]
    mm_token_type_ids: torch.Tensor  # [B, Lp + Lr], zeros over responses
    mm: dict[str, torch.Tensor]
    response_mask: torch.Tensor  # [B, Lr], 1 on real response tokens
    prompt_length: int  # Lp, the padded prompt width
    # uint8 media of deferred prompts, in prompt order, prepared into `mm` by `to()`.
    pending_images: tuple[np.ndarray, ...] = ()
    pending_videos: tuple[np.ndarray, ...] = ()
    settings: tuple[VisionSettings, VisionSettings] | None = None  # (image, video)
    # Precomputed vision features (`shared_prefix.VisualFeatures`) standing in for the pixels: the
    # model scatters them at the placeholders instead of running its vision tower (`with_visual`).
    visual: Any = None
    # Multimodal rope positions [3, B, Lp + Lr] and each row's offset [B, 1], worked out on the host before
    # the move (`positions.with_host_positions`): the forward then skips `get_rope_index` on the device.
    position_ids: torch.Tensor | None = None
    rope_deltas: torch.Tensor | None = None
    # Its packed row's index tensors (`packed.PackedLayout`), likewise made on the host for the packed pass.
    packed: Any = None
    # The flat positions of the valid response tokens (`runtime.valid_index(response_mask)`), made on the
    # host for the chunked log-probs: `nonzero` on the device would wait for it.
    response_index: torch.Tensor | None = None

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_length :]

    def model_inputs(self) -> dict[str, Any]:
        if self.pending_images or self.pending_videos:
            raise ValueError("ModelBatch: media are still uint8 frames; call .to(device, dtype) to prepare them")
        mm: dict[str, Any] = dict(self.mm)
        if self.visual is not None and self.visual.outputs:
            mm["mm_encoder_outputs"] = dict(self.visual.outputs)
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
            **({"position_ids": self.position_ids} if self.position_ids is not None else {}),
            **mm,
        }

    def with_visual(self, visual: Any) -> ModelBatch:
        """This batch with its media replaced by precomputed features (one entry per image / video, in
        batch order); the pixels, prepared or pending, are dropped and never made."""
        mm = {k: v for k, v in self.mm.items() if k not in ("pixel_values", "pixel_values_videos")}
        return replace(self, mm=mm, pending_images=(), pending_videos=(), visual=visual)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None, *,
           non_blocking: bool = False) -> ModelBatch:
        """Move every tensor; `dtype` applies to the pixel tensors only (e.g. bf16 models).

        Pending uint8 media go to `device` as uint8 and are normalised and patchified there
        (`prepare_media`): float32 gives the processors' exact values, other dtypes their rounding.
        `non_blocking`: host tensors bound for an accelerator are staged in pinned memory and copied
        without waiting for the device (`to_device`); the values are the same.
        """

        def move(key: str, t: torch.Tensor) -> torch.Tensor:
            cast = dtype if dtype is not None and key.startswith("pixel_values") else None
            return to_device(t, device, cast, non_blocking=non_blocking)

        mm = {k: move(k, v) for k, v in self.mm.items()}
        if self.pending_images or self.pending_videos:
            mm.update(prepare_media(self.pending_images, self.pending_videos, self.settings, device, dtype,
                                    non_blocking=non_blocking))
        return replace(
            self,
            input_ids=to_device(self.input_ids, device, non_blocking=non_blocking),
            attention_mask=to_device(self.attention_mask, device, non_blocking=non_blocking),
            mm_token_type_ids=to_device(self.mm_token_type_ids, device, non_blocking=non_blocking),
            mm=mm,
            response_mask=to_device(self.response_mask, device, non_blocking=non_blocking),
            pending_images=(),
            pending_videos=(),
            visual=self.visual.to(device) if self.visual is not None else None,
            position_ids=_moved(self.position_ids, device, non_blocking),
            rope_deltas=_moved(self.rope_deltas, device, non_blocking),
            response_index=_moved(self.response_index, device, non_blocking),
            packed=self.packed.to(device, non_blocking=non_blocking) if self.packed is not None else None,
        )


def _moved(t: torch.Tensor | None, device: torch.device | str, non_blocking: bool) -> torch.Tensor | None:
    return None if t is None else to_device(t, device, non_blocking=non_blocking)


def to_device(t: torch.Tensor, device: torch.device | str, dtype: torch.dtype | None = None, *,
              non_blocking: bool = False) -> torch.Tensor:
    """`t.to(device, dtype)`. With `non_blocking`, a host tensor bound for an accelerator is first staged
    in pinned (page-locked) memory, then copied asynchronously: a blocking copy makes the host wait
    until the device has run everything queued before it (PyTorch synchronises the stream), so each
    one left the device idle while the host prepared and queued the next work. The staged copy is the
    allocator's (it outlives the transfer); `t` may change afterwards. A copy to the CPU ignores the flag."""
    if non_blocking and t.device.type == "cpu" and torch.device(device).type != "cpu":
        return (t if t.is_pinned() else t.pin_memory()).to(device=device, dtype=dtype, non_blocking=True)
    return t.to(device=device, dtype=dtype)


def _patches(x: torch.Tensor, s: VisionSettings, dtype: torch.dtype | None) -> torch.Tensor:
    # The cast commutes with patchify (a copy in another order), so it comes first: half the bytes to move.
    x = x.to(dtype) if dtype is not None else x
    return patchify(x, patch_size=s.patch_size, merge_size=s.merge_size, temporal_patch_size=s.temporal_patch_size)[0]


def prepare_media(
    images: Sequence[np.ndarray],
    videos: Sequence[np.ndarray],
    settings: tuple[VisionSettings, VisionSettings] | None,
    device: torch.device | str,
    dtype: torch.dtype | None = None,
    *,
    non_blocking: bool = False,
) -> dict[str, torch.Tensor]:
    """uint8 media → `pixel_values` / `pixel_values_videos` on `device`, normalised in float32 and then
    cast to `dtype`: identical to the CPU processors' values in float32, their bf16 rounding otherwise.
    `non_blocking`: the uint8 frames go through pinned memory without a host wait (`to_device`)."""
    if settings is None:
        raise ValueError("prepare_media: the batch has pending media but no vision settings")
    image_s, video_s = settings
    out: dict[str, torch.Tensor] = {}
    if images:
        out["pixel_values"] = torch.cat([
            _patches(normalize_image(to_device(as_tensor(i), device, non_blocking=non_blocking), image_s.mean, image_s.std),
                     image_s, dtype) for i in images])
    if videos:
        out["pixel_values_videos"] = torch.cat([
            _patches(normalize_video(to_device(as_tensor(v), device, non_blocking=non_blocking), video_s.mean, video_s.std),
                     video_s, dtype) for v in videos])
    return out

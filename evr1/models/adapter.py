"""Prompt building for Qwen-VL families: chat template, vision-token expansion, patchify, batching.

`encode_prompt` produces exactly the token ids and tensors HF's Qwen processors produce
(transformers 5.23), without the processor classes (they need torchvision on CPU). The same ids
are fed to the rollout engine and to the trainer, so the two never disagree about a prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer

from evr1.models.batch import MEDIA_KEYS, ModelBatch, PromptInputs, VisionSettings, prepare_media  # noqa: F401 (re-exported)
from evr1.models.families import Family, family_of
from evr1.models.prompt_length import check_prompt_tokens, refuse_by_size
from evr1.models.vision import (
    format_timestamp,
    frame_group_timestamps,
    normalize_image,
    normalize_video,
    patchify,
    resize_image,
)
from evr1.video.clip import VideoClip

IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
PLACEHOLDER = re.compile(r"(<video>|<image>)")
TEXT, IMAGE, VIDEO = 0, 1, 2  # mm_token_type_ids values the models expect

# HF Qwen2VLImageProcessor class defaults, used only when a checkpoint's config omits the budget.
DEFAULT_IMAGE_MIN_PIXELS = 56 * 56
DEFAULT_IMAGE_MAX_PIXELS = 28 * 28 * 1280


def _grid(t: int, h: int, w: int, s: VisionSettings) -> tuple[int, int, int]:
    """The (gt, gh, gw) patch grid `patchify` gives for T×H×W frames (T padded to the temporal patch)."""
    return (-(-t // s.temporal_patch_size), h // s.patch_size, w // s.patch_size)


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _processor_config(model_dir: Path, kind: str) -> dict[str, Any] | None:
    """The image or video processor config as a real checkpoint ships it (or nested, as transformers 5 saves)."""
    own = _read_json(model_dir / ("preprocessor_config.json" if kind == "image" else "video_preprocessor_config.json"))
    if own is not None:
        return own
    nested = _read_json(model_dir / "processor_config.json") or {}
    return nested.get(f"{kind}_processor")


def _vision_settings(cfg: dict[str, Any] | None, family: Family) -> VisionSettings:
    cfg = cfg or {}
    size = cfg.get("size") or {}
    # Top-level min/max_pixels win over `size`, as in Qwen2VLImageProcessor.__init__.
    return VisionSettings(
        patch_size=int(cfg.get("patch_size", family.patch_size)),
        merge_size=int(cfg.get("merge_size", family.merge_size)),
        temporal_patch_size=int(cfg.get("temporal_patch_size", family.temporal_patch_size)),
        mean=tuple(cfg.get("image_mean", family.image_mean)),
        std=tuple(cfg.get("image_std", family.image_std)),
        min_pixels=cfg.get("min_pixels", size.get("shortest_edge")),
        max_pixels=cfg.get("max_pixels", size.get("longest_edge")),
    )


def _chat_template(tokenizer: Any, model_dir: Path) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.chat_template
    if (jinja := model_dir / "chat_template.jinja").is_file():
        return jinja.read_text()
    if (data := _read_json(model_dir / "chat_template.json")) is not None:
        return data["chat_template"]
    raise ValueError(f"{model_dir}: no chat template (tokenizer_config.json, chat_template.jinja or chat_template.json)")


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


class VisionLanguageAdapter:
    """Tokenizer + processor configs of one checkpoint; builds model inputs (never loads weights)."""

    def __init__(self, model_dir: str | PathLike, *, tokenizer: Any | None = None,
                 max_prompt_tokens: int | None = None) -> None:
        self.model_dir = Path(model_dir)
        # data.max_prompt_tokens (evr1/models/prompt_length.py): encode_prompt refuses longer prompts.
        self.max_prompt_tokens = max_prompt_tokens
        self.family = family_of(self.model_dir)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(self.model_dir))
        self.chat_template = _chat_template(self.tokenizer, self.model_dir)
        image_cfg = _processor_config(self.model_dir, "image")
        self.image = _vision_settings(image_cfg, self.family)
        self.video = _vision_settings(_processor_config(self.model_dir, "video") or image_cfg, self.family)
        self.image_min_pixels = self.image.min_pixels or DEFAULT_IMAGE_MIN_PIXELS
        self.image_max_pixels = self.image.max_pixels or DEFAULT_IMAGE_MAX_PIXELS

        ids = {tok: self._token_id(tok) for tok in (IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END)}
        self.image_pad_id, self.video_pad_id = ids[IMAGE_PAD], ids[VIDEO_PAD]
        self.vision_start_id, self.vision_end_id = ids[VISION_START], ids[VISION_END]
        self.vision_token_ids: list[int] = list(ids.values())

        gen_cfg = _read_json(self.model_dir / "generation_config.json") or {}
        eos = _as_id_list(self.tokenizer.eos_token_id) + _as_id_list(gen_cfg.get("eos_token_id"))
        self.eos_token_ids: list[int] = list(dict.fromkeys(eos))
        if not self.eos_token_ids:
            raise ValueError(f"{self.model_dir}: tokenizer and generation_config.json define no eos_token_id")
        pad = self.tokenizer.pad_token_id
        self.pad_token_id: int = int(pad if pad is not None else gen_cfg.get("pad_token_id", self.eos_token_ids[0]))

    def _longest_token(self) -> int:
        """Bytes in the longest vocabulary entry (byte-level BPE: one character per byte), computed once."""
        if getattr(self, "_longest", None) is None:
            self._longest = max(map(len, self.tokenizer.get_vocab()), default=64)
        return self._longest

    def _token_id(self, token: str) -> int:
        tid = self.tokenizer.convert_tokens_to_ids(token)
        if tid is None or tid == self.tokenizer.unk_token_id:
            raise ValueError(f"{self.model_dir}: tokenizer has no special token {token}")
        return int(tid)

    # ---- prompts -------------------------------------------------------------------------
    def encode_prompt(
        self,
        prompt: str,
        *,
        videos: Sequence[VideoClip] = (),
        images: Sequence[np.ndarray] = (),
        system: str | None = None,
        defer_media: bool = False,
    ) -> PromptInputs:
        """Chat-format one user turn holding `prompt` and its media; expand vision tokens; patchify.

        `defer_media`: skip the float patches (only the grids are computed); `collate(...).to(device,
        dtype)` makes them later from the uint8 media where the model runs.
        """
        if self.max_prompt_tokens is not None:  # a huge text is refused before it is tokenized
            refuse_by_size(prompt, self.max_prompt_tokens, self._longest_token())
        content = self._content(prompt, len(videos), len(images))
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        text = self.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=True
        )
        mm: dict[str, torch.Tensor] = {}
        resized = [self._resize_image(i, img) for i, img in enumerate(images)]
        image_repl = self._encode_images(resized, mm, defer_media)
        video_repl = self._encode_videos(videos, mm, defer_media)
        text = self._expand(text, image_repl, video_repl)
        input_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        check_prompt_tokens(len(input_ids), self.max_prompt_tokens)
        types = [IMAGE if t == self.image_pad_id else VIDEO if t == self.video_pad_id else TEXT for t in input_ids]
        return PromptInputs(input_ids, types, mm, text, tuple(videos), tuple(resized), defer_media)

    def _content(self, prompt: str, n_videos: int, n_images: int) -> list[dict[str, str]]:
        """Split `prompt` on `<video>` / `<image>` into chat content items, in order."""
        found = {"<video>": prompt.count("<video>"), "<image>": prompt.count("<image>")}
        given = {"<video>": n_videos, "<image>": n_images}
        for tag in ("<image>", "<video>"):  # prepend videos first, then images
            if found[tag] == 0 and given[tag] > 0:
                prompt = tag * given[tag] + prompt
                found[tag] = given[tag]
        for tag in ("<video>", "<image>"):
            if found[tag] != given[tag]:
                raise ValueError(
                    f"prompt has {found[tag]} {tag} placeholder(s) but {given[tag]} "
                    f"{tag.strip('<>')}(s) were given: {prompt[:120]!r}"
                )
        items = []
        for part in PLACEHOLDER.split(prompt):
            if part in ("<video>", "<image>"):
                items.append({"type": part.strip("<>")})
            elif part:
                items.append({"type": "text", "text": part})
        return items

    def _resize_image(self, index: int, image: np.ndarray) -> np.ndarray:
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
            raise ValueError(f"image {index}: field image must be uint8 H×W×3 RGB, got {image.dtype} {image.shape}")
        return resize_image(
            image, factor=self.image.factor, min_pixels=self.image_min_pixels, max_pixels=self.image_max_pixels
        )

    def _encode_images(self, images: Sequence[np.ndarray], mm: dict[str, torch.Tensor], defer: bool = False) -> list[str]:
        if not images:
            return []
        s = self.image
        patches, grids = [], []
        for img in images:
            if defer:
                grids.append(_grid(1, img.shape[0], img.shape[1], s))
                continue
            p, grid = patchify(
                normalize_image(img, s.mean, s.std),
                patch_size=s.patch_size,
                merge_size=s.merge_size,
                temporal_patch_size=s.temporal_patch_size,
            )
            patches.append(p)
            grids.append(grid)
        if patches:
            mm["pixel_values"] = torch.cat(patches)
        mm["image_grid_thw"] = torch.tensor(grids, dtype=torch.long)
        return [IMAGE_PAD * (t * h * w // s.merge_size**2) for t, h, w in grids]

    def _check_clip(self, index: int, clip: VideoClip) -> None:
        f = clip.frames
        where = f"video {index}"
        if not isinstance(f, np.ndarray) or f.dtype != np.uint8 or f.ndim != 4 or f.shape[-1] != 3 or f.shape[0] < 1:
            raise ValueError(f"{where}: field frames must be uint8 T×H×W×3 with T ≥ 1, got {getattr(f, 'dtype', type(f))} {getattr(f, 'shape', '')}")
        factor = self.video.factor
        if f.shape[1] % factor or f.shape[2] % factor:
            raise ValueError(f"{where}: field frames has H×W {f.shape[1]}×{f.shape[2]}, not multiples of {factor} ({self.family.name})")
        if not clip.fps or clip.fps <= 0:
            raise ValueError(f"{where}: field fps must be the native frame rate (> 0), got {clip.fps}")
        if len(clip.frame_indices) != f.shape[0]:
            raise ValueError(f"{where}: field frame_indices has {len(clip.frame_indices)} entries for {f.shape[0]} frames")

    def _encode_videos(self, videos: Sequence[VideoClip], mm: dict[str, torch.Tensor], defer: bool = False) -> list[str]:
        if not videos:
            return []
        s = self.video
        patches, grids, replacements, seconds_per_grid = [], [], [], []
        for i, clip in enumerate(videos):
            self._check_clip(i, clip)
            if defer:
                gt, gh, gw = _grid(*clip.frames.shape[:3], s)
            else:
                p, (gt, gh, gw) = patchify(
                    normalize_video(clip.frames, s.mean, s.std),
                    patch_size=s.patch_size,
                    merge_size=s.merge_size,
                    temporal_patch_size=s.temporal_patch_size,
                )
                patches.append(p)
            grids.append((gt, gh, gw))
            per_group = gh * gw // s.merge_size**2
            if self.family.timestamps:
                stamps = frame_group_timestamps(clip.frame_indices, clip.fps, s.temporal_patch_size)
                replacements.append(
                    "".join(format_timestamp(t) + VISION_START + VIDEO_PAD * per_group + VISION_END for t in stamps)
                )
            else:
                replacements.append(VIDEO_PAD * (gt * per_group))
            # HF VideoMetadata.sampled_fps: kept frames / total frames × native fps.
            sampled_fps = len(clip.frame_indices) / clip.total_frames * clip.fps if clip.total_frames else clip.fps
            seconds_per_grid.append(s.temporal_patch_size / sampled_fps)
        if patches:
            mm["pixel_values_videos"] = torch.cat(patches)
        mm["video_grid_thw"] = torch.tensor(grids, dtype=torch.long)
        if self.family.second_per_grid_ts:
            mm["second_per_grid_ts"] = torch.tensor(seconds_per_grid, dtype=torch.float32)
        return replacements

    @staticmethod
    def _expand(text: str, image_repl: list[str], video_repl: list[str]) -> str:
        """Replace the i-th image/video pad of the templated text by its expansion (HF's order)."""
        pending = {IMAGE_PAD: iter(image_repl), VIDEO_PAD: iter(video_repl)}
        counts = {IMAGE_PAD: text.count(IMAGE_PAD), VIDEO_PAD: text.count(VIDEO_PAD)}
        if counts[IMAGE_PAD] != len(image_repl) or counts[VIDEO_PAD] != len(video_repl):
            raise ValueError(
                f"chat template produced {counts[IMAGE_PAD]} image and {counts[VIDEO_PAD]} video pads "
                f"for {len(image_repl)} images and {len(video_repl)} videos"
            )
        pattern = re.compile(f"{re.escape(IMAGE_PAD)}|{re.escape(VIDEO_PAD)}")
        return pattern.sub(lambda m: next(pending[m.group()]), text)

    # ---- batches --------------------------------------------------------------------------
    def collate(
        self, prompts: Sequence[PromptInputs], responses: Sequence[Sequence[int]] | None = None
    ) -> ModelBatch:
        """Left-pad prompts, right-pad responses, concatenate media in prompt order.

        Vision token ids inside a response (a policy can sample them) are replaced by the pad id
        and masked out: leaving them would make the vision tower's feature count mismatch.
        """
        if not prompts:
            raise ValueError("collate: no prompts")
        if responses is not None and len(responses) != len(prompts):
            raise ValueError(f"collate: {len(prompts)} prompts but {len(responses)} responses")
        responses = responses if responses is not None else [[] for _ in prompts]
        lp = max(len(p) for p in prompts)
        lr = max((len(r) for r in responses), default=0)
        b = len(prompts)
        input_ids = torch.full((b, lp + lr), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((b, lp + lr), dtype=torch.long)
        types = torch.zeros((b, lp + lr), dtype=torch.long)
        response_mask = torch.zeros((b, lr), dtype=torch.long)
        vision = torch.tensor(self.vision_token_ids)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            n = len(p)
            input_ids[i, lp - n : lp] = torch.tensor(p.input_ids, dtype=torch.long)
            types[i, lp - n : lp] = torch.tensor(p.mm_token_type_ids, dtype=torch.long)
            attention[i, lp - n : lp] = 1
            if len(r):
                resp = torch.as_tensor(list(r), dtype=torch.long)
                ok = ~torch.isin(resp, vision)
                input_ids[i, lp : lp + len(r)] = torch.where(ok, resp, self.pad_token_id)
                attention[i, lp : lp + len(r)] = 1
                response_mask[i, : len(r)] = ok.long()
        if any(p.deferred for p in prompts) and not all(p.deferred for p in prompts):
            raise ValueError("collate: prompts mix deferred and prepared media; encode them the same way")
        mm = {}
        for key in MEDIA_KEYS:
            parts = [p.mm[key] for p in prompts if key in p.mm]
            if parts:
                mm[key] = torch.cat(parts)
        if prompts[0].deferred:
            return ModelBatch(input_ids, attention, types, mm, response_mask, lp,
                              pending_images=tuple(i for p in prompts for i in p.images),
                              pending_videos=tuple(c.frames for p in prompts for c in p.videos),
                              settings=(self.image, self.video))
        return ModelBatch(input_ids, attention, types, mm, response_mask, lp)

    def decode(self, token_ids: Sequence[int] | torch.Tensor) -> str:
        """Text of generated ids, special tokens (eos, pads) dropped."""
        if isinstance(token_ids, torch.Tensor):
            token_ids = token_ids.tolist()
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def load_adapter(model_dir: str | PathLike) -> VisionLanguageAdapter:
    """Tokenizer and processor configs of `model_dir` (no weights)."""
    return VisionLanguageAdapter(model_dir)

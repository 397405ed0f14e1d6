"""A synthetic video/image QA set in the EasyVideoR1 schema whose answers are decidable from the pixels.

Coloured shapes move, flash and appear on a plain background in tiny MP4s (64×64, 8 fps, 2 s by
default), so the whole pipeline — ingest, frame cache, GRPO, eval — runs on a laptop CPU and a test
can check every answer by decoding the video. Each question kind is one function in `KINDS`.
Everything derives from `seed`: the JSONL files are byte-identical across runs and machines.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from evr1.data.synth_media import PALETTE, SHAPES, Canvas, Item, canvas, draw, sweep, write_mp4, write_png
from evr1.data.synth_tasks import LEARNING_KINDS

COLOURS = tuple(PALETTE)
LETTERS = "ABCDEFGH"
N_OPTIONS = 4


def _colour_options(rng: np.random.Generator, answer: str) -> tuple[list[str], str]:
    """Four colour options including `answer`, shuffled; returns (options, answer letter)."""
    others = [c for c in COLOURS if c != answer]
    picked = [answer] + [others[i] for i in rng.choice(len(others), N_OPTIONS - 1, replace=False)]
    order = rng.permutation(N_OPTIONS)
    names = [picked[i] for i in order]
    return [f"{LETTERS[i]}. {name}" for i, name in enumerate(names)], LETTERS[names.index(answer)]


def kind_moving_colour(geo: Canvas, rng: np.random.Generator) -> Item:
    colour = COLOURS[rng.integers(len(COLOURS))]
    clip = sweep(geo, rng, SHAPES[rng.integers(2)], colour, bool(rng.integers(2)))
    options, letter = _colour_options(rng, colour)
    return Item("moving_colour", clip, "<video>\nWhat colour is the moving shape?", letter, "multiple choice", options)


def kind_flash_count(geo: Canvas, rng: np.random.Generator) -> Item:
    """A square that is on for a few frames then off, k times; off frames separate every flash."""
    k = int(rng.integers(1, max(2, min(5, geo.frames // 3) + 1)))
    period = geo.frames // k
    on = max(1, period // 2)
    r = geo.radius
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    colour = COLOURS[rng.integers(len(COLOURS))]
    clip = canvas(geo.height, geo.width, geo.frames)
    for i in range(k):
        start = i * period + (period - on + 1) // 2
        for t in range(start, start + on):
            draw(clip[t], "square", cx, cy, r, colour)
    return Item("flash_count", clip, "<video>\nHow many times does the square flash?", str(k), "numerical")


def kind_direction(geo: Canvas, rng: np.random.Generator) -> Item:
    left_to_right = bool(rng.integers(2))
    colour = COLOURS[rng.integers(len(COLOURS))]
    clip = sweep(geo, rng, SHAPES[rng.integers(2)], colour, left_to_right)
    answer = "Yes" if left_to_right else "No"
    return Item("direction", clip, "<video>\nDoes the shape move from left to right?", answer, "boolean")


def kind_visible_interval(geo: Canvas, rng: np.random.Generator) -> Item:
    """A still circle visible in frames [a, b); the answer is [a/fps, b/fps] seconds."""
    a = int(rng.integers(1, max(2, geo.frames // 2)))
    b = int(rng.integers(min(a + 2, geo.frames), geo.frames + 1))
    r = geo.radius
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    colour = COLOURS[rng.integers(len(COLOURS))]
    clip = canvas(geo.height, geo.width, geo.frames)
    for t in range(a, b):
        draw(clip[t], "circle", cx, cy, r, colour)
    answer = json.dumps({"time": [round(a / geo.fps, 3), round(b / geo.fps, 3)]})
    problem = '<video>\nWhen is the circle visible? Answer with {"time": [start, end]} in seconds.'
    return Item("visible_interval", clip, problem, answer, "temporal grounding")


def kind_image_colour(geo: Canvas, rng: np.random.Generator) -> Item:
    colour = COLOURS[rng.integers(len(COLOURS))]
    r = geo.radius * 1.5
    image = canvas(geo.height, geo.width)
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    draw(image, SHAPES[rng.integers(2)], cx, cy, r, colour)
    options, letter = _colour_options(rng, colour)
    return Item("image_colour", image, "<image>\nWhat colour is the shape?", letter, "multiple choice", options)


def kind_image_count(geo: Canvas, rng: np.random.Generator) -> Item:
    """1–4 shapes, each inside its own quadrant so that they never touch."""
    k = int(rng.integers(1, 5))
    image = canvas(geo.height, geo.width)
    half_w, half_h = geo.width / 2, geo.height / 2
    r = min(half_w, half_h) / 4
    for q in rng.choice(4, k, replace=False):
        x0, y0 = (q % 2) * half_w, (q // 2) * half_h
        cx = x0 + float(rng.uniform(r + 1, half_w - r - 1))
        cy = y0 + float(rng.uniform(r + 1, half_h - r - 1))
        draw(image, SHAPES[rng.integers(2)], cx, cy, r, COLOURS[rng.integers(len(COLOURS))])
    return Item("image_count", image, "<image>\nHow many shapes are in the image?", str(k), "numerical")


VIDEO_KINDS: dict[str, Callable[[Canvas, np.random.Generator], Item]] = {
    "moving_colour": kind_moving_colour,
    "flash_count": kind_flash_count,
    "direction": kind_direction,
    "visible_interval": kind_visible_interval,
}
IMAGE_KINDS: dict[str, Callable[[Canvas, np.random.Generator], Item]] = {
    "image_colour": kind_image_colour,
    "image_count": kind_image_count,
}
KINDS = {**VIDEO_KINDS, **IMAGE_KINDS}  # the default mix
ALL_KINDS = {**KINDS, **LEARNING_KINDS}  # what `kinds=` may name
SPLITS = ("train", "heldout", "test")  # in this order: each split's items are pixel-distinct from the earlier ones


class SynthReport(BaseModel):
    """Where the set was written and how many questions of each type each split holds."""

    train_path: str
    heldout_path: str
    video_dir: str
    image_dir: str
    counts: dict[str, dict[str, int]]  # split → problem_type → n
    kinds: dict[str, dict[str, int]]  # split → kind (see KINDS) → n
    test_path: str | None = None  # test.jsonl, when a test split was asked for


def _schedule(n: int, image_fraction: float, rng: np.random.Generator, only: list[str] | None = None) -> list[str]:
    """Kinds for one split: the image share first, video kinds cycling, then shuffled; or the
    `only` kinds cycling (in equal shares), then shuffled."""
    if only:
        return [only[i] for i in rng.permutation(np.arange(n) % len(only))]
    n_image = min(n, int(round(n * image_fraction)))
    kinds = [list(IMAGE_KINDS)[i % len(IMAGE_KINDS)] for i in range(n_image)]
    kinds += [list(VIDEO_KINDS)[i % len(VIDEO_KINDS)] for i in range(n - n_image)]
    return [kinds[i] for i in rng.permutation(n)]


def _digest(medium: np.ndarray) -> str:
    return hashlib.sha256(medium.tobytes()).hexdigest()


def _fresh(kind: str, geo: Canvas, key: list[int], taken: set[str] | None, tries: int = 50) -> Item:
    """Item `kind` drawn from the rng `key`; with `taken` (the media drawn before it: the training
    split's, and the held-out split's so far), redrawn until its pixels differ from every one of them (a kind with a blank answer, such as a square that never
    flashes, keeps its blank clip after `tries`)."""
    item = ALL_KINDS[kind](geo, np.random.default_rng(key))
    for attempt in range(1, tries if taken is not None else 0):
        if _digest(item.medium) not in taken:
            break
        item = ALL_KINDS[kind](geo, np.random.default_rng([*key, attempt]))
    return item


def _split_sizes(n: int, heldout: int | float, test: int = 0) -> dict[str, int]:
    n_heldout = heldout if isinstance(heldout, int) else int(round(n * heldout))
    if not 0 <= n_heldout <= n:
        raise ValueError(f"heldout={heldout!r} gives {n_heldout} held-out samples out of n={n}")
    if test < 0:
        raise ValueError(f"test={test!r}: a number of test samples, ≥ 0")
    return {"train": n - n_heldout, "heldout": n_heldout, **({"test": test} if test else {})}


def make_synthetic(
    out_dir: str | Path,
    n: int,
    *,
    seed: int = 0,
    heldout: int | float = 0.25,
    image_fraction: float = 0.1,
    size: tuple[int, int] = (64, 64),
    fps: int = 8,
    seconds: float = 2.0,
    kinds: list[str] | None = None,
    test: int = 0,
) -> SynthReport:
    """Write `n` questions (videos, PNGs, `train.jsonl`, `heldout.jsonl`) under `out_dir`.

    `heldout` is a count (int) or a fraction (float) of `n`; `size` is (width, height). Media
    paths in the JSONL are relative to `out_dir`; every sample has its own file, so splits share
    no video and no `problem_id`. `kinds` (names in `KINDS`) replaces the default mix: equal shares
    of those kinds, `image_fraction` unused (the learning task, evr1/data/synth_tasks.py).
    `test` more questions (beyond `n`) go to `test.jsonl`: a split scored once at the end, drawn
    from seeds of its own after the other two (which it leaves unchanged) and, like the held-out
    split, redrawn where its pixels equal an earlier item's. Video records carry their `duration`
    in seconds (the temporal-grounding training reward normalises by it).
    """
    unknown = sorted(set(kinds or []) - set(ALL_KINDS))
    if unknown:
        raise ValueError(f"unknown synthetic kinds {unknown}; known: {sorted(ALL_KINDS)}")
    if n < 0 or not 0.0 <= image_fraction <= 1.0:
        raise ValueError(f"need n >= 0 and 0 <= image_fraction <= 1, got n={n}, image_fraction={image_fraction}")
    out = Path(out_dir)
    video_dir, image_dir = out / "videos", out / "images"
    video_dir.mkdir(parents=True, exist_ok=True)
    image_dir.mkdir(parents=True, exist_ok=True)
    geo = Canvas(width=size[0], height=size[1], fps=fps, frames=max(1, int(round(fps * seconds))))

    seen: set[str] = set()  # the media drawn so far: a held-out item is never a training item's copy
    counts: dict[str, Counter[str]] = {}
    kind_counts: dict[str, Counter[str]] = {}
    paths: dict[str, Path] = {}
    for split_index, (split, size_n) in enumerate(_split_sizes(n, heldout, test).items()):
        schedule = _schedule(size_n, image_fraction, np.random.default_rng([seed, split_index]), kinds)
        lines, types = [], []
        for i, kind in enumerate(schedule):
            item = _fresh(kind, geo, [seed, split_index, i], seen if split != "train" else None)
            seen.add(_digest(item.medium))
            problem_id = f"synth-{split}-{i:05d}"
            if item.data_type == "video":
                rel = f"videos/{problem_id}.mp4"
                write_mp4(out / rel, item.medium, fps)
            else:
                rel = f"images/{problem_id}.png"
                write_png(out / rel, item.medium)
            record = {
                "problem_id": problem_id,
                "problem": item.problem,
                "answer": item.answer,
                "problem_type": item.problem_type,
                "data_type": item.data_type,
                "options": item.options,
                "videos": [rel] if item.data_type == "video" else [],
                "images": [rel] if item.data_type == "image" else [],
                "data_source": "synthetic",
                "synth_kind": item.kind,
            }
            if item.data_type == "video":
                record["duration"] = geo.frames / fps
            if item.answer_space:
                record["answer_space"] = item.answer_space
            if item.trajectory:
                record.update(trajectory=item.trajectory, has_offline_trajectory=True)
            lines.append(json.dumps(record) + "\n")
            types.append(item.problem_type)
        paths[split] = out / f"{split}.jsonl"
        paths[split].write_text("".join(lines), encoding="utf-8")
        counts[split] = Counter(types)
        kind_counts[split] = Counter(schedule)

    return SynthReport(
        train_path=str(paths["train"]),
        heldout_path=str(paths["heldout"]),
        test_path=str(paths["test"]) if "test" in paths else None,
        video_dir=str(video_dir),
        image_dir=str(image_dir),
        counts={s: dict(c) for s, c in counts.items()},
        kinds={s: dict(c) for s, c in kind_counts.items()},
    )

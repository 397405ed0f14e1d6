"""The learning task: four video question families a small model can decide from the frames it is shown.

`evr1 run conf/learning.yaml` trains on these to show RL teaching (docs/learning.md). Each clip is
sampled frame for frame (the cache samples at the clip's own rate), so everything a question asks
about is in the frames the model receives; `oracle` answers every item from those frames alone.

| family     | question                                     | type               | answers     | chance |
|------------|----------------------------------------------|--------------------|-------------|--------|
| colour     | colour of the moving shape (fixed A–D order) | multiple choice    | A B C D     | 1/4    |
| motion     | which way does it move? (left, right)        | multiple choice    | A B         | 1/2    |
| flashes    | how many times does the square flash?        | numerical          | 0 1 2       | 1/3    |
| appears    | when is the circle on screen?                | temporal grounding | 4 intervals | 1/4    |

Two more: `flashes` (how many times a square flashes, 0–2; a counting question the tiny models did
not learn even supervised) and `screen_colour` (the whole clip one colour: the easiest family, the
first check that RL moves accuracy at all; docs/learning.md).

Every item lists its `answer_space` (so a format warm-up can draw answers that reveal nothing) and a
correct reasoning-and-answer `trajectory` (for mixed offline-online training).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from evr1.data.synth_media import BACKGROUND, PALETTE, SHAPES, Canvas, Item, canvas, draw, shape_mask, sweep

COLOURS = ("red", "green", "blue", "yellow")
COLOUR_OPTIONS = [f"{letter}. {name}" for letter, name in zip("ABCD", COLOURS)]
MOTION_OPTIONS = ("A. left", "B. right")
SEGMENTS = 4  # `appears`: the clip is cut into this many equal intervals; the circle fills one


def _radius(geo: Canvas) -> float:
    """Shapes a quarter of the frame across: a small random-weight vision tower's features of a
    frame must change clearly with what the question asks about (a shape an eighth across, the other
    kinds' size, moved them too little for a 2-layer decoder to learn from in minutes)."""
    return min(geo.width, geo.height) / 4


def _trajectory(reason: str, answer: str) -> str:
    return f"<think>{reason}</think><answer>{answer}</answer>"


def _interval(duration: float, segment: int) -> str:
    """`{"time": [start, end]}` of one of the `SEGMENTS` equal intervals of a clip, in seconds."""
    ends = [round(duration * (segment + k) / SEGMENTS, 3) for k in (0, 1)]
    return json.dumps({"time": [int(e) if float(e).is_integer() else e for e in ends]})


def kind_colour(geo: Canvas, rng: np.random.Generator) -> Item:
    index = int(rng.integers(len(COLOURS)))
    clip = sweep(geo, rng, SHAPES[rng.integers(2)], COLOURS[index], bool(rng.integers(2)), _radius(geo))
    letter = "ABCD"[index]
    return Item("colour", clip, "<video>\nWhat colour is the moving shape?", letter, "multiple choice",
                list(COLOUR_OPTIONS), answer_space=list("ABCD"),
                trajectory=_trajectory(f"The shape is {COLOURS[index]}.", letter))


def kind_screen_colour(geo: Canvas, rng: np.random.Generator) -> Item:
    """The easiest family: the whole clip is one colour (the short CI test's family)."""
    index = int(rng.integers(len(COLOURS)))
    clip = canvas(geo.height, geo.width, geo.frames)
    clip[...] = PALETTE[COLOURS[index]]
    r = geo.radius  # one small dark square somewhere, so that no two clips are alike
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    for frame in clip:
        frame[shape_mask(geo.height, geo.width, "square", cx, cy, r)] = BACKGROUND
    letter = "ABCD"[index]
    return Item("screen_colour", clip, "<video>\nWhat colour is the screen?", letter, "multiple choice",
                list(COLOUR_OPTIONS), answer_space=list("ABCD"),
                trajectory=_trajectory(f"The screen is {COLOURS[index]}.", letter))


def kind_motion(geo: Canvas, rng: np.random.Generator) -> Item:
    """Left or right, asked as a two-option multiple choice: each answer is one letter token. As yes/no
    the tiny tokenizer splits "Yes" in two, and every stray second token penalised the first: RL drove
    the policy to "No" before it found the direction (docs/learning.md)."""
    right = bool(rng.integers(2))
    clip = sweep(geo, rng, SHAPES[rng.integers(2)], COLOURS[rng.integers(len(COLOURS))], right, _radius(geo))
    answer = MOTION_OPTIONS[int(right)][0]
    return Item("motion", clip, "<video>\nWhich way does the shape move?", answer, "multiple choice",
                list(MOTION_OPTIONS), answer_space=["A", "B"],
                trajectory=_trajectory(f"It moves to the {'right' if right else 'left'}.", answer))


def kind_flashes(geo: Canvas, rng: np.random.Generator) -> Item:
    """A still square that flashes k ∈ {0, 1, 2} times: each flash lasts one frame pair (what one
    temporal patch of a Qwen-VL vision tower sees together), and two flashes have a dark pair between."""
    pairs = geo.frames // 2
    k = int(rng.integers(3))
    while True:  # k pairs, no two adjacent (rejection sampling)
        on = np.sort(rng.choice(pairs, k, replace=False))
        if np.all(np.diff(on) > 1):
            break
    r = _radius(geo)
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    colour = COLOURS[rng.integers(len(COLOURS))]
    clip = canvas(geo.height, geo.width, geo.frames)
    for t in (2 * p + j for p in on for j in (0, 1)):
        draw(clip[t], "square", cx, cy, r, colour)
    said = {0: "It never flashes.", 1: "It flashes once.", 2: "It flashes twice."}[k]
    return Item("flashes", clip, "<video>\nHow many times does the square flash?", str(k), "numerical",
                answer_space=["0", "1", "2"], trajectory=_trajectory(said, str(k)))


def kind_flash_time(geo: Canvas, rng: np.random.Generator) -> Item:
    """A still square on for one frame pair (one temporal patch); the answer is its whole second."""
    pair = int(rng.integers(geo.frames // 2))
    r = _radius(geo)
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    clip = canvas(geo.height, geo.width, geo.frames)
    for t in (2 * pair, 2 * pair + 1):
        draw(clip[t], "square", cx, cy, r, COLOURS[rng.integers(len(COLOURS))])
    second = str(int(2 * pair / geo.fps))
    seconds = sorted({str(int(2 * p / geo.fps)) for p in range(geo.frames // 2)}, key=int)
    return Item("flash_time", clip, "<video>\nIn which second does the square flash?", second, "numerical",
                answer_space=seconds, trajectory=_trajectory(f"It flashes in second {second}.", second))


def kind_appears(geo: Canvas, rng: np.random.Generator) -> Item:
    """A still circle on screen for exactly one of the `SEGMENTS` equal intervals of the clip."""
    segment = int(rng.integers(SEGMENTS))
    per = geo.frames // SEGMENTS
    r = _radius(geo)
    cx, cy = (float(rng.uniform(r + 1, d - r - 1)) for d in (geo.width, geo.height))
    clip = canvas(geo.height, geo.width, geo.frames)
    for t in range(segment * per, (segment + 1) * per):
        draw(clip[t], "circle", cx, cy, r, COLOURS[rng.integers(len(COLOURS))])
    duration = geo.frames / geo.fps
    answer = _interval(duration, segment)
    problem = '<video>\nWhen is the circle on screen? Answer with {"time": [start, end]} in seconds.'
    return Item("appears", clip, problem, answer, "temporal grounding",
                answer_space=[_interval(duration, s) for s in range(SEGMENTS)],
                trajectory=_trajectory(f"It is there from second {json.loads(answer)['time'][0]}.", answer))


LEARNING_KINDS: dict[str, Callable[[Canvas, np.random.Generator], Item]] = {
    "colour": kind_colour,
    "screen_colour": kind_screen_colour,
    "motion": kind_motion,
    "flashes": kind_flashes,
    "flash_time": kind_flash_time,
    "appears": kind_appears,
}


# --- the oracle: every answer from the sampled frames alone ---------------------------------------


def _foreground(frames: np.ndarray) -> np.ndarray:
    """Pixels clearly unlike the background (H.264 and resize noise stays well below 60 levels)."""
    return np.abs(frames.astype(int) - np.array(BACKGROUND)).max(axis=-1) > 60


def _on(frames: np.ndarray) -> np.ndarray:
    """Per frame: is a shape on screen?"""
    return _foreground(frames).reshape(len(frames), -1).sum(axis=1) > 4


def _oracle_colour(frames: np.ndarray, times: np.ndarray) -> str:
    """The palette colour nearest the mean of every pixel unlike the background."""
    mean = frames[_foreground(frames)].reshape(-1, 3).mean(axis=0)
    name = min(COLOURS, key=lambda c: np.linalg.norm(mean - np.array(PALETTE[c])))
    return "ABCD"[COLOURS.index(name)]


def _oracle_motion(frames: np.ndarray, times: np.ndarray) -> str:
    xs = [np.nonzero(_foreground(f))[1].mean() for f in frames[_on(frames)]]
    return MOTION_OPTIONS[int(xs[-1] > xs[0])][0]


def _oracle_flashes(frames: np.ndarray, times: np.ndarray) -> str:
    on = _on(frames).astype(int)
    return str(int(on[0] + np.sum(np.diff(on) == 1)) if len(on) else 0)


def _oracle_flash_time(frames: np.ndarray, times: np.ndarray) -> str:
    return str(int(float(times[np.nonzero(_on(frames))[0][0]])))


def _oracle_appears(frames: np.ndarray, times: np.ndarray) -> str:
    """The interval from the first shown frame's time to the time after the last one, snapped to a segment."""
    shown = np.nonzero(_on(frames))[0]
    step = float(times[1] - times[0]) if len(times) > 1 else 1.0
    duration = float(times[-1]) + step
    segment = int(np.floor(float(times[shown[0]]) / duration * SEGMENTS + 1e-6))
    return _interval(duration, segment)


ORACLES: dict[str, Callable[[np.ndarray, np.ndarray], str]] = {
    "colour": _oracle_colour,
    "screen_colour": _oracle_colour,
    "motion": _oracle_motion,
    "flashes": _oracle_flashes,
    "flash_time": _oracle_flash_time,
    "appears": _oracle_appears,
}


def oracle(kind: str, frames: np.ndarray, times: np.ndarray) -> str:
    """The answer to a `kind` question read from T×H×W×3 sampled frames shown at `times` (seconds)."""
    return ORACLES[kind](frames, times)


def chance_accuracy(samples: list[dict], score: Callable[[str, dict], float]) -> dict[str, float]:
    """Expected accuracy per family of an answer drawn uniformly from each item's `answer_space`,
    scored by `score(answer_text, sample)` (the training reward's accuracy): the level a model that
    learnt the format but nothing of the videos sits at."""
    per: dict[str, list[float]] = {}
    for s in samples:
        space = s["answer_space"]
        per.setdefault(s["synth_kind"], []).append(float(np.mean([score(a, s) for a in space])))
    return {kind: float(np.mean(v)) for kind, v in sorted(per.items())}

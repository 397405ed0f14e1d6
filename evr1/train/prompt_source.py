"""Where training prompts come from: samples in a fixed, seeded order with a resumable cursor.

The cursor (epoch, position) is all the data-loader state there is, so a resumed run draws exactly
the prompts the uninterrupted run would have drawn.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evr1 import prompts
from evr1.cache import FrameReader
from evr1.data.ingest import reward_sample


@dataclass
class Cursor:
    epoch: int = 0
    position: int = 0


class PromptSource:
    def __init__(self, samples: list[dict], *, seed: int, cursor: Cursor | None = None):
        if not samples:
            raise ValueError("training has no samples: ingestion accepted none (see the rejects table)")
        self.samples = samples
        self.seed = seed
        self.cursor = cursor or Cursor()

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.samples))

    def next_batch(self, size: int) -> list[dict]:
        """The next `size` samples, reshuffled at each epoch boundary."""
        out = []
        while len(out) < size:
            order = self._order(self.cursor.epoch)
            take = min(size - len(out), len(order) - self.cursor.position)
            out.extend(self.samples[i] for i in order[self.cursor.position : self.cursor.position + take])
            self.cursor.position += take
            if self.cursor.position >= len(order):
                self.cursor = Cursor(self.cursor.epoch + 1, 0)
        return out

    def state(self) -> dict:
        return asdict(self.cursor)


def encode_sample(sample: dict, adapter, reader: FrameReader, *, template: str | None, thinking: bool):
    """Render the prompt, fetch frames (cache or decode, same rules) and tokenise: a `PromptInputs`."""
    text = prompts.render(reward_sample(sample), template=template, thinking=thinking)
    videos = [reader.video(p) for p in sample.get("videos") or []]
    images = [reader.image(p) for p in sample.get("images") or []]
    return adapter.encode_prompt(text, videos=videos, images=images)

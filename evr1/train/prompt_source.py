"""Where training prompts come from: samples in a fixed, seeded order with a resumable cursor.

The cursor (epoch, position) is all the data-loader state there is, so a resumed run draws exactly
the prompts the uninterrupted run would have drawn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


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

    def peek(self, size: int) -> list[dict]:
        """The samples the next `next_batch(size)` would return, without moving the cursor (for prefetch)."""
        saved = Cursor(self.cursor.epoch, self.cursor.position)
        try:
            return self.next_batch(size)
        finally:
            self.cursor = saved

    def state(self) -> dict:
        return asdict(self.cursor)

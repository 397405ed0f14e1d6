"""Targets for the supervised cold start that comes before RL (`trainer.warmup_sft_steps`).

A random-weight model never writes "<answer>…</answer>" by chance, so every reward would be 0 and
GRPO would have nothing to compare. A few supervised steps teach the format. What they put inside the
tag is `trainer.warmup_answers`:

- `answer_space`: an answer drawn uniformly from the item's valid answers (its `answer_space`
  field; else the option letters of a multiple-choice item, Yes/No for a boolean one). The model
  learns the form and nothing about which answer is right, so held-out accuracy after the warm-up
  sits at chance and everything above it is RL's doing (docs/learning.md).
- `ground_truth`: the right answer (a supervised cold start; accuracy after it is not RL's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from evr1.data.ingest import reward_sample

BOOLEAN_SPACE = ("Yes", "No")


def answer_space(sample: Mapping[str, Any]) -> list[str]:
    """The answers a sample admits, or ValueError naming the sample and the missing field."""
    s = reward_sample(dict(sample))
    if s.get("answer_space"):
        return [str(a) for a in s["answer_space"]]
    if s.get("problem_type") == "multiple choice" and s.get("options"):
        return [str(o).split(".", 1)[0].strip() for o in s["options"]]
    if s.get("problem_type") == "boolean":
        return list(BOOLEAN_SPACE)
    raise ValueError(f"sample {s.get('sample_id', '?')!r}: trainer.warmup_answers=answer_space needs an "
                     f"'answer_space' field (a list of the valid answers) for problem type {s.get('problem_type')!r}")


def _draw(space: list[str], key: str) -> str:
    """A uniform pick from `space`, fixed by `key` (seed, step, sample): reproducible on resume."""
    return space[int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % len(space)]


def target(sample: Mapping[str, Any], mode: str, *, seed: int, step: int, draw: int = 0) -> str:
    """The response text the warm-up trains on for one sample (`draw`: which of its targets this step)."""
    if mode == "ground_truth":
        answer = str(sample["answer"])
    else:
        answer = _draw(answer_space(sample), f"{seed}:{step}:{sample.get('sample_id', '')}:{draw}")
    return f"<answer>{answer}</answer>"

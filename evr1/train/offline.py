"""Mixed offline-online training: a sample's pre-collected trajectory takes the place of its n-th response.

EasyVideoR1 §4.5 ("mix-policy"), with its traps closed (spec §7.1 item 10): the trajectory ends with
the eos the chat template closes an assistant turn with, so it is masked and scored like a finished
online response; one longer than `rollout.max_new_tokens` is cut there (marked truncated, warned
about, counted in `offline/truncated`) instead of crashing; which samples get it (`offline_ratio` < 1)
is a hash of (seed, step, sample id), the same on a resumed run. Its old log-probs come from the
current policy, like every response's (the trainer's `log_probs` pass): the PPO ratio starts at 1.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: The record field that says a sample carries a trajectory (EasyVideoR1 §1.1).
FLAG = "has_offline_trajectory"


@dataclass(frozen=True)
class OfflineResponse:
    """A trajectory as the policy would have emitted it: token ids (eos included unless cut), its text."""

    token_ids: list[int]
    text: str
    truncated: bool


def _fields(row: Mapping[str, Any]) -> dict[str, Any]:
    extra = row.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra else {}
    return {**extra, **{k: v for k, v in row.items() if k != "extra"}}


def trajectory(row: Mapping[str, Any], key: str) -> str | None:
    """The sample row's trajectory text (ingestion keeps unknown record fields in `extra`), or None
    when it has none: the flag is not true or the text is blank."""
    fields = _fields(row)
    text = fields.get(key)
    if fields.get(FLAG) is not True or not isinstance(text, str) or not text.strip():
        return None
    return text


def chosen(sample_id: str, *, seed: int, step: int, ratio: float) -> bool:
    """Whether this sample's trajectory is mixed in at this step: a deterministic coin with P = ratio."""
    if ratio >= 1.0:
        return True
    if ratio <= 0.0:
        return False
    digest = hashlib.sha256(f"{seed}:{step}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < ratio


def turn_end_id(adapter) -> int:
    """The eos the chat template ends an assistant turn with (Qwen: <|im_end|>), so an offline response
    stops where a generated one does; the first eos id when the template names none."""
    for tid in adapter.eos_token_ids:
        token = adapter.tokenizer.convert_ids_to_tokens(tid)
        if token and token in adapter.chat_template:
            return tid
    return adapter.eos_token_ids[0]


def encode(text: str, adapter, max_new_tokens: int) -> OfflineResponse:
    """Tokenise a trajectory as a response: its tokens plus the turn's eos, cut at `max_new_tokens`
    (then no eos and `truncated`, as a generation that hit the limit). The text is the decoded ids,
    as for online responses, so the reward scores exactly what is trained on."""
    ids = adapter.tokenizer.encode(text, add_special_tokens=False) + [turn_end_id(adapter)]
    truncated = len(ids) > max_new_tokens
    ids = ids[:max_new_tokens]
    return OfflineResponse(ids, adapter.decode(ids), truncated)


def pick(row: Mapping[str, Any], adapter, *, key: str | None, ratio: float, seed: int, step: int,
         max_new_tokens: int) -> OfflineResponse | None:
    """The offline response that replaces this sample's n-th response this step, or None."""
    if not key or ratio <= 0.0:
        return None
    text = trajectory(row, key)
    if text is None:
        return None
    sample_id = str(row.get("sample_id") or row.get("problem", ""))
    if not chosen(sample_id, seed=seed, step=step, ratio=ratio):
        return None
    out = encode(text, adapter, max_new_tokens)
    if out.truncated:
        log.warning("offline trajectory of sample %s is longer than rollout.max_new_tokens=%d tokens: cut there "
                    "(counted in offline/truncated)", sample_id, max_new_tokens)
    return out


def metrics(offline: list[bool], scores: list[dict], responses: list[list[int]], truncated: list[bool]
            ) -> dict[str, float]:
    """Offline and online responses reported apart: their share, cut trajectories, rewards and lengths.
    Empty when the mode is off (`offline` empty); a side with no response this step is left out."""
    if not offline:
        return {}
    out = {"offline/share": float(np.mean(offline)),
           "offline/truncated": float(sum(o and t for o, t in zip(offline, truncated)))}
    for side, flag in (("offline", True), ("online", False)):
        idx = [i for i, o in enumerate(offline) if o is flag]
        if not idx:
            continue
        out[f"reward/{side}_overall"] = float(np.mean([scores[i]["overall"] for i in idx]))
        out[f"reward/{side}_accuracy"] = float(np.mean([scores[i].get("accuracy", 0.0) for i in idx]))
        out[f"response/{side}_length_mean"] = float(np.mean([len(responses[i]) for i in idx]))
    return out

"""EasyVideoR1's prompt builder (spec §5.3, eval-benchmarks §2.0 E1), one for every benchmark.

The text is `[image hint] + head(question) + suffix`, chosen by model family, thinking switch and
problem type (wording in `templates.py`):

| family | thinking | multiple choice | other types |
| --- | --- | --- | --- |
| qwen3 | off | `QWEN3_MC` + "The best answer is: " | `QWEN3_OPEN` + per-type suffix |
| qwen3 | on | `QWEN3_THINK_MC` (no suffix) | `QWEN3_THINK_OPEN` + per-type "Conclude …" suffix |
| qwen25 | either | `QWEN25` + per-type `<answer>` suffix | same |

OVO-Bench's REC/SSR/CRR items get the task description with the question inserted, then the
family's answer format. The multiple-choice question is `problem` + " Possible answer choices:\\n"
+ each option and a newline; items with an image (Video-MMMU Adaptation) get the image hint first.

Departures, both where the reference would crash or has no such input: the question is inserted by
concatenation, not `str.format` (a question with braces raised there); subtitles and the held-out
template (`ctx.subtitles`, `ctx.template`) are ignored, as EasyVideoR1 has neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evr1.eval.types import PromptContext
from evr1.eval.easyvideor1 import templates as T

MC = "multiple choice"
FALLBACK = "free-form"


def question_text(item: Mapping[str, Any]) -> str:
    """`problem`, and for multiple choice " Possible answer choices:\\n" + each option + "\\n"."""
    text = str(item.get("problem") or "")
    if item["problem_type"] != MC:
        return text
    return text + T.MC_CHOICES + "".join(f"{opt}\n" for opt in item.get("options") or ())


def _fill(head: str, question: str) -> str:
    return head.replace("{q}", question, 1)


def _suffix(table: Mapping[str, str], ptype: str) -> str:
    return table.get(ptype, table[FALLBACK])


def _qwen3(q: str, ptype: str, thinking: bool) -> str:
    if ptype in T.OVO_TASKS:
        return _fill(T.OVO_TASKS[ptype], q) + (T.OVO_THINK_FORMAT if thinking else T.OVO_FORMAT)[ptype]
    if thinking:
        if ptype == MC:
            return _fill(T.QWEN3_THINK_MC, q)
        return _fill(T.QWEN3_THINK_OPEN, q) + _suffix(T.QWEN3_THINK_SUFFIX, ptype)
    return _fill(T.QWEN3_MC if ptype == MC else T.QWEN3_OPEN, q) + _suffix(T.QWEN3_SUFFIX, ptype)


def _qwen25(q: str, ptype: str, thinking: bool) -> str:
    if ptype in T.OVO_TASKS:
        return _fill(T.QWEN25, _fill(T.OVO_TASKS[ptype], q)) + T.OVO_QWEN25_FORMAT[ptype]
    return _fill(T.QWEN25, q) + _suffix(T.QWEN25_SUFFIX, ptype)


FAMILIES = {"qwen3": _qwen3, "qwen25": _qwen25}


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    """The user-turn text EasyVideoR1 sends for `item` (the video, and any image, go before it)."""
    build = FAMILIES.get(ctx.family)
    if build is None:
        raise ValueError(f"easyvideor1 prompt for record {item.get('id')!r}: model family {ctx.family!r} "
                         f"is not one of {', '.join(FAMILIES)}")
    hint = T.IMAGE_HINT if item.get("image") or item.get("image_path") else ""
    return hint + build(question_text(item), item["problem_type"], ctx.thinking)

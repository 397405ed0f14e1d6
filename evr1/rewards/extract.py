"""Shared answer extraction: the answer tag, `\\boxed{}`, final statements, think blocks, JSON, text.

One place decides what "the answer" of a response is, with an explicit precedence (last tag
wins; then the documented fallbacks), so every family and the evaluator read it the same way.
Only tag syntax is tolerated loosely (`< answer >`, `</ ANSWER>`); answer content is never
rewritten (the reference stripped spaces around `<`, `>`, `/` everywhere, turning "x > 3" into
"x>3").
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

_TAG = re.compile(r"<\s*(/?)\s*answer\s*>", re.IGNORECASE)
_THINK_END = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{")
# "(the) (final) answer is …" or "(final) answer: …" (ASCII or full-width colon).
_FINAL = re.compile(
    r"\b(?:(?:the\s+)?(?:final\s+)?answer\s+is\b\s*[:：]?|(?:final\s+)?answer\s*[:：])[ \t]*"
    r"((?:(?!<\s*/?\s*(?:think|answer)\s*>)[^\n])*)",  # to the end of the line or a think/answer tag
    re.IGNORECASE,
)
_NON_WORD = re.compile(r"[^\w\s]|_")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACES = re.compile(r"\s+")
_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)


def last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last non-overlapping match of `pattern` in `text`, or None."""
    found = deque(pattern.finditer(text), maxlen=1)
    return found[0] if found else None


def answer_tag(text: str) -> str | None:
    """Content of the LAST complete `<answer>…</answer>` (no tag between the pair), trimmed.

    None when there is no complete tag. "Complete" means an opening tag directly followed, with
    no other answer tag in between, by a closing one, so "<answer>A<answer>B</answer>" is "B".
    """
    tags = list(_TAG.finditer(text))
    for i in range(len(tags) - 1, 0, -1):
        close, opening = tags[i], tags[i - 1]
        if close.group(1) and not opening.group(1):
            return text[opening.end() : close.start()].strip()
    return None


def strip_tags(text: str) -> str:
    """Remove stray answer tags (e.g. an unterminated `<answer>` in a truncated response)."""
    return _TAG.sub(" ", text).strip()


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{…}` with balanced braces, or None (also when unbalanced)."""
    start = None
    for match in _BOXED.finditer(text):
        start = match.end()
    if start is None:
        return None
    depth = 1
    for i in range(start, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def unbox(text: str) -> str:
    """The content of the last `\\boxed{}` in `text` when there is one, else `text` itself."""
    if "\\boxed" not in text:
        return text
    boxed = last_boxed(text)
    return text if boxed is None else boxed


def final_statement(text: str) -> str | None:
    """The last "(the) (final) answer is …" / "(final) answer: …" statement, to the end of its line.

    The statement also stops at a think or answer tag ("the answer is B</think>" is "B").
    One trailing "." is removed. When the statement ends its line ("The answer is:\\nB"), the next
    non-empty line is the statement.
    """
    last = last_match(_FINAL, text)
    if last is None:
        return None
    rest = last.group(1).strip()
    if not rest:
        following = text[last.end() :].lstrip("\r\n\t ")
        rest = following.split("\n", 1)[0].strip() if following else ""
    if rest.endswith(".") and not rest.endswith(".."):
        rest = rest[:-1].rstrip()
    return rest or None


def after_think(text: str) -> str | None:
    """The text after the last `</think>`, trimmed, or None when there is none or it is empty."""
    last = last_match(_THINK_END, text)
    if last is None:
        return None
    rest = text[last.end() :].strip()
    return rest or None


def fallback_answer(response: str) -> str:
    """What accuracy reads when a response has no answer tag.

    In order: the last final statement, the last `\\boxed{}`, the text after `</think>`, the whole
    response. Stray answer tags are removed from the candidate.
    """
    statement = final_statement(response)
    if statement is not None:
        candidate = unbox(statement)
    else:
        candidate = last_boxed(response) if "\\boxed" in response else None
        if not candidate:
            candidate = after_think(response) or response
    return strip_tags(candidate) if "<" in candidate else candidate.strip()


def unwrap_ground_truth(answer: Any) -> str:
    """The ground truth as a string: the last answer tag's content when wrapped, else the trimmed text.

    Non-strings are tolerated here (JSON dicts/lists are dumped, numbers printed) because the
    scorer never raises; ingestion rejects such records before training.
    """
    if answer is None:
        return ""
    if not isinstance(answer, str):
        if isinstance(answer, bool):
            return "yes" if answer else "no"
        if isinstance(answer, (dict, list, tuple)):
            try:
                return json.dumps(answer)
            except (TypeError, ValueError):
                return ""
        answer = str(answer)
    tag = answer_tag(answer)
    return tag if tag is not None else answer.strip()


def normalize_text(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD-style)."""
    text = _NON_WORD.sub(" ", text.lower())
    text = _ARTICLES.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def strip_fences(text: str) -> str:
    """The content of the first Markdown code fence when the text has one, else the text."""
    if "```" not in text:
        return text
    match = _FENCE.search(text)
    return match.group(1) if match else text.replace("```", "")


def json_objects(text: str, limit: int = 32) -> list[dict]:
    """Brace-balanced `{…}` spans of `text` that parse as JSON objects, last first (at most `limit`).

    One linear scan finds the outermost balanced spans; braces inside JSON strings are skipped.
    """
    spans: list[tuple[int, int]] = []
    depth, start, in_string, escaped = 0, -1, False, False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and depth > 0:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    found: list[dict] = []
    for begin, end in reversed(spans[-limit:]):
        try:
            value = json.loads(text[begin:end])
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def load_json_object(text: str) -> dict | None:
    """A JSON object from an answer: the whole text (code fences tolerated), else the last `{…}` in it."""
    body = strip_fences(text).strip()
    if body.startswith("{"):
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
    if "{" not in text:
        return None
    objects = json_objects(text)
    return objects[0] if objects else None

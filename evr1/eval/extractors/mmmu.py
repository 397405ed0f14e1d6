"""MMMU-style answer parsing (§2.0 M1), as the official Video-MMMU evaluation uses it.

Multiple choice (Video-MMMU variant): strip `, . ! ? ; : '` from both ends (one character kind at a
time, as MMMU does) and pad with spaces; candidates are, in order of stages, "X." or "X:", then "(X)",
then "X " — the first stage with any candidate decides, and with several candidates the one at the
latest position wins. No candidate and more than 5 words: the option whose text appears in the answer
(latest position wins). Otherwise "".

Open / numerical (MMMU `parse_open_response` + `eval_open`): the key sub-responses (the shortest tail
after "could be / so / is / thus / therefore / final / answer / result", and "=" in the last sentence),
every number in them, each normalised (a number → float rounded to 2 places; text → lower case);
correct if a parsed number equals the ground truth's, or the ground-truth text is contained in a
parsed string.

Deviations (bugs fixed): no random choice when nothing parses (the answer is wrong, so scores are
reproducible); a letter glued to a preceding letter or digit ("DNA ", "2A.") is not a candidate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_STRIP = (",", ".", "!", "?", ";", ":", "'")


def _clean(response: str) -> str:
    for ch in _STRIP:
        response = response.strip(ch)
    return " " + response + " "


def _last(resp: str, pattern: str) -> int:
    """Position of the last match of `pattern` not preceded by a letter or digit, else -1."""
    pos = -1
    for m in re.finditer(r"(?<![A-Za-z0-9])" + pattern, resp):
        pos = m.start()
    return pos


def parse_multi_choice(response: str, letters: Sequence[str], texts: Sequence[str]) -> str:
    """The chosen letter under the Video-MMMU variant of MMMU's parser, or "" (never random)."""
    resp = _clean(response or "")
    stages = (
        lambda c: max(_last(resp, re.escape(c) + r"\."), _last(resp, re.escape(c) + ":")),
        lambda c: resp.rfind(f"({c})"),
        lambda c: _last(resp, re.escape(c) + " "),
    )
    for stage in stages:
        found = {c: stage(c) for c in letters}
        found = {c: p for c, p in found.items() if p >= 0}
        if found:
            return max(found, key=found.get)
    if len(resp.split()) > 5:
        low = resp.lower()
        found = {c: low.rfind(t.lower()) for c, t in zip(letters, texts) if t and t.lower() in low}
        if found:
            return max(found, key=found.get)
    return ""


_COMMAS = r"-?\b\d{1,3}(?:,\d{3})+\b"
_SCIENTIFIC = r"-?\d+(?:\.\d+)?[eE][+-]?\d+"
_SIMPLE = r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"
_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ")


def extract_numbers(text: str) -> list[str]:
    """Every number in `text`: with thousands commas, in scientific notation, plain."""
    return re.findall(_COMMAS, text) + re.findall(_SCIENTIFIC, text) + re.findall(_SIMPLE, text)


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False


def normalize_str(text: str) -> list[float | str]:
    """A number → [float rounded to 2]; text → [lower case] (a single character padded, to avoid trivial hits)."""
    text = text.strip()
    if _is_number(text):
        return [round(float(text.replace(",", "")), 2)]
    text = text.lower()
    return [" " + text, text + " "] if len(text) == 1 else [text]


def _key_subresponses(response: str) -> list[str]:
    response = response.strip().strip(".").lower()
    subs = re.split(r"\.\s(?=[A-Z])|\n", response)
    keys = []
    for i, sub in enumerate(subs):
        indicators = _INDICATORS + (("=",) if i == len(subs) - 1 else ())
        tails = [sub.split(ind)[-1].strip() for ind in indicators if ind in sub]
        if tails:
            shortest = min(tails, key=len)
            if shortest and shortest not in (":", ",", ".", "!", "?", ";", "'"):
                keys.append(shortest)
    return keys or [response]


def parse_open_response(response: str) -> list[float | str]:
    """The candidate answers of a free-form response (MMMU `parse_open_response`)."""
    keys = _key_subresponses(response or "")
    preds: list[str] = list(keys)
    for k in keys:
        preds.extend(extract_numbers(k))
    out: list[float | str] = []
    for p in preds:
        for v in normalize_str(p):
            if v not in out:
                out.append(v)
    return out


def eval_open(gt: str, preds: Sequence[float | str]) -> bool:
    """MMMU `eval_open`: a parsed number equal to the ground truth's, or the ground-truth text inside a parsed string."""
    answers = normalize_str(str(gt))
    for pred in preds:
        if isinstance(pred, str):
            if any(isinstance(a, str) and a in pred for a in answers):
                return True
        elif pred in answers:
            return True
    return False

"""MMMU-style answer parsing (§2.0 M1) as Video-MMMU's own evaluation runs it.

Source: EvolvingLMMs-Lab/VideoMMMU `lmms_eval/tasks/videommmu/utils.py` (commit 88b4ac3), ported.

Multiple choice (`parse_multi_choice`): strip `, . ! ? ; : '` from both ends (one character kind at
a time) and pad with spaces; candidates, the first stage with any deciding: every letter with "X."
or "X:" (no word boundary: "DNA." names A); else every "(X)"; else every "X "; else, for a text of
more than 5 words, every option whose text appears in it (case-insensitive). One candidate wins
outright; among several the latest wins, measured by "X." when any period candidate exists (a
colon-only candidate then counts as position −1), else "X:", else "(X)", else " X " (a letter only
glued to a word, "DNA ", counts as −1), else the option text; ties go to the earlier letter.
No candidate: the source returns "No Answere Found" (wrong); here "" (undecided).

Open / numerical (`parse_open_response` + `eval_open`): the response lower-cased, split into
sentences (on newlines only: the source's ". (?=[A-Z])" split never fires after lower-casing);
per sentence the shortest non-empty tail after one of Video-MMMU's 26 key phrases (MMMU's eight plus
"are", "in total", "total", "has", "number of", …; "=" too in the last sentence), kept unless it is
a lone punctuation mark; no key at all → the whole response. Candidates: those tails and every
number in them, each normalised (a number → float rounded to 2 places; text → lower case; one
character padded with a space). Correct if a parsed number equals the ground truth's, or the
ground-truth text is contained in a parsed string. An empty response parses to nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_STRIP = (",", ".", "!", "?", ";", ":", "'")


def _clean(response: str) -> str:
    for ch in _STRIP:
        response = response.strip(ch)
    return " " + response + " "


def parse_multi_choice(response: str, letters: Sequence[str], texts: Sequence[str]) -> str:
    """The chosen letter under Video-MMMU's parser, or "" where the source finds none."""
    if not response:
        return ""
    resp = _clean(response)
    period = [c for c in letters if f"{c}." in resp]
    colon = [c for c in letters if f"{c}:" in resp]
    stages = (
        (period + colon, lambda c: resp.rfind(f"{c}." if period else f"{c}:")),
        ([c for c in letters if f"({c})" in resp], lambda c: resp.rfind(f"({c})")),
        ([c for c in letters if f"{c} " in resp], lambda c: resp.rfind(f" {c} ")),
    )
    for found, where in stages:
        if found:
            break
    else:
        if len(resp.split()) <= 5:
            return ""
        low = resp.lower()
        by_letter = dict(zip(letters, texts))
        found = [c for c in letters if str(by_letter.get(c, "")).lower() in low]
        where = lambda c: low.rfind(str(by_letter[c]).lower())  # noqa: E731
        if not found:
            return ""
    if len(found) == 1:
        return found[0]
    positions = [where(c) for c in found]
    return found[positions.index(max(positions))]


_COMMAS = r"-?\b\d{1,3}(?:,\d{3})+\b"
_SCIENTIFIC = r"-?\d+(?:\.\d+)?[eE][+-]?\d+"
_SIMPLE = r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"
_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ", "are ", "in total ",
               "total ", "identify ", "recognize ", "calculated as ", "counted as ", "measured as ", "observed as ",
               "concluded as ", "found to be ", "equals ", "determined to be ", "number of ", "value is ",
               "adds up to ", "have ", "has ")


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


def _shortest_tail(sentence: str, indicators: Sequence[str]) -> str | None:
    """The source's running minimum: an empty tail is replaced by the next indicator's tail."""
    best: str | None = None
    for ind in indicators:
        if ind in sentence:
            tail = sentence.split(ind)[-1].strip()
            if not best or len(tail) < len(best):
                best = tail
    return best


def _key_subresponses(response: str) -> list[str]:
    response = response.strip().strip(".").lower()
    subs = re.split(r"\.\s(?=[A-Z])|\n", response)
    keys = []
    for i, sub in enumerate(subs):
        tail = _shortest_tail(sub, _INDICATORS + (("=",) if i == len(subs) - 1 else ()))
        if tail and tail.strip() not in (":", ",", ".", "!", "?", ";", "'"):
            keys.append(tail)
    return keys or [response]


def parse_open_response(response: str) -> list[float | str]:
    """The candidate answers of a free-form response (MMMU `parse_open_response`)."""
    if not response:
        return []
    keys = _key_subresponses(response)
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

"""Multiple choice: one option letter, read strictly so that it cannot be gamed.

A letter counts when the answer IS a letter ("b", "(C)", "B.", "B. Blue"), when it follows an
answer phrase ("the answer is B", "I will go with C", "B is correct"), or when the last line is
one. A letter is never read out of a word, a pronoun or an article: "It is a dog" and
"A B C D" have no answer (the reference read them as A), "I will go with C" is C (not I). In free
text a lower-case letter counts only when bracketed, after "option"/"choice", or at the end.
With `options`, only their letters count (so VideoMMMU's 14 options work) and the option's text
alone ("Blue" for "B. Blue") is that option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from string import ascii_uppercase
from typing import Any

from evr1.rewards.extract import normalize_text
from evr1.rewards.registry import FamilyResult, register

_LETTER = r"(?<![A-Za-z0-9'’])(?P<open>[(\[])?(?P<letter>[A-Za-z])(?P<close>[)\]])?(?![A-Za-z0-9'’\-])"
# The whole answer is one letter: "b", "(C)", "[D]", "B.", "B)", "B:".
_ONLY = re.compile(r"[(\[]?([A-Za-z])[)\]]?\s*[.:：)]?")
# The answer starts with a labelled letter: "B. Blue", "(B) Blue", "B) Blue", "b: blue".
_LABELLED = re.compile(r"(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z])(?:[):：]|\.(?=\s)))\s*\S")
_PHRASES = (
    # "the answer is B", "Answer: (b)", "the correct option is C", "my choice would be D"
    re.compile(
        r"\b(?:answer|(?P<kw0>option|choice))\b(?:\s+(?:is|would\s+be|should\s+be))?\s*[:：=]?\s*"
        r"(?:(?P<kw>option|choice)\s*)?" + _LETTER,
        re.IGNORECASE,
    ),
    # "I will go with C", "I choose option b", "selecting (A)"
    re.compile(
        r"\b(?:choose|chose|choosing|select|selected|selecting|pick|picked|picking|"
        r"go(?:ing)?\s+with|went\s+with|opt(?:ing)?\s+for)\s+"
        r"(?:the\s+)?(?:(?P<kw>option|choice|answer)\s*)?" + _LETTER,
        re.IGNORECASE,
    ),
    # "B is correct", "(C) is the best answer", "option D is right"
    re.compile(
        r"(?:\b(?P<kw>option|choice)\s*)?" + _LETTER + r"\s+is\s+(?:the\s+)?(?:correct|right|best)\b",
        re.IGNORECASE,
    ),
)
_OPTION_LABEL = re.compile(r"\s*[(\[]?([A-Za-z])[)\].:：]\s*(.*)", re.DOTALL)
_DECORATION = "*`'\" \t\r\n"


class Options:
    """The valid letters of a question and a map from normalised option text to letter."""

    __slots__ = ("letters", "texts")

    def __init__(self, letters: frozenset[str] | None, texts: dict[str, str]) -> None:
        self.letters = letters
        self.texts = texts


def label_options(options: Sequence[Any]) -> list[str]:
    """Options as "A. text" lines: kept when already labelled, labelled A, B, … by position when none is.

    The prompt and the reward both use this, so unlabelled options mean the same letters in both.
    """
    texts = [str(o).strip() for o in options]
    if texts and all(_OPTION_LABEL.fullmatch(t) for t in texts):
        return texts
    return [f"{ascii_uppercase[i]}. {t}" if i < 26 else t for i, t in enumerate(texts)]


@lru_cache(maxsize=4096)
def _parse_options(options: tuple[str, ...]) -> Options:
    letters: set[str] = set()
    texts: dict[str, str] = {}
    for line in label_options(options):
        match = _OPTION_LABEL.fullmatch(line)
        if match is None:
            continue
        letter = match.group(1).upper()
        letters.add(letter)
        text = normalize_text(match.group(2))
        if text:
            # Two options with the same text cannot be told apart by text: drop the mapping.
            texts[text] = letter if text not in texts else ""
    return Options(frozenset(letters) or None, {text: letter for text, letter in texts.items() if letter})


def options_of(sample: Mapping[str, Any]) -> Options:
    """The sample's options (any sequence of strings), or 'any letter A–Z' when it has none."""
    options = sample.get("options")
    if hasattr(options, "tolist"):  # a numpy array from a columnar store
        options = options.tolist()
    if isinstance(options, (list, tuple)) and options:
        return _parse_options(tuple(str(o) for o in options))
    return _NO_OPTIONS


_NO_OPTIONS = Options(None, {})


def _valid(letter: str, options: Options) -> str | None:
    letter = letter.upper()
    if options.letters is not None and letter not in options.letters:
        return None
    return letter


def _phrase_letter(match: re.Match[str], text: str) -> str | None:
    """The letter of a phrase match, unless it is really a word: an article or the pronoun I."""
    letter = match.group("letter")
    bracketed = match.group("open") is not None or match.group("close") is not None
    if bracketed or match.group("kw"):
        return letter
    if match.groupdict().get("kw0") and not text[match.end("kw0") : match.start("letter")].strip():
        return letter  # "option b": the keyword names the letter directly
    tail = text[match.end("letter") :]
    at_end = not tail.strip(" \t.,;:!?)*_`'\"\n")
    if letter.islower():
        return letter if at_end else None  # "is a dog" no; "answer: b" yes
    if letter in "IA" and re.match(r"\s+[a-z]", tail):
        return None  # "I will …", "A dog …": a pronoun or an article, not an option
    return letter


def parse_letter(text: str, options: Options = _NO_OPTIONS) -> str | None:
    """The option letter an answer gives, upper-cased, or None when it gives none (or an invalid one)."""
    text = text.strip(_DECORATION)
    if not text:
        return None
    by_text = options.texts.get(normalize_text(text)) if options.texts else None
    match = _ONLY.fullmatch(text)
    if match:  # a valid letter wins; else the option whose text is that letter ("y" for "B. y")
        return _valid(match.group(1), options) or by_text
    match = _LABELLED.match(text)
    if match:
        return _valid(next(g for g in match.groups() if g), options)
    if by_text:
        return by_text
    best: tuple[int, str] | None = None
    for pattern in _PHRASES:
        for match in pattern.finditer(text):
            letter = _phrase_letter(match, text)
            if letter and _valid(letter, options) and (best is None or match.start() >= best[0]):
                best = (match.start(), letter.upper())
    if best is not None:
        return best[1]
    if "\n" in text:
        last_line = text.rsplit("\n", 1)[1].strip(_DECORATION)
        match = _ONLY.fullmatch(last_line) or _LABELLED.match(last_line)
        if match:
            return _valid(next(g for g in match.groups() if g), options)
    return None


@lru_cache(maxsize=8192)
def _ground_truth_letter(answer: str, options: Options) -> str | None:
    return parse_letter(answer, options)


@register("multiple choice", "multiple_choice", "multiple-choice", "mc", "mcq")
def multiple_choice(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """1 when the answer's letter equals the ground truth's letter.

    A ground truth that is not a letter (e.g. "K" with four options) is compared as normalised text.
    """
    options = options_of(sample)
    predicted = parse_letter(text, options)
    truth = _ground_truth_letter(sample["answer"], options)
    if truth is None:
        expected = normalize_text(sample["answer"])
        return FamilyResult(float(bool(expected) and normalize_text(text) == expected), predicted is not None)
    return FamilyResult(float(predicted == truth), predicted is not None)

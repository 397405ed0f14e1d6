"""The instruction templates: one Jinja2 template per reward family, all extending one layout.

The wording follows the reference's video template (spec §1.4): reason first, then the answer in
`<answer>` tags, with a family-specific answer line and format hint. A family without an entry
uses "generic". Variables: `intro` ("Watch the video carefully", …), `source` ("video",
"image" or none for text), `thinking`, `problem` (the question, placeholder included) and
`options` (labelled "A. …" lines). Keys are the canonical family names of `evr1.rewards`.
"""

from __future__ import annotations

LAYOUT = """\
{% block intro %}{{ intro }}, then answer the following {% block kind %}question{% endblock %}.{% endblock %}
{% if thinking %}First, think step by step inside <think> </think> tags.
{%- else %}{% block reason %}First, briefly explain your reasoning\
{% if source %} based on what you observed in the {{ source }}{% endif %}.{% endblock %}{% endif %}
{% block answer %}Then, provide your final answer inside <answer> tags.{% endblock %}
{% block extra %}{% endblock %}Question: {{ problem }}
{% if options %}Options:
{{ options | join("\\n") }}{% endif %}
"""


def _family(kind: str = "", reason: str = "", answer: str = "", extra: str = "") -> str:
    blocks = ['{% extends "_layout" %}']
    for name, body in (("kind", kind), ("reason", reason), ("answer", answer), ("extra", extra)):
        if body:
            body = body + "\n" if name == "extra" else body  # extra lines sit above "Question:"
            blocks.append(f"{{% block {name} %}}{body}{{% endblock %}}")
    return "".join(blocks)


_NUMBER_ANSWER = "Then, provide your numerical answer inside <answer> tags."
_YES_NO = "Then, provide Yes or No inside <answer> tags."


def _code(language: str) -> str:
    return _family(
        reason="First, briefly explain your approach.",
        answer=f"Then, provide the complete {language} code inside <answer> tags. Do not use Markdown fences.",
    )


TEMPLATES: dict[str, str] = {
    "_layout": LAYOUT,
    "generic": _family(),
    "open-ended": _family(),
    "multiple choice": _family(
        kind="multiple-choice question",
        answer="Then, provide the letter of the correct option inside <answer> tags.",
    ),
    "numerical": _family(answer=_NUMBER_ANSWER),
    "regression": _family(answer=_NUMBER_ANSWER),
    "boolean": _family(answer=_YES_NO),
    "ocr": _family(
        reason="First, briefly describe the relevant content in the {{ source or 'text' }}.",
        answer="Then, provide the recognized text inside <answer> tags.",
    ),
    "math": _family(
        reason="First, briefly explain your reasoning and show your work.",
        answer=(
            "Then, provide your final answer inside <answer> tags. If it is multiple choice, "
            "provide the option letter; otherwise provide the numerical value."
        ),
    ),
    "temporal grounding": _family(
        reason="First, briefly explain your reasoning about when the event occurs.",
        answer="Then, provide the time span in seconds as a JSON object inside <answer> tags.",
        extra='Format: {"time": [start_seconds, end_seconds]}',
    ),
    "spatial-temporal grounding": _family(
        reason="First, briefly explain your reasoning about when and where the target appears.",
        answer="Then, provide the time span and bounding boxes as a JSON object inside <answer> tags.",
        extra=(
            'Format: {"time": [start, end], "boxes": {"second": [x1, y1, x2, y2], ...}}\n'
            "You MUST output one bounding box for every integer second within the time span (inclusive)."
        ),
    ),
    "spatial grounding": _family(
        reason="First, briefly explain your reasoning about where the target is located.",
        answer="Then, provide the bounding box as a JSON object inside <answer> tags.",
        extra='Format: {"boxes": [x1, y1, x2, y2]}',
    ),
    "tracking": _family(
        reason="First, briefly explain your reasoning about the target's movement.",
        answer="Then, provide the bounding boxes as a JSON object inside <answer> tags.",
        extra=(
            'Format: {"boxes": {"second": [x1, y1, x2, y2], ...}}\n'
            "You MUST output one bounding box for every integer second in the track, up to 32 seconds."
        ),
    ),
    "code": _code("Python"),
    "svg-code": _code("SVG"),
    "html-code": _code("HTML"),
    "preference": _family(
        reason="First, briefly explain your reasoning based on what you observed.",
        answer="Then, provide your choice (Response 1, Response 2, or Tie) inside <answer> tags.",
    ),
}

INTROS = {
    "video": "Watch the video carefully",
    "image": "Examine the image carefully",
    "text": "Consider the problem carefully",
}

"""Prompt rendering: family templates, options, placeholders, thinking, user templates, errors."""

from __future__ import annotations

import pytest

from evr1.prompts import TEMPLATES, PromptError, render
from evr1.rewards import families

MC = {
    "problem_id": "mc-1",
    "problem": "<video>What color is the car?",
    "problem_type": "multiple choice",
    "options": ["A. Red", "B. Blue"],
    "videos": ["car.mp4"],
}


def test_multiple_choice_matches_reference_wording():
    # Spec §1.4 example (video template, executed): three instruction lines, the question, the
    # options block. We drop the reference's leading newline.
    assert render(MC) == (
        "Watch the video carefully, then answer the following multiple-choice question.\n"
        "First, briefly explain your reasoning based on what you observed in the video.\n"
        "Then, provide the letter of the correct option inside <answer> tags.\n"
        "Question: <video>What color is the car?\n"
        "Options:\n"
        "A. Red\n"
        "B. Blue"
    )


@pytest.mark.parametrize(
    ("problem_type", "expected_line"),
    [
        ("numerical", "Then, provide your numerical answer inside <answer> tags."),
        ("regression", "Then, provide your numerical answer inside <answer> tags."),
        ("binary classification", "Then, provide Yes or No inside <answer> tags."),
        ("OCR", "Then, provide the recognized text inside <answer> tags."),
        ("temporal grounding", 'Format: {"time": [start_seconds, end_seconds]}'),
        ("spatial grounding", 'Format: {"boxes": [x1, y1, x2, y2]}'),
        (
            "spatial-temporal grounding",
            "You MUST output one bounding box for every integer second within the time span (inclusive).",
        ),
        ("tracking", "You MUST output one bounding box for every integer second in the track, up to 32 seconds."),
        ("svg-code", "Then, provide the complete SVG code inside <answer> tags. Do not use Markdown fences."),
        ("llava", "Then, provide your choice (Response 1, Response 2, or Tie) inside <answer> tags."),
        ("video qa", "Then, provide your final answer inside <answer> tags."),
        ("something unknown", "Then, provide your final answer inside <answer> tags."),
    ],
)
def test_family_lines(problem_type, expected_line):
    text = render({"problem": "<video>Q?", "problem_type": problem_type, "videos": ["v.mp4"]})
    assert expected_line in text.splitlines()
    assert text.endswith("Question: <video>Q?")


def test_every_builtin_family_has_a_template():
    assert set(families()) <= set(TEMPLATES)


@pytest.mark.parametrize(
    ("fields", "question_line"),
    [
        ({"videos": ["a.mp4"]}, "Question: <video>What happens?"),  # inserted (the README example crashed)
        ({"images": ["a.png"]}, "Question: <image>What happens?"),
        ({"images": ["a.png", "b.png"]}, "Question: <image><image>What happens?"),
        ({"data_type": "video"}, "Question: <video>What happens?"),
        ({"data_type": "text"}, "Question: What happens?"),
        ({}, "Question: What happens?"),
    ],
)
def test_placeholder_inserted_when_missing(fields, question_line):
    text = render({"problem": "What happens?", "problem_type": "open-ended", **fields})
    assert question_line in text.splitlines()


def test_modality_wording():
    assert render({"problem": "Q", "images": ["a.png"]}).startswith("Examine the image carefully")
    assert render({"problem": "Q"}).startswith("Consider the problem carefully")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"problem": "<image> then <video>", "videos": ["a.mp4"]}, "field 'problem' has a <image> placeholder"),
        ({"problem": "<video> Q", "images": ["a.png"]}, "field 'problem' has a <video> placeholder"),
        ({"problem": "<video> Q"}, "but the sample has no media"),
        ({"problem": "<image> Q", "images": ["a.png", "b.png"]}, "1 <image> placeholder(s) for 2"),
        ({"problem": "Q", "images": ["a.png"], "videos": ["a.mp4"]}, "'videos' and 'images' are both"),
        ({"problem": ""}, "field 'problem' must be a non-empty string"),
        ({"problem": 3}, "field 'problem'"),
        ({"problem": "Q", "options": "A. x"}, "field 'options' must be a list of strings"),
    ],
)
def test_errors_name_the_record_and_field(fields, message):
    with pytest.raises(PromptError, match="record 'r-7'") as error:
        render({"problem_id": "r-7", **fields})
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)


def test_content_column_does_not_crash():
    # The reference passed `content` twice to the template and crashed on such datasets.
    text = render({**MC, "content": "my own column"})
    assert "Question: <video>What color is the car?" in text
    assert render({**MC, "content": "my own column"}, template="{{ sample.content }}") == "my own column"


def test_thinking_asks_for_think_tags():
    text = render(MC, thinking=True)
    assert "First, think step by step inside <think> </think> tags." in text.splitlines()
    assert "briefly explain" not in text
    assert "<think>" not in render(MC)


def test_unlabelled_options_are_lettered():
    text = render({**MC, "options": ["Red", "Blue"]})
    assert text.endswith("Options:\nA. Red\nB. Blue")


def test_user_template_text_and_file(tmp_path):
    inline = "Q={{ problem }} T={{ problem_type }} N={{ options | length }} S={{ data_source }}"
    assert render({**MC, "data_source": "demo"}, template=inline) == (
        "Q=<video>What color is the car? T=multiple choice N=2 S=demo"
    )
    path = tmp_path / "mine.jinja"
    path.write_text('{% extends "_layout" %}{% block answer %}Answer in one word.{% endblock %}\n')
    text = render(MC, template=str(path))
    assert "Answer in one word." in text.splitlines()
    assert text.endswith("B. Blue")
    assert render(MC, template=path) == text  # a PathLike works too


def test_user_template_errors_are_prompt_errors(tmp_path):
    with pytest.raises(PromptError, match="does not exist"):
        render(MC, template=str(tmp_path / "typo.jinja"))  # the reference silently fell back
    with pytest.raises(PromptError, match="undefined"):
        render(MC, template="{{ not_a_field }}")
    with pytest.raises(PromptError, match="does not compile"):
        render(MC, template="{% if %}")


def test_template_is_sandboxed():
    with pytest.raises(PromptError):
        render(MC, template="{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(PromptError):
        render(MC, template="{{ options.append('x') }}")  # immutable sandbox: no mutation
    assert MC["options"] == ["A. Red", "B. Blue"]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        # Issue 15: two nested range(100000) loops never returned; now the step budget stops them.
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ problem }}", "steps"),
        ("{{ ('x' * 10**9)|length }}", "over 1,000,000"),  # refused before the 1 GB string exists
        ("{{ 'x'.ljust(10**9) }}", "capped"),
        ("{{ 'x'|center(1000000000) }}", "capped"),
        ("{{ 2**100000 }}", "bits"),
        ("{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", "over 1,000,000"),  # streamed output cap
        ("{{ range(10**6)|list|length }}", "over 100,000"),
    ],
)
def test_templates_that_hang_or_exhaust_memory_are_refused_promptly(template, message):
    with pytest.raises(PromptError, match=message) as e:
        render(MC, template=template)
    assert "record 'mc-1': template refused" in str(e.value)


def test_rendering_in_a_thread_is_capped_too():
    # No SIGALRM outside the main thread: the step budget and deadline alone stop the loop.
    from concurrent.futures import ThreadPoolExecutor

    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(PromptError, match="steps"):
            pool.submit(render, MC, template=loop).result(timeout=60)

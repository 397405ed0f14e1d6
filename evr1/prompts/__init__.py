"""Prompts: one sandboxed Jinja2 template per task family (`templates.py`), rendered by `render`.

    render(sample, *, template=None, thinking=False) -> str

See docs/rewards.md for the families the templates follow.
"""

from evr1.prompts.render import PLACEHOLDERS, PromptError, family_template, media_counts, place_media, render
from evr1.prompts.templates import TEMPLATES

__all__ = ["PLACEHOLDERS", "TEMPLATES", "PromptError", "family_template", "media_counts", "place_media", "render"]

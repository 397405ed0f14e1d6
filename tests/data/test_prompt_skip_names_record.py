"""Issue 36: a prompt skipped for length named no record; the skip's message now names the sample.

(About `evr1/train/workers/prompt_prep.py`; kept beside the ingestion tests of long prompts.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evr1.models.prompt_length import PromptTooLong, check_prompt_tokens
from evr1.train.workers.prompt_prep import encode_row


class _TooLong:
    def encode_prompt(self, text, **kwargs):
        check_prompt_tokens(7900, 4096)  # what the adapter raises: "prompt: prompt is 7900 tokens ..."


def test_a_prompt_skipped_for_length_names_its_sample():
    row = {"sample_id": "clip-42", "problem": "What colour?", "answer": "A", "problem_type": "multiple choice",
           "options": ["A. red", "B. blue"], "videos": [], "images": [], "extra": "{}"}
    spec = SimpleNamespace(template=None, thinking=False)
    with pytest.raises(PromptTooLong) as err:
        encode_row(row, _TooLong(), reader=None, spec=spec)
    assert str(err.value) == ("record 'clip-42': prompt is 7900 tokens (text plus vision), over "
                              "data.max_prompt_tokens = 4096")

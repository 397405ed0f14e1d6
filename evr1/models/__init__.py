"""evr1.models: Qwen-VL family adapters, prompt/media encoding, response log-probs, tiny checkpoints."""

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
from evr1.models.adapter import VisionLanguageAdapter, load_adapter
from evr1.models.batch import ModelBatch, PromptInputs
from evr1.models.families import FAMILIES, Family, family_of
from evr1.models.runtime import load_model, response_log_probs
from evr1.models.shared_prefix import (
    VisualFeatures,
    encode_visual,
    grouped_response_log_probs,
    response_log_probs_with_visual,
)
from evr1.models.tiny import make_tiny

__all__ = [
    "FAMILIES",
    "Family",
    "ModelBatch",
    "PromptInputs",
    "VisionLanguageAdapter",
    "VisualFeatures",
    "encode_visual",
    "family_of",
    "grouped_response_log_probs",
    "load_adapter",
    "load_model",
    "make_tiny",
    "response_log_probs",
    "response_log_probs_with_visual",
]

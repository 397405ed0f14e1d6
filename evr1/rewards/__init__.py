"""Rewards: one module per task family, a registry with aliases, and the scorers RL optimises.

    compute_score(response, sample) -> {"overall", "accuracy", "format"}
    compute_scores(responses, samples, workers=…, timeout=…) -> BatchResult(scores, metrics, …)

`overall = accuracy_weight·accuracy + format_weight·format` (a family's training reward from
`@register_shaping` may stand in for accuracy there, `shaping=`). Families register themselves with
`@register(name, *aliases)`; `resolve` / `known_problem_types` tell ingestion which
`problem_type`s exist. See docs/rewards.md.
"""

from evr1.rewards import (  # noqa: F401  (importing a family module registers it)
    boolean,
    code,
    generic,
    grounding,
    math,
    multiple_choice,
    numerical,
    ocr,
    open_ended,
    preference,
)
from evr1.rewards.batch import BatchResult, compute_scores, shutdown_pools
from evr1.rewards.registry import (
    Family,
    FamilyResult,
    check_shaping,
    families,
    get_family,
    get_shaping,
    known_problem_types,
    load_reward_function,
    register,
    register_shaping,
    resolve,
    shapings,
)
from evr1.rewards.sandbox import (
    SandboxUnavailable,
    TestForm,
    UnjudgeableTests,
    classify_tests,
)
from evr1.rewards.score import RewardWarning, compute_score
from evr1.rewards.timeouts import DEFAULT_TIMEOUT, ItemTimeout, RewardHelperError
from evr1.rewards.weights import RewardWeights, check_weights

__all__ = [
    "DEFAULT_TIMEOUT",
    "BatchResult",
    "Family",
    "FamilyResult",
    "ItemTimeout",
    "RewardHelperError",
    "RewardWarning",
    "RewardWeights",
    "SandboxUnavailable",
    "TestForm",
    "UnjudgeableTests",
    "check_shaping",
    "check_weights",
    "classify_tests",
    "compute_score",
    "compute_scores",
    "families",
    "get_family",
    "get_shaping",
    "known_problem_types",
    "load_reward_function",
    "register",
    "register_shaping",
    "resolve",
    "shapings",
    "shutdown_pools",
]

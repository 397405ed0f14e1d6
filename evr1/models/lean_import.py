"""transformers without the scikit-learn import that no evr1 process uses (1-3 s of every start-up).

`transformers.generation.candidate_generator` runs `from sklearn.metrics import roc_curve` whenever
scikit-learn is installed, and it is (MLflow depends on it). That one line imports scikit-learn and
SciPy: 1-3 s in each process that builds a model (1.1 s median in benchmarks/bench_imports.py),
i.e. the flow process and every Ray actor (two ranks and a rollout worker per training).
`roc_curve` serves only assisted generation's confidence threshold (a draft model's heuristic),
which evr1 never runs.

Importing this module before anything imports `transformers.generation` makes transformers treat
scikit-learn as absent, so that import is skipped. Nothing else in transformers that evr1 reaches
asks for it. Where the patch point has moved (another transformers version), nothing is changed and
the import costs what it did (docs/performance.md, "Start-up imports of a Ray actor").
"""

from __future__ import annotations

import sys

_GENERATION = "transformers.generation.candidate_generator"


def _sklearn_absent() -> bool:
    """transformers' `is_sklearn_available`, as seen by evr1's processes."""
    return False


def skip_unused_sklearn() -> bool:
    """Make transformers skip its scikit-learn import; True when the patch is in place (idempotent).

    Too late once `transformers.generation.candidate_generator` is imported: it has imported
    scikit-learn already, and nothing is changed."""
    if _GENERATION in sys.modules:
        return False
    import transformers.utils as utils
    from transformers.utils import import_utils

    if not callable(getattr(utils, "is_sklearn_available", None)) or not hasattr(import_utils, "is_sklearn_available"):
        return False
    utils.is_sklearn_available = import_utils.is_sklearn_available = _sklearn_absent
    return True


skip_unused_sklearn()

"""The code part of each stage's cache key follows the code the stage runs (its import closure)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from evr1.pipeline import lineage
from evr1.pipeline.code import closure, function_imports, module_name
from evr1.pipeline.results import StageResult


def _modules(stage: str) -> set[str]:
    return {module_name(p) for p in lineage.stage_files(stage)}


@pytest.mark.parametrize("stage, needed", [
    # The hand-kept map this replaces had drifted on exactly these (each stage imports them).
    ("train", {"evr1.data.ingest", "evr1.models.prompt_length", "evr1.train.trainer", "evr1.rl.advantages"}),
    ("eval", {"evr1.data.ingest", "evr1.eval.evaluate", "evr1.eval.benchmarks.videomme", "evr1.engines.hf"}),
    ("merge", {"evr1.train.merge", "evr1.train.checkpoint"}),
    ("ingest", {"evr1.data.ingest", "evr1.models.tiny", "evr1.rewards.registry"}),
    ("cache", {"evr1.cache.builder", "evr1.video.decode"}),
])
def test_stage_code_covers_what_the_stage_imports(stage, needed):
    assert needed <= _modules(stage), sorted(needed - _modules(stage))


def test_stages_do_not_hash_each_others_code():
    assert "evr1.train.trainer" not in _modules("ingest") | _modules("cache") | _modules("eval")
    assert "evr1.eval.evaluate" not in _modules("train")
    assert lineage.code_version("ingest") != lineage.code_version("train")


# What a stage loads when it runs, beyond its own imports: the registries it fills at run time.
RUNTIME = {
    "eval": "from evr1.eval.benchmark import load_all; load_all(); from evr1.engines.base import engine_class; "
            "engine_class('hf')",
    "train": "from evr1.engines.base import engine_class; engine_class('hf')",
}


@pytest.mark.parametrize("stage", sorted(lineage.STAGE_FUNCTIONS))
def test_the_closure_holds_every_module_python_loads(stage):
    """Import what the stage function imports in a fresh interpreter (plus the registries it fills at
    run time) and compare with the source-read closure: a module Python loads that the closure misses
    would be code that changes the stage's results without changing its key."""
    imports = function_imports(lineage.STAGES_MODULE, lineage.STAGE_FUNCTIONS[stage])
    code = ("import importlib, json, sys\n"
            f"for m in {imports!r}: importlib.import_module(m)\n"
            f"{RUNTIME.get(stage, '')}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('evr1.'))))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True, timeout=300).stdout.splitlines()[-1]))
    # evr1/__init__ and the shared plumbing every stage runs beside (config, results, tracking) are
    # keyed by the config fingerprint and the package version instead.
    missing = loaded - closure(imports) - {"evr1"}
    assert not missing, f"{stage}: loaded but not hashed: {sorted(missing)}"


def test_results_pickled_before_the_move_still_load():
    """Prefect persisted `evr1.results.StageResult` before it moved to `evr1.pipeline.results`."""
    code = ("import pickle, sys\n"
            "import evr1.pipeline.results as r\n"
            "r.StageResult.__module__ = 'evr1.results'\n"
            "sys.modules['evr1.results'] = r\n"
            "sys.stdout.buffer.write(pickle.dumps(r.StageResult(stage='train', uri='/x', version=3)))\n")
    old = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=120).stdout
    assert b"evr1.results" in old and b"evr1.pipeline.results" not in old
    loaded = pickle.loads(old)
    assert type(loaded) is StageResult and loaded.version == 3

"""evr1's processes import transformers without scikit-learn (evr1/models/lean_import.py): the import
`transformers.generation.candidate_generator` makes when scikit-learn is installed costs every Ray actor
1-3 s of start-up (benchmarks/bench_imports.py), for a function only assisted generation uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> dict:
    """Run `code` in a new interpreter (as Ray starts an actor) and return the JSON it prints last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_actor_modules_and_the_hf_engine_load_without_scikit_learn():
    seen = _fresh(
        "import json, sys\n"
        "import evr1.train.workers.policy, evr1.train.workers.rollout, evr1.engines.hf, evr1.train.merge\n"
        "import transformers.generation.candidate_generator as cg\n"
        "from transformers import AutoModelForImageTextToText\n"
        "print(json.dumps({'sklearn': 'sklearn' in sys.modules, 'candidate_generator': cg.is_sklearn_available()}))\n")
    assert seen == {"sklearn": False, "candidate_generator": False}, seen


def test_too_late_changes_nothing():
    """Once candidate_generator is imported, scikit-learn is in and the patch steps aside (returns False)."""
    seen = _fresh(
        "import json, sys\n"
        "import transformers.generation.candidate_generator\n"
        "from evr1.models.lean_import import skip_unused_sklearn\n"
        "import transformers.utils as u\n"
        "print(json.dumps({'patched': skip_unused_sklearn(), 'sklearn': 'sklearn' in sys.modules,\n"
        "                  'available': u.is_sklearn_available()}))\n")
    assert seen == {"patched": False, "sklearn": True, "available": True}, seen


def test_a_tiny_model_builds_and_generates_under_the_patch(tmp_path):
    """The model classes and generate() load and run in a process where the patch is in place."""
    seen = _fresh(
        "import json, sys, torch\n"
        "from evr1.models import load_model, make_tiny\n"
        f"model = load_model(make_tiny('qwen2_vl', {str(tmp_path / 'm')!r}, seed=0), dtype=torch.float32)\n"
        "ids = torch.tensor([[1, 2, 3]])\n"
        "out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,\n"
        "                     min_new_tokens=3)\n"
        "print(json.dumps({'shape': list(out.shape), 'sklearn': 'sklearn' in sys.modules}))\n")
    assert seen == {"shape": [1, 6], "sklearn": False}, seen

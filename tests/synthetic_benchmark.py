"""A Video-MME-format annotation file over synthetic videos: real files for the eval stage to decode,
with questions whose answers the synthetic generator knows."""

from __future__ import annotations

import json
from pathlib import Path

from evr1.data import make_synthetic


def videomme_on_synthetic(tmp_path: Path, n: int, *, seed: int = 3) -> tuple[Path, Path]:
    """(annotation file, data dir holding `Video-MME/`) for `n` multiple-choice items."""
    rep = make_synthetic(tmp_path / "data" / "Video-MME", n, seed=seed, heldout=0, image_fraction=0.0, seconds=1.0)
    rows = [json.loads(line) for line in Path(rep.train_path).read_text().splitlines()]
    records = [{"problem_id": str(i), "problem": r["problem"].replace("<video>", "").strip(), "options": r["options"],
                "problem_type": "multiple choice", "solution": f"<answer>{r['answer']}</answer>",
                "path": "./" + r["videos"][0], "duration": "short", "domain": "Synthetic", "task_type": r["synth_kind"],
                "data_type": "video"} for i, r in enumerate(rows)]
    ann = tmp_path / "videomme.json"
    ann.write_text(json.dumps(records))
    return ann, tmp_path / "data"

"""A user-defined task family named in `reward.families` is known to ingestion and scores like a built-in."""

import json
from pathlib import Path

from evr1 import pipeline, rewards
from evr1.config import load_config
from evr1.data.ingest import read_rejects, read_samples

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
from evr1.rewards import FamilyResult, register

@register("tally", "object tally")
def tally(text, sample):
    digits = "".join(ch for ch in text if ch.isdigit())
    return FamilyResult(float(digits == sample["answer"].strip()), bool(digits))
'''


def test_user_family_is_loaded_before_ingestion(tmp_path):
    plugin = tmp_path / "my_rewards.py"
    plugin.write_text(PLUGIN)
    image = tmp_path / "img.png"
    from PIL import Image

    Image.new("RGB", (32, 32), "red").save(image)
    records = [{"problem": "<image>How many?", "answer": "3", "problem_type": "Object Tally", "images": ["img.png"]},
               {"problem": "<image>How many?", "answer": "3", "problem_type": "juggling", "images": ["img.png"]}]
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "tracking.enabled=false",
                                               f'data={{"train_files": ["{data}"], "data_root": "{tmp_path}"}}',
                                               f"reward.families=['{plugin}:tally']"])
    result = pipeline.stage_ingest(cfg)
    rows = read_samples(result.uri)
    assert [r["problem_type"] for r in rows] == ["tally"]
    assert [r["field"] for r in read_rejects(result.extra["rejects_uri"])] == ["problem_type"]
    assert rewards.compute_score("<answer>3</answer>", rows[0]) == {"overall": 1.0, "accuracy": 1.0, "format": 1.0}

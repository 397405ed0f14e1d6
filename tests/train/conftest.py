"""Shared training-test data: a reward a random tiny model already earns a little of."""

import json
from pathlib import Path

from evr1.data.synth import make_synthetic

PLUGIN = '''
from evr1.rewards import FamilyResult, register

@register("letter density")
def letter_density(text, sample):
    letters = [c for c in text if not c.isspace()]
    return FamilyResult(sum(c == sample["answer"] for c in letters) / max(len(letters), 1), True)
'''


def letter_density_data(tmp: Path) -> dict[str, Path]:
    """Synthetic videos whose questions are scored by the share of the letter "e" in the response.

    Returns the training JSONL, the held-out JSONL, the media root and the reward plugin file (for
    `reward.families`): the reward varies inside every group from the first step, so GRPO has signal.
    """
    (tmp / "plugin.py").write_text(PLUGIN)
    rep = make_synthetic(tmp / "synth", 10, seed=5, heldout=2)
    records = [json.loads(line) for line in Path(rep.train_path).read_text().splitlines()]
    for r in records:
        r.update(problem_type="letter density", answer="e")
        r.pop("options", None)
    data = tmp / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return {"train": data, "heldout": Path(rep.heldout_path), "root": tmp / "synth", "plugin": tmp / "plugin.py"}


def letter_density_overrides(d: dict[str, Path]) -> list[str]:
    return [f'data={{"train_files": ["{d["train"]}"], "eval_files": ["{d["heldout"]}"], "data_root": "{d["root"]}"}}',
            f"reward.families=['{d['plugin']}:letter_density']"]


def train_through_stages(cfg, out_dir: Path, *, validate: bool = False):
    """Ingest, build the model, cache the frames, then train: the pipeline's stages up to training,
    in-process. `validate` hands the held-out split to the trainer, as the pipeline does."""
    from evr1 import pipeline
    from evr1.data.ingest import read_samples
    from evr1.train.trainer import train

    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    return train(cfg, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                 model_dir=Path(model.uri), out_dir=out_dir,
                 val_samples=read_samples(samples.uri, split="heldout") if validate else None)

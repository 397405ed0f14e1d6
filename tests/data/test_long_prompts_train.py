"""Issue 15: a training run whose data holds a 10 MB and a 20,000-character problem. Both are rejected
at ingestion with their lengths, and the run trains on the rest with every process of the run (the
driver, Ray, the rollout worker and the policy rank) under the stated bound of 3 GiB resident."""

import json
import threading
from pathlib import Path

import psutil
import pytest

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_rejects
from evr1.data.synth import make_synthetic

ROOT = Path(__file__).resolve().parents[2]
BOUND = 3 << 30


class _PeakRss:
    """The largest resident size any process of this tree reached, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak, self.name = 0, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            for p in [me, *me.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss
                    if rss > self.peak:
                        self.peak, self.name = rss, p.name()
                except psutil.Error:
                    pass

    def __enter__(self) -> "_PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
def test_training_with_over_long_records_stays_under_the_memory_bound(tmp_path):
    rep = make_synthetic(tmp_path / "synth", 6, seed=3, heldout=2, image_fraction=0.0)
    lines = Path(rep.train_path).read_text().splitlines()
    long_problems = {"ten-megabytes": "x" * 10_000_000, "twenty-thousand": " ".join(f"w{i}" for i in range(4_000))}
    for pid, problem in long_problems.items():
        lines.append(json.dumps({"problem_id": pid, "problem": problem, "answer": "4", "problem_type": "numerical",
                                 "data_type": "text"}))
    Path(rep.train_path).write_text("\n".join(lines) + "\n")
    cfg = load_config(ROOT / "conf/tiny.yaml", [
        f"run.root={tmp_path}", "run.name=long", "tracking.enabled=false", "cache.workers=0",
        f'data={{"train_files": ["{rep.train_path}"], "data_root": "{tmp_path / "synth"}"}}',
        "trainer.warmup_sft_steps=0", "trainer.steps=1", "trainer.prompts_per_step=2", "rollout.n=2",
        "trainer.world_size=1", "rollout.max_new_tokens=4", "trainer.save_every=0"])
    with _PeakRss() as peak:
        samples = pipeline.stage_ingest(cfg)
        rejects = {r["record_id"]: r["reason"] for r in read_rejects(samples.extra["rejects_uri"])}
        model = pipeline.stage_model(cfg)
        frames = pipeline.stage_cache(cfg, samples, model)
        result = pipeline.stage_train(cfg, samples, frames, model)
    assert result.version == 1
    assert "at least" in rejects["ten-megabytes"] and "10,000,0" in rejects["ten-megabytes"]
    assert "tokens" in rejects["twenty-thousand"] and "over data.max_prompt_tokens" in rejects["twenty-thousand"]
    print(f"peak RSS {peak.peak / 2**20:.0f} MiB ({peak.name})")
    assert peak.peak < BOUND, f"{peak.name} reached {peak.peak / 2**20:.0f} MiB"

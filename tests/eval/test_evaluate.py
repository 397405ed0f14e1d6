"""evaluate(): the run's prompt template reaches the eval prompts, the in-process HF engine runs end to
end, and any other engine is built in a Ray actor, never in this process.

Items are text-only numerical questions so no frames are needed; the model is a tiny random-weight
Qwen2.5-VL built offline.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import ray

from evr1 import prompts
from evr1.config import Config
from evr1.engines import EngineBase, Generation
from evr1.eval import get_benchmark
from evr1.eval.evaluate import evaluate
from evr1.models import make_tiny

CANARY = "ZEBRA-CANARY-7731"
ITEMS = [{"id": f"t{i}", "problem": f"What is {i} + 2?", "problem_type": "numerical", "answer": str(i + 2)}
         for i in range(3)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("eval_model") / "m", seed=1)


def config(tmp_path, **sections) -> Config:
    base = {"run": {"root": str(tmp_path), "name": "t"}, "data": {"synth": {}},
            "model": {"tiny": {"family": "qwen2_5_vl"}},
            "eval": {"max_new_tokens": 4, "batch_size": 2, "concurrency": 2, "timeout_s": 120}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return Config(**base)


class RecordingEngine(EngineBase):
    """Keeps every prompt text it is given and answers each with the right answer for item t0 (2)."""

    def __init__(self):
        self.texts: list[str] = []

    def generate(self, prompts, params):
        self.texts += [p.text for p in prompts]
        return [[Generation(token_ids=[], text="<answer>2</answer>", finish_reason="stop")] for _ in prompts]


def test_the_runs_prompt_template_is_used_for_eval(tmp_path, model_dir):
    template = tmp_path / "custom.jinja"
    template.write_text(CANARY + " answers: {{ problem }}\nPut the number in <answer></answer>.")
    bench = get_benchmark("heldout")
    engine = RecordingEngine()
    summary = evaluate(config(tmp_path, rollout={"template": str(template)}), bench, ITEMS, model_dir=model_dir,
                       frames_uri=None, out_dir=tmp_path / "out", engine=engine)
    assert len(engine.texts) == 3 and all(CANARY in t for t in engine.texts)
    # The same text training renders for the item (evr1.train.prompt_source calls this renderer).
    for item in ITEMS:
        assert prompts.render(item, template=str(template)) in "\n".join(engine.texts)
    assert summary.scored == 3 and summary.score == pytest.approx(1 / 3)  # only t0's answer is 2

    default = RecordingEngine()
    evaluate(config(tmp_path), bench, ITEMS, model_dir=model_dir, frames_uri=None, out_dir=tmp_path / "out2",
             engine=default)
    assert len(default.texts) == 3 and not any(CANARY in t for t in default.texts)


def test_in_process_hf_engine_end_to_end(tmp_path, model_dir):
    cfg = config(tmp_path, trainer={"device": "cpu"})
    summary = evaluate(cfg, get_benchmark("heldout"), ITEMS, model_dir=model_dir, frames_uri=None,
                       out_dir=tmp_path / "out")
    assert summary.items == 3 and summary.failed == 0 and summary.scored == 3
    folder = tmp_path / "out" / "heldout"
    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == ["t0", "t1", "t2"] and all("output" in r for r in lines)
    assert json.loads((folder / "summary.json").read_text())["scored"] == 3


def test_other_engines_are_built_in_a_ray_actor(tmp_path, model_dir):
    # Built in this process, the vllm engine would fail here. Built in the engine's Ray actor, its
    # constructor fails there and the error comes back through Ray before any item runs: in the main
    # venv because there is no vLLM, in .venv-vllm because the tiny model's head_dim (16) is below what
    # vLLM's CPU attention supports. Each environment checks the cause it has.
    cfg = config(tmp_path, rollout={"engine": "vllm"}, orchestration={"ray_num_cpus": 2, "ray_object_store_mb": 128})
    cause = "vllm" if importlib.util.find_spec("vllm") is None else "head"
    with pytest.raises(ray.exceptions.RayError, match=cause):
        evaluate(cfg, get_benchmark("heldout"), ITEMS, model_dir=model_dir, frames_uri=None, out_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "heldout" / "results.jsonl").exists()  # no item ran, none was failed


def test_open_ended_items_wait_for_the_judge_and_the_judge_pass_decides_them(tmp_path, model_dir):
    """VideoReasonBench items over synthetic videos: rules cannot decide a wrong free-text answer, so the
    summary says how many await the judge; with the judge on (a tiny text-only LLM) none are left."""
    from tests.synthetic_benchmark import videomme_on_synthetic

    from evr1.models.tiny import make_tiny_text

    ann, data = videomme_on_synthetic(tmp_path, 3)
    records = [{**r, "problem_type": "open-ended", "options": [], "solution": "<answer>a red circle</answer>"}
               for r in json.loads(ann.read_text())]
    bench = get_benchmark("videoreasonbench")
    items = [bench.item(r, i) for i, r in enumerate(records)]

    class Free(EngineBase):
        def generate(self, prompts, params):
            return [[Generation(token_ids=[], text="Final Answer: a blue square", finish_reason="stop")] for _ in prompts]

    roots = {"video_roots": {"videoreasonbench": str(data / "Video-MME")}}
    cfg = config(tmp_path, eval=roots)
    off = evaluate(cfg, bench, items, model_dir=model_dir, frames_uri=None, out_dir=tmp_path / "off", engine=Free())
    assert off.parts["judge/awaiting"] == 3.0 and off.score == 0.0 and off.scored == 3

    judge = make_tiny_text(tmp_path / "judge")
    cfg = config(tmp_path, eval={**roots, "judge": {"enabled": True, "model_path": str(judge), "max_new_tokens": 4}})
    on = evaluate(cfg, bench, items, model_dir=model_dir, frames_uri=None, out_dir=tmp_path / "on", engine=Free())
    assert "judge/awaiting" not in on.parts  # every open-ended item has a verdict now
    assert on.parts["judge/judged"] == 3.0 and on.scored == 3


def test_a_suite_runs_through_one_engine_with_the_per_benchmark_results(tmp_path, model_dir, monkeypatch):
    """Three benchmarks (text, video multiple-choice, video open-ended) on the in-process HF engine:
    `evaluate_suite` builds one engine where per-benchmark runs build three, and every item's output
    and score are the same. Batch size 1, so each item is generated alone in both runs."""
    from tests.synthetic_benchmark import videomme_on_synthetic

    import evr1.eval.evaluate as ev

    built: list[str] = []
    real = ev.make_engine

    def counting(name, **kwargs):  # the real engine, counted
        built.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(ev, "make_engine", counting)
    ann, data = videomme_on_synthetic(tmp_path, 3)
    records = json.loads(ann.read_text())
    mc, free = get_benchmark("videomme"), get_benchmark("videoreasonbench")
    open_ended = [{**r, "problem_type": "open-ended", "options": [], "solution": "<answer>a red circle</answer>"}
                  for r in records]
    suite = [(get_benchmark("heldout"), ITEMS, None), (mc, [mc.item(r, i) for i, r in enumerate(records)], None),
             (free, [free.item(r, i) for i, r in enumerate(open_ended)], None)]
    settings = {"batch_size": 1, "max_new_tokens": 6, "video_roots": {"videoreasonbench": str(data / "Video-MME")},
                "data_dir": str(data)}
    cfg = config(tmp_path, trainer={"device": "cpu"}, eval=settings)

    together = ev.evaluate_suite(cfg, suite, model_dir=model_dir, out_dir=tmp_path / "suite")
    assert built == ["hf"]
    apart = {bench.name: ev.evaluate(cfg, bench, items, model_dir=model_dir, frames_uri=f, out_dir=tmp_path / "apart")
             for bench, items, f in suite}
    assert len(built) == 1 + len(suite)

    def rows(folder):
        lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        return {r["id"]: (r["output"], r["score"]) for r in lines}

    for bench, items, _ in suite:
        assert together[bench.name].items == len(items) and together[bench.name].failed == 0
        assert rows(tmp_path / "suite" / bench.name) == rows(tmp_path / "apart" / bench.name)
        assert together[bench.name].score == apart[bench.name].score
        for name in ("summary.json", "table.md"):
            assert (tmp_path / "suite" / bench.name / name).exists()

    # Two data-parallel replicas (eval.engines=2, an EnginePool) fed from the same queue: the same results.
    del built[:]
    ev.evaluate_suite(config(tmp_path, trainer={"device": "cpu"}, eval={**settings, "engines": 2}), suite,
                      model_dir=model_dir, out_dir=tmp_path / "pooled")
    assert built == ["hf", "hf"]
    assert all(rows(tmp_path / "pooled" / b.name) == rows(tmp_path / "suite" / b.name) for b, _, _ in suite)

    # Resumption is per benchmark, by item id: a second suite run generates nothing new.
    again = ev.evaluate_suite(cfg, suite, model_dir=model_dir, out_dir=tmp_path / "suite")
    assert {n: s.score for n, s in again.items()} == {n: s.score for n, s in together.items()}
    assert all(len((tmp_path / "suite" / b.name / "results.jsonl").read_text().splitlines()) == len(i)
               for b, i, _ in suite)

"""An engine in every policy rank (rollout.placement: colocated) against one rollout worker beside
them (separate), on the real Ray/FSDP2 trainer with a tiny Qwen2.5-VL and HF engines on the CPU:

- the same samples, rewards and training at the same seeds (each prompt's seed comes from the data);
- after a sync every engine holds exactly the policy's weights, and the bytes moved are the model's
  size in the engine's dtype, once;
- a colocated engine goes through wake → load → reset → wake → generate → reset → sleep, in order.
"""

from pathlib import Path

import pytest
import torch

from evr1 import pipeline
from evr1.cluster.connect import ensure_ray
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.train.trainer import train
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]
LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm", "reward/overall",
             "response/length_mean")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("colocated")
    base = [f"run.root={tmp}", "run.name=colocated", "tracking.enabled=false", "cache.workers=0",
            *letter_density_overrides(letter_density_data(tmp)), "model.tiny.family=qwen2_5_vl",
            "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=4", "rollout.n=2", "trainer.steps=2",
            "trainer.world_size=2", "rollout.max_new_tokens=8", "trainer.save_every=0", "trainer.lr=0.01",
            "trainer.log_rollouts_every=1", "trainer.rollout_table_rows=100"]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    runs = {}

    def run(placement: str, engines: int = 1, seeding: str = "per_prompt", again: bool = False):
        key = (placement, engines, seeding, again)
        if key not in runs:
            c = load_config(ROOT / "conf/tiny.yaml", [*base, f"rollout.placement={placement}",
                                                      f"rollout.engines={engines}", f"rollout.seeding={seeding}"])
            tables: list[tuple[str, list[dict]]] = []
            result = train(c, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                           model_dir=Path(model.uri), out_dir=tmp / "-".join(map(str, key)),
                           log_table=lambda name, rows: tables.append((name, rows)))
            runs[key] = (result, tables)
        return runs[key]
    return run, cfg, Path(model.uri), samples, frames


def _responses(tables):
    return [(r["sample_id"], r["response"], r["reward_overall"], r["advantage"]) for _, rows in tables for r in rows]


@pytest.mark.slow
def test_colocated_and_separate_generate_and_train_alike(setup):
    run, _, model_dir, _, _ = setup
    colocated, col_tables = run("colocated")
    separate, sep_tables = run("separate")
    assert _responses(col_tables) and _responses(col_tables) == _responses(sep_tables)
    for got, want in zip(colocated.history, separate.history, strict=True):
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
        assert got["perf/rollout_engines"] == 2.0 and want["perf/rollout_engines"] == 1.0
        # Both moved the model once, in the engines' dtype (fp32 on the CPU): its size, no copies.
        assert got["perf/sync_bytes"] == want["perf/sync_bytes"] == _model_bytes(model_dir)
        assert want["perf/sync_buckets"] >= 1.0 and got["perf/sync_buckets"] == 0.0


@pytest.mark.slow
def test_two_separate_workers_receive_one_broadcast_and_generate_the_same_samples(setup):
    """rollout.engines 2: the prompts shared out between two workers, each sync one broadcast to both."""
    run, _, model_dir, _, _ = setup
    one, one_tables = run("separate")
    two, two_tables = run("separate", engines=2)
    assert _responses(two_tables) == _responses(one_tables)
    for got, want in zip(two.history, one.history, strict=True):
        assert got["perf/rollout_engines"] == 2.0
        assert got["perf/sync_bytes"] == want["perf/sync_bytes"] == _model_bytes(model_dir)  # into each engine
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def _model_bytes(model_dir: Path) -> float:
    from safetensors import safe_open

    total = 0
    for path in model_dir.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                t = f.get_slice(name)
                total += torch.Size(t.get_shape()).numel() * 4  # fp32 engine
    return float(total)


@pytest.mark.slow
@pytest.mark.slow
def test_engine_seeding_repeats_on_one_placement_and_is_not_per_prompt(setup):
    """rollout.seeding: engine — the engines' own generators, one stream per engine: the same run on
    the same placement samples the same (a generator seeded per engine), and its samples are not the
    per-prompt seeds' (the prompts are the same: the data cursor does not depend on seeding)."""
    run = setup[0]
    first, first_tables = run("separate", engines=2, seeding="engine")
    second, second_tables = run("separate", engines=2, seeding="engine", again=True)
    per_prompt, per_prompt_tables = run("separate", engines=2)
    assert _responses(first_tables) == _responses(second_tables)
    assert [h["actor/pg_loss"] for h in first.history] == [h["actor/pg_loss"] for h in second.history]
    ours, theirs = _responses(first_tables), _responses(per_prompt_tables)
    assert [r[0] for r in ours] == [r[0] for r in theirs]  # the same prompts, in the same order
    assert [r[1] for r in ours] != [r[1] for r in theirs]  # drawn from other streams
    # Colocated: each rank's engine keeps a stream of its own beside the rank's generator.
    col, col_tables = run("colocated", seeding="engine")
    assert col.steps == 2 and [r[0] for r in _responses(col_tables)] == [r[0] for r in ours]
    assert [r[1] for r in _responses(col_tables)] != [r[1] for r in _responses(run("colocated")[1])]


def test_engines_hold_the_policy_after_a_sync_and_keep_their_lifecycle(setup):
    """The trained checkpoint loaded into the ranks, then one sync: every engine's weights equal the
    policy's full state dict; the engines went through the lifecycle in order."""
    import ray

    from evr1.train.actor_group import ActorGroup
    from evr1.train.protocol import ReaderSpec

    run, cfg, model_dir, samples, _ = setup
    trained, _ = run("colocated")
    from evr1.models import load_adapter

    c = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"placement": "colocated"})})
    ensure_ray(None, num_cpus=2, object_store_mb=256)
    factor = load_adapter(model_dir).family.factor
    spec = ReaderSpec(None, c.cache.frame_params(factor), "decode-only", str(c.data.data_root), None, False, None)
    cluster = ActorGroup(c, model_dir, spec)
    try:
        cluster.all("load", str(trained.checkpoint))
        report = cluster.sync_weights(1)
        assert report["bytes"] == _model_bytes(model_dir)
        policy = cluster.all("full_state_dict")[0]
        for rank in cluster.ranks:
            engine = ray.get(rank.rollout.remote("engine_params"))
            assert set(engine) == set(policy)
            for name, value in policy.items():
                assert torch.equal(engine[name], value), name
        rows = read_samples(samples.uri, split="train")[:2]
        answers = cluster.rollout.prepare(rows)
        handles = [a["handle"] for a in answers if "handle" in a]
        cluster.rollout.generate(handles, {"n": 1, "max_new_tokens": 2, "temperature": 1.0, "seeds": [1] * len(handles)})
        cluster.rollout.release(handles)
        cluster.rollout.training()
        cluster.sync_weights(2)
        events = ray.get(cluster.ranks[0].engine_events.remote())
        sync = ["wake:weights", "load", "reset", "wake:kv_cache"]
        assert events == [*sync, "generate", "reset", "sleep:2", *sync], events
    finally:
        cluster.shutdown()


def test_the_run_refuses_a_cluster_too_small_before_any_actor_starts(setup, tmp_path):
    """trainer.device cuda on a Ray cluster without GPUs: the actor group fails at once, in one line,
    and no policy rank was created (nothing waits for a GPU that will never come)."""
    import ray

    from evr1.train.actor_group import ActorGroup
    from evr1.train.placement import PlacementError

    _, cfg, model_dir, _, _ = setup
    c = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"device": "cuda"})})
    ensure_ray(None, num_cpus=2, object_store_mb=256)
    def policy_actors() -> int:  # from the GCS's actor table (this Ray runs without a dashboard)
        return sum(a["ActorClassName"].endswith("PolicyWorker") for a in ray._private.state.actors().values())

    before = policy_actors()
    with pytest.raises(PlacementError, match=r"needs 2 GPUs \(2 policy ranks.*the cluster has 0"):
        ActorGroup(c, model_dir, None)
    assert policy_actors() == before

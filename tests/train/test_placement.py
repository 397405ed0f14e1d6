"""The Ray resource plan: bundle counts per layout, the one-line refusals of `check` (totals and nodes),
the strategy, `actor_options`, and one real local Ray with 8 logical GPUs (no GPU needed): 8 colocated
ranks get 8 distinct GPU ids from their bundles, and a separate 8 + 1 layout fails at once."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from evr1.train.placement import (PlacementError, ResourcePlan, actor_options, check, choose_strategy,
                                  fit_to_cluster, make_placement_group, plan_resources)


def _cfg(world_size: int, *, device: str = "cuda", placement: str = "auto", sp: int = 1) -> SimpleNamespace:
    """The two config sections `plan_resources` reads (the real `RolloutConfig` resolves auto)."""
    from evr1.config.train import RolloutConfig

    return SimpleNamespace(trainer=SimpleNamespace(world_size=world_size, sequence_parallel=sp, device=device),
                           rollout=RolloutConfig(placement=placement))


def _nodes(*gpus: int, dead: int | None = None) -> list[dict]:
    """`ray.nodes()`-shaped entries, one per GPU count (and one dead node, which must not count)."""
    out = [{"NodeID": f"{i:02d}" * 14, "Alive": True, "NodeManagerAddress": f"10.0.0.{i + 1}",
            "Resources": {"CPU": 32.0, "GPU": float(g)}} for i, g in enumerate(gpus)]
    if dead is not None:
        out.append({"NodeID": "ff" * 14, "Alive": False, "NodeManagerAddress": "10.0.0.99",
                    "Resources": {"CPU": 32.0, "GPU": float(dead)}})
    return out


@pytest.mark.parametrize("n", [1, 2, 8])
def test_plans_count_one_gpu_per_rank_plus_the_separate_rollout_worker(n):
    co = plan_resources(_cfg(n))  # auto on cuda: colocated
    assert (co.mode, co.accelerator, co.gpus, len(co.bundles), co.rollout_bundles) == ("colocated", "GPU", n, n, ())
    assert co.train_bundles == tuple({"GPU": 1} for _ in range(n)) and co.rollout_workers == 0
    sep = plan_resources(_cfg(n, placement="separate"))
    assert (sep.mode, sep.gpus, len(sep.train_bundles), sep.rollout_bundles) == ("separate", n + 1, n, ({"GPU": 1},))
    assert sep.bundles == sep.train_bundles + sep.rollout_bundles and sep.rollout_workers == 1
    assert co.describe()[0] == f"colocated: {n} bundle{'s' if n > 1 else ''} {{GPU: 1}}: rank i and its engine on " \
                               f"bundle i = {n} GPU{'s' if n > 1 else ''}"
    assert sep.describe()[0].startswith(f"separate: {n} train bundle{'s' if n > 1 else ''} + 1 rollout bundle "
                                        f"{{GPU: 1}} = {n + 1} GPUs")


def test_cpu_plan_has_no_bundles_and_actors_take_no_cpu():
    plan = plan_resources(_cfg(2, device="cpu"))  # auto on cpu: separate, as today's CPU runs
    assert (plan.mode, plan.accelerator, plan.bundles, plan.gpus, plan.rollout_workers) == ("separate", None, (), 0, 1)
    check(plan, {"CPU": 2.0})  # nothing asked of the cluster: a 2-CPU local Ray holds it
    assert make_placement_group(plan) is None  # no Ray call at all
    for role, i in (("rank", 0), ("rank", 1), ("rollout", 0)):
        assert actor_options(plan, None, role, i) == {"num_cpus": 0, "num_gpus": 0}
    assert plan.describe() == ["separate on CPU: 2 policy ranks + 1 rollout worker, no placement group "
                               "(actors take num_cpus=0, num_gpus=0)"]
    assert plan_resources(_cfg(2, device="cpu", placement="colocated")).bundles == ()


def test_check_refuses_nine_gpus_on_eight_with_one_line_and_a_fix():
    sep = plan_resources(_cfg(8, placement="separate"))
    with pytest.raises(PlacementError) as err:
        check(sep, {"CPU": 64.0, "GPU": 8.0})
    assert str(err.value) == ("needs 9 GPUs (8 policy ranks + 1 rollout worker, rollout.placement=separate), "
                              "the cluster has 8: set rollout.placement=colocated or trainer.world_size=7")
    check(plan_resources(_cfg(8)), {"CPU": 64.0, "GPU": 8.0})  # colocated 8 on 8
    check(plan_resources(_cfg(8)), {"CPU": 64.0, "GPU": 8.0}, _nodes(8))
    with pytest.raises(PlacementError, match=r"^needs 16 GPUs \(16 policy ranks, each with its rollout engine, "
                                             r"rollout.placement=colocated\), the cluster has 8: set trainer.world_size=8$"):
        check(plan_resources(_cfg(16)), {"GPU": 8.0})
    with pytest.raises(PlacementError, match="the cluster has 0: set orchestration.ray_address=.* or trainer.device=cpu"):
        check(plan_resources(_cfg(2)), {"CPU": 2.0})
    with pytest.raises(PlacementError, match=r"trainer.world_size=4 \(a multiple of trainer.sequence_parallel=4\)"):
        check(plan_resources(_cfg(8, sp=4)), {"GPU": 6.0})


def test_nodes_decide_the_strategy_and_keep_sequence_parallel_groups_whole():
    two_by_four = _nodes(4, 4, dead=8)  # the dead node's 8 GPUs are not there
    total = {"GPU": 8.0}
    co8 = plan_resources(_cfg(8))
    assert fit_to_cluster(co8, total, two_by_four).strategy == "PACK"  # spans both nodes
    assert fit_to_cluster(co8, total, _nodes(8)).strategy == "STRICT_PACK"  # one node holds it all
    assert choose_strategy(co8, None) == "PACK" and fit_to_cluster(co8, total).strategy == "PACK"
    assert fit_to_cluster(plan_resources(_cfg(8, sp=4)), total, two_by_four).strategy == "PACK"  # a group per node
    with pytest.raises(PlacementError, match="^sequence-parallel groups of 8 ranks must each sit on one node, the "
                                             "largest node has 4 GPUs: set trainer.sequence_parallel to at most 4"):
        fit_to_cluster(plan_resources(_cfg(8, sp=8)), total, two_by_four)
    with pytest.raises(PlacementError, match=r"not a multiple of 4 could split a group \(10.0.0.2 has 6\)"):
        fit_to_cluster(plan_resources(_cfg(12, sp=4)), {"GPU": 14.0}, _nodes(8, 6))
    # the same nodes, a run that fits on the 8-GPU one: nothing can be split
    assert fit_to_cluster(plan_resources(_cfg(8, sp=4)), {"GPU": 14.0}, _nodes(6, 8)).strategy == "STRICT_PACK"
    with pytest.raises(PlacementError, match="its alive nodes have 8: set trainer.world_size=8$"):  # totals from a stale resources dict
        check(plan_resources(_cfg(12)), {"GPU": 16.0}, two_by_four)
    with pytest.raises(PlacementError, match="on one node .*STRICT_PACK.*largest node has 4"):
        check(ResourcePlan("colocated", "GPU", ({"GPU": 1},) * 8, (), strategy="STRICT_PACK", world_size=8),
              total, two_by_four)
    check(co8, total, [{"GPU": 4.0}, {"GPU": 4.0}])  # plain resource dicts work too


def test_actor_options_point_ranks_and_the_rollout_worker_at_their_bundles():
    sep = plan_resources(_cfg(8, placement="separate"))
    pg = object()  # the strategy only holds it
    rank3, rollout = actor_options(sep, pg, "rank", 3), actor_options(sep, pg, "rollout", 0)
    assert (rank3["num_gpus"], rank3["num_cpus"], rollout["num_gpus"]) == (1, 0, 1)
    assert rank3["scheduling_strategy"].placement_group_bundle_index == 3
    assert rollout["scheduling_strategy"].placement_group_bundle_index == 8  # after the 8 train bundles
    assert rank3["scheduling_strategy"].placement_group_capture_child_tasks is False
    assert actor_options(sep, None, "rank", 0) == {"num_cpus": 0, "num_gpus": 1}
    with pytest.raises(ValueError, match="colocated plan has no rollout worker"):
        actor_options(plan_resources(_cfg(8)), pg, "rollout", 0)
    with pytest.raises(ValueError, match="out of range"):
        actor_options(sep, pg, "rank", 8)


@pytest.fixture(scope="module")
def ray_with_eight_gpus():
    """One local Ray with 8 logical GPUs (no GPU needed) for this module's two tests. A Ray another
    test left running has other resources: it is shut down first (later tests start their own again,
    as they do after a shutdown), and this one is shut down after."""
    ray = pytest.importorskip("ray")
    from evr1.cluster.local import start_local

    if ray.is_initialized():
        ray.shutdown()
    start_local(num_cpus=2, num_gpus=8, include_dashboard=False, object_store_memory=128 << 20,
                logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()


def test_real_ray_places_eight_colocated_ranks_on_eight_gpus_and_refuses_nine(ray_with_eight_gpus):
    ray = ray_with_eight_gpus
    from ray.util.placement_group import remove_placement_group

    plan = fit_to_cluster(plan_resources(_cfg(8)), ray.cluster_resources(), ray.nodes())
    assert plan.strategy == "STRICT_PACK"
    pg = make_placement_group(plan, timeout_s=60)

    class Rank:
        def gpu(self) -> list:
            return ray.get_gpu_ids()

    try:
        ranks = [ray.remote(Rank).options(**actor_options(plan, pg, "rank", i)).remote() for i in range(8)]
        ids = ray.get([r.gpu.remote() for r in ranks], timeout=120)
        assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == 8, ids
        for r in ranks:
            ray.kill(r)
    finally:
        remove_placement_group(pg)

    separate = plan_resources(_cfg(8, placement="separate"))
    start = time.monotonic()
    with pytest.raises(PlacementError, match="needs 9 GPUs .* the cluster has 8: set rollout.placement=colocated"):
        make_placement_group(separate, timeout_s=60)  # checked before any group is asked for
    with pytest.raises(PlacementError, match="needs 9 GPUs"):
        check(separate, ray.cluster_resources(), ray.nodes())
    assert time.monotonic() - start < 10  # at once, not after the timeout


def test_a_group_that_never_becomes_ready_is_removed_and_named(ray_with_eight_gpus):
    """Another holder of the GPUs (here a group of our own): the plan fits the cluster, so `check`
    passes, but its group cannot be ready; after the timeout it is removed and the error says why."""
    ray = ray_with_eight_gpus
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    holder = placement_group([{"GPU": 1}] * 4)
    ray.get(holder.ready(), timeout=60)
    try:
        before = set(placement_group_table())
        with pytest.raises(PlacementError, match=r"8 bundles \{GPU: 1\} \(colocated, PACK\) not ready after 2 s; "
                                                 r"the cluster has GPU 8, CPU 2 \(GPU 4, CPU 2 free\)"):
            make_placement_group(plan_resources(_cfg(8)), timeout_s=2)
        new = set(placement_group_table()) - before
        assert all(placement_group_table()[i]["state"] == "REMOVED" for i in new), new
    finally:
        remove_placement_group(holder)

"""The Ray resource plan of a training run, checked against the cluster before any actor starts.

Why: Ray queues an actor whose resources no node has; it does not fail. An 8-rank run with a separate
rollout worker asks for 9 GPUs, and on an 8-GPU cluster the 9th actor waits forever. Here the run's
GPUs are a formula of the config (`plan_resources`), compared with `ray.cluster_resources()` and,
per node, with `ray.nodes()` (`check`) before anything is created. A shortfall ends the run at once
with one line that names the numbers and a fix. The placement group that reserves the GPUs is waited
for with a timeout (`make_placement_group`), so a busy cluster also ends in an error, not a hang.

Layouts (`rollout.placement`, resolved by `RolloutConfig.placement_for(trainer.device)`):

- colocated: one bundle `{GPU: 1}` per policy rank. Rank i runs on bundle i and holds its rollout
  engine in the same process, on the same GPU. N ranks need N GPUs.
- separate: the same N train bundles, then one rollout bundle `{GPU: 1}` (bundle index N) for the
  rollout worker. N ranks need N + 1 GPUs.
- CPU (`trainer.device: cpu`): no bundles and no placement group. The actors take `num_cpus=0` and
  `num_gpus=0`, as they did before this module existed, so a 2-CPU local Ray still holds 2 ranks and a
  rollout worker.

Bundles hold no CPU because the actors ask for `num_cpus=0`: their threads share the node's cores,
and a CPU in every bundle would make an 8-GPU node with fewer free CPUs refuse the group.

Strategy: `plan_resources` cannot see the cluster, so it sets PACK. `fit_to_cluster(plan, resources,
nodes)` runs `check` and then decides (`choose_strategy`): STRICT_PACK when one node can hold every
bundle (the whole run on one node, or a clear failure), PACK otherwise (the fewest nodes). A
sequence-parallel group (ranks [0..k-1], [k..2k-1], ...) must share a node, because its all-to-all
runs in every attention layer. One placement group cannot say "these bundles together", so when the
plan spans nodes, `check` requires every GPU node to hold a multiple of k GPUs: PACK fills nodes
bundle by bundle, so the groups fall on node boundaries. Ray does not promise that order, so
`make_placement_group` also reads where the bundles landed and refuses a group split over nodes.

`reserve(cfg)` does all of this for a connected Ray and returns the plan and its placement group.
`actor_options` turns them into the `.options(...)` of each actor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

Mode = Literal["colocated", "separate"]
STRATEGIES = ("STRICT_PACK", "PACK")


class PlacementError(RuntimeError):
    """The cluster cannot hold the run's actors. The message is one line with the numbers and a fix."""


@dataclass(frozen=True)
class ResourcePlan:
    """What a run asks of Ray: one bundle per policy rank, then the rollout worker's (separate mode).

    `train_bundles[i]` is rank i's bundle. `rollout_bundles` is empty when colocated (every engine
    lives inside its rank) and on CPU (no bundles at all). `group_size` ranks in a row
    (`trainer.sequence_parallel`) must sit on one node.
    """

    mode: Mode
    accelerator: str | None  # "GPU", or None on a CPU run
    train_bundles: tuple[dict, ...]
    rollout_bundles: tuple[dict, ...]
    strategy: str = "PACK"
    group_size: int = 1
    world_size: int = 1
    rollout_workers: int = 0  # actors of their own for generation: rollout.engines separate, 0 colocated

    def __post_init__(self) -> None:
        if self.mode not in ("colocated", "separate"):
            raise ValueError(f"placement: mode must be colocated or separate, not {self.mode!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"placement: strategy must be one of {STRATEGIES}, not {self.strategy!r}")
        if self.group_size < 1 or self.world_size % self.group_size:
            raise ValueError(f"placement: sequence-parallel groups of {self.group_size} must divide "
                             f"world_size {self.world_size}")
        if self.train_bundles and len(self.train_bundles) != self.world_size:
            raise ValueError(f"placement: {len(self.train_bundles)} train bundles for {self.world_size} ranks")

    @property
    def bundles(self) -> tuple[dict, ...]:
        """Every bundle, in placement-group order: the ranks' (index = rank), then the rollout worker's."""
        return self.train_bundles + self.rollout_bundles

    @property
    def gpus(self) -> int:
        """GPUs the whole plan takes (0 on a CPU run)."""
        return int(sum(b.get("GPU", 0) for b in self.bundles))

    @property
    def groups(self) -> list[range]:
        """The sequence-parallel groups, as ranges of ranks (bundle indices)."""
        k = self.group_size
        return [range(g, g + k) for g in range(0, self.world_size, k)]

    def describe(self) -> list[str]:
        """Human lines: the layout, the sequence-parallel groups, the strategy."""
        n = self.world_size
        ranks = _count(n, "policy rank")
        if self.accelerator is None:
            who = f"{ranks} + {_count(self.rollout_workers, 'rollout worker')}" if self.mode == "separate" \
                else f"{ranks}, each with its rollout engine"
            return [f"{self.mode} on CPU: {who}, no placement group (actors take num_cpus=0, num_gpus=0)"]
        unit = _fmt(self.train_bundles[0]) if self.train_bundles else "{}"
        if self.mode == "colocated":
            lines = [(f"colocated: {_count(n, 'bundle')} {unit}: rank i and its engine on bundle i "
                      f"= {_count(self.gpus, self.accelerator)}")]
        else:
            lines = [(f"separate: {_count(n, 'train bundle')} + {_count(len(self.rollout_bundles), 'rollout bundle')} "
                      f"{unit} = {_count(self.gpus, self.accelerator)}: rank i on bundle i, the rollout worker on bundle {n}")]
        if self.group_size > 1:
            shown = ", ".join(f"{g.start}-{g.stop - 1}" for g in self.groups[:4]) + (", ..." if len(self.groups) > 4 else "")
            lines.append(f"sequence-parallel groups of {self.group_size} ranks ({shown}): each on one node")
        lines.append(f"placement group strategy: {self.strategy} (STRICT_PACK when one node holds every bundle, "
                     "else PACK; set against the cluster before any actor starts)")
        return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _fmt(resources: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in resources.items()) + "}"


def plan_resources(cfg: Any, *, world_size: int | None = None, mode: Mode | None = None) -> ResourcePlan:
    """The run's `ResourcePlan` from its config (no Ray needed).

    `world_size` and `mode` override `trainer.world_size` and the resolved `rollout.placement` (what
    `evr1 plan --world-size/--colocated` asks about). The strategy is PACK until `fit_to_cluster` sees
    the nodes.
    """
    t = cfg.trainer
    n = world_size or t.world_size
    mode = mode or cfg.rollout.placement_for(t.device)
    workers = cfg.rollout.engines if mode == "separate" else 0
    if t.device == "cuda":
        train = tuple({"GPU": 1} for _ in range(n))
        rollout = tuple({"GPU": 1} for _ in range(workers))
        accelerator = "GPU"
    else:
        train, rollout, accelerator = (), (), None
    return ResourcePlan(mode=mode, accelerator=accelerator, train_bundles=train, rollout_bundles=rollout,
                        strategy="PACK", group_size=t.sequence_parallel, world_size=n, rollout_workers=workers)


def _nodes(nodes: list[dict]) -> list[tuple[str, dict]]:
    """(name, resources) of each alive node. Takes `ray.nodes()` entries, or plain resource dicts."""
    out = []
    for i, node in enumerate(nodes):
        if "Resources" in node:
            if not node.get("Alive", True):
                continue
            name = node.get("NodeManagerAddress") or str(node.get("NodeID", ""))[:12] or f"node {i}"
            out.append((name, node["Resources"]))
        else:
            out.append((f"node {i}", node))
    return out


def _largest_world(have: int, k: int) -> int:
    """The largest world size that `have` GPUs hold with groups of k: a multiple of k, at most `have`."""
    return max(have, 0) // k * k


def _shortfall(plan: ResourcePlan, have: int, where: str = "the cluster has") -> str:
    """One line: what the plan needs, what there is, and the settings that would fit."""
    acc, n, k = plan.accelerator, plan.world_size, plan.group_size
    if plan.mode == "separate":
        what = f"{_count(n, 'policy rank')} + {_count(plan.rollout_workers, 'rollout worker')}"
    else:
        what = f"{_count(n, 'policy rank')}, each with its rollout engine"
    fixes = []
    if plan.mode == "separate" and have >= n:
        fixes.append("rollout.placement=colocated")
    w = _largest_world(have - len(plan.rollout_bundles), k)
    if w >= 1:
        fixes.append(f"trainer.world_size={w}" + (f" (a multiple of trainer.sequence_parallel={k})" if k > 1 else ""))
    elif plan.mode == "separate" and _largest_world(have, k) >= 1:
        fixes.append(f"rollout.placement=colocated and trainer.world_size={_largest_world(have, k)}")
    if not fixes:
        fixes.append(f"orchestration.ray_address=<a cluster with {acc}s> or trainer.device=cpu")
    return (f"needs {_count(plan.gpus, acc)} ({what}, rollout.placement={plan.mode}), {where} {have}: "
            f"set {' or '.join(fixes)}")


def check(plan: ResourcePlan, resources: dict, nodes: list[dict] | None = None) -> None:
    """Raise `PlacementError` at once, with one line, when the cluster can never hold `plan`.

    `resources` is `ray.cluster_resources()`: the total must hold every bundle. `nodes` (optional) is
    `ray.nodes()` (or each alive node's resource dict). With it, the plan must also fit node by node:
    a STRICT_PACK plan needs one node with every GPU. A plan spanning nodes with sequence-parallel
    groups of k needs a node of at least k GPUs and every GPU node to hold a multiple of k GPUs, so
    that no group is split (module docstring); with the total enough, the nodes then hold every
    group. A CPU plan asks nothing and always passes.
    """
    acc = plan.accelerator
    if acc is None or not plan.bundles:
        return
    need = plan.gpus
    have = int(resources.get(acc, 0))
    if have < need:
        raise PlacementError(_shortfall(plan, have))
    if nodes is None:
        return
    alive = [(name, int(res.get(acc, 0))) for name, res in _nodes(nodes)]
    total = sum(g for _, g in alive)
    if total < need:
        raise PlacementError(_shortfall(plan, total, "its alive nodes have"))
    largest = max((g for _, g in alive), default=0)
    if largest >= need:
        return  # one node holds the whole run: no group can be split
    if plan.strategy == "STRICT_PACK":
        raise PlacementError(f"needs {_count(need, acc)} on one node (strategy STRICT_PACK), the largest node has "
                             f"{largest}: use strategy PACK (fit_to_cluster decides it from the nodes)")
    k = plan.group_size
    if k == 1:
        return
    if largest < k:
        raise PlacementError(f"sequence-parallel groups of {k} ranks must each sit on one node, the largest node has "
                             f"{_count(largest, acc)}: set trainer.sequence_parallel to at most {largest} "
                             f"(a divisor of the heads and of trainer.world_size)")
    odd = [(name, g) for name, g in alive if g % k]
    if odd:
        listed = ", ".join(f"{name} has {g}" for name, g in odd)
        raise PlacementError(f"needs {_count(need, acc)} over several nodes with sequence-parallel groups of {k} ranks, "
                             f"and a node whose {acc} count is not a multiple of {k} could split a group ({listed}): "
                             f"use nodes with a multiple of {k} {acc}s or set trainer.sequence_parallel to a divisor "
                             f"of each node's {acc}s")
    # Every GPU node a multiple of k and the nodes' total >= the plan: the nodes hold every group.


def choose_strategy(plan: ResourcePlan, nodes: list[dict] | None) -> str:
    """STRICT_PACK when one alive node holds every bundle, else PACK (also when the nodes are unknown)."""
    if plan.accelerator is None or not plan.bundles or nodes is None:
        return "PACK"
    largest = max((int(res.get(plan.accelerator, 0)) for _, res in _nodes(nodes)), default=0)
    return "STRICT_PACK" if largest >= plan.gpus else "PACK"


def fit_to_cluster(plan: ResourcePlan, resources: dict, nodes: list[dict] | None = None) -> ResourcePlan:
    """`check` the plan against the cluster, then return it with the strategy the nodes call for."""
    plan = replace(plan, strategy=choose_strategy(plan, nodes))
    check(plan, resources, nodes)
    return plan


def _describe_cluster() -> str:
    import ray

    def gpus_cpus(res: dict) -> str:
        return ", ".join(f"{k} {res.get(k, 0):g}" for k in ("GPU", "CPU"))

    return f"the cluster has {gpus_cpus(ray.cluster_resources())} ({gpus_cpus(ray.available_resources())} free)"


def make_placement_group(plan: ResourcePlan, *, timeout_s: float = 60) -> PlacementGroup | None:
    """Reserve the plan's bundles in one placement group (None for a CPU plan, which has none).

    First `check`s the plan against the connected cluster, so a plan that can never fit fails at
    once. Then waits up to `timeout_s` for the group (other jobs may hold the GPUs). On timeout the
    group is removed and a `PlacementError` names the bundles and what the cluster has and has free.
    Last, sequence-parallel groups split over nodes are refused (module docstring).
    """
    if not plan.bundles:
        return None
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, remove_placement_group

    check(plan, ray.cluster_resources(), ray.nodes())
    pg = placement_group([dict(b) for b in plan.bundles], strategy=plan.strategy)
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except GetTimeoutError:
        remove_placement_group(pg)
        raise PlacementError(f"placement group of {_count(len(plan.bundles), 'bundle')} {_fmt(plan.bundles[0])} "
                             f"({plan.mode}, {plan.strategy}) not ready after {timeout_s:g} s; {_describe_cluster()}: "
                             f"other actors or jobs hold the rest (see `ray status`)") from None
    split = _split_groups(plan, pg)
    if split:
        remove_placement_group(pg)
        raise PlacementError(f"Ray placed sequence-parallel group(s) {split} over more than one node (strategy "
                             f"{plan.strategy}): set trainer.sequence_parallel to a divisor of each node's GPUs or "
                             f"free whole nodes")
    return pg


def _split_groups(plan: ResourcePlan, pg: PlacementGroup) -> str:
    """The sequence-parallel groups whose bundles landed on more than one node, as "ranks a-b, ..."."""
    if plan.group_size == 1:
        return ""
    from ray.util.placement_group import placement_group_table

    where = placement_group_table(pg).get("bundles_to_node_id", {})
    split = [g for g in plan.groups if len({where.get(i) for i in g}) > 1]
    return ", ".join(f"ranks {g.start}-{g.stop - 1}" for g in split)


def actor_options(plan: ResourcePlan, pg: PlacementGroup | None, role: str, index: int) -> dict:
    """The `ray.remote(...)` / `.options(...)` keywords of policy rank `index` (`role="rank"`) or
    rollout worker `index` (`role="rollout"`, bundle `world_size + index`, after the train bundles).

    `num_cpus=0` (the bundles hold no CPU), `num_gpus` 1 on a GPU plan and 0 on CPU, and the bundle
    when there is a placement group. Child tasks are not captured: a task a rank starts with the
    default `num_cpus=1` would wait forever for a CPU that the GPU-only bundle does not hold.
    """
    if role == "rank":
        count, bundle = plan.world_size, index
    elif role == "rollout":
        if not plan.rollout_workers:
            raise ValueError("placement: a colocated plan has no rollout worker (each rank holds its engine)")
        count, bundle = plan.rollout_workers, plan.world_size + index
    else:
        raise ValueError(f"placement: role must be 'rank' or 'rollout', not {role!r}")
    if not 0 <= index < count:
        raise ValueError(f"placement: {role} {index} out of range (the plan has {count})")
    options: dict[str, Any] = {"num_cpus": 0, "num_gpus": 1 if plan.accelerator else 0}
    if pg is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=False)
    return options


def reserve(cfg: Any, *, timeout_s: float = 60) -> tuple[ResourcePlan, PlacementGroup | None]:
    """The run's plan fitted to the connected Ray cluster, and its placement group (None on CPU).

    What the actor group calls before it creates a single actor: `plan_resources`, `fit_to_cluster`
    with `ray.cluster_resources()` and `ray.nodes()`, then `make_placement_group`.
    """
    plan = plan_resources(cfg)
    if not plan.bundles:
        return plan, None
    import ray

    plan = fit_to_cluster(plan, ray.cluster_resources(), ray.nodes())
    return plan, make_placement_group(plan, timeout_s=timeout_s)

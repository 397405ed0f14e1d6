"""Where a policy rank's step makes the host wait for the device (issue 33, item 11), counted on the CPU.

A GPU runs what the host queued; every read of a device value (`float(t)`, `.item()`, `.tolist()`, `if t:`,
`t.cpu()`, boolean indexing and `nonzero`, whose output size the host must know) and every copy from
pageable host memory (PyTorch synchronises the stream after it) blocks the host until the device has run
everything queued so far, and the device then idles while the host prepares and queues the next work.
This CPU has no queue, so the waits cost nothing here: the script counts them instead.

One `PolicyWorker` (world size 1, gloo, a tiny Qwen3-VL, video prompts) runs `log_probs` and `step` on
one shard, with the shared prompt prefix and without it. A torch-function mode follows which tensors
live on the device (the parameters, what `_on_device` returns, factories given a `device`, and every
result computed from those) and counts, per micro-batch of each pass:

- `host_waits`: reads of device values (and scalars copied from host memory), by where they happen:
  `step` (the worker's step code and `evr1.rl`: losses, metrics, clipping, the optimizer), `evr1.models`
  (the log-prob passes, batches) or `transformers` (the HF model's forward);
- `waits_by_function`: the same waits (totals over the pass) by the innermost function of their site that
  made them (`modeling_qwen3_vl.py:get_rope_index`);
- `h2d_blocking` / `h2d_async`: host-to-device copies asked for without / with `non_blocking` (which
  `evr1.models.batch.to_device` stages in pinned memory on an accelerator; on the CPU a plain copy), by site.

Run it on another tree to compare (the figures in docs/performance.md, issue 33 item 11):

    PYTHONPATH=. .venv/bin/python benchmarks/bench_step_syncs.py            # this tree
    git archive HEAD evr1 | tar -x -C /tmp/head && PYTHONPATH=/tmp/head .venv/bin/python benchmarks/bench_step_syncs.py

`--smoke`: one prompt, n 2, 2 frames of 64×112 (seconds); CI runs it (tests/benchmarks).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import traceback
import weakref
from collections import Counter
from dataclasses import fields, is_dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

READS = {"__float__", "__int__", "__bool__", "__index__", "item", "tolist", "numpy", "nonzero", "masked_select",
         "argwhere", "unique", "cpu"}
FACTORIES = {"tensor", "as_tensor", "full", "zeros", "ones", "empty", "arange", "full_like", "zeros_like",
             "ones_like", "empty_like", "rand", "randn", "linspace"}
COPIES = {"tensor", "as_tensor"}  # factories that copy host data to their device


class DeviceWaits(TorchFunctionMode):
    """Counts host waits on device values and host-to-device copies (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.device: dict[int, weakref.ref] = {}  # id → the tensor (ids of freed tensors are reused)
        self.counts: Counter = Counter()
        self.functions: Counter = Counter()  # waits by the innermost function of their site
        self.paused = 0

    def mark(self, obj) -> None:
        """Every tensor inside `obj` (tuples, lists, dicts, dataclasses such as ModelBatch) is on the device."""
        if torch.is_tensor(obj):
            self.device[id(obj)] = weakref.ref(obj)
            local = getattr(obj, "_local_tensor", None) if type(obj).__name__ == "DTensor" else None
            if torch.is_tensor(local):  # a DTensor's shard (`full_tensor()` reads it outside any torch function)
                self.device[id(local)] = weakref.ref(local)
        elif isinstance(obj, dict):
            for v in obj.values():
                self.mark(v)
        elif isinstance(obj, (tuple, list)):
            for v in obj:
                self.mark(v)
        elif is_dataclass(obj) and not isinstance(obj, type):
            for f in fields(obj):
                self.mark(getattr(obj, f.name))

    def on_device(self, t) -> bool:
        ref = self.device.get(id(t)) if torch.is_tensor(t) else None
        return ref is not None and ref() is t

    def count(self, what: str) -> None:
        site = _site()
        self.counts[f"{what}:{site}"] += 1
        if what.startswith("read.") or what == "h2d_scalar_copy":
            self.functions[f"{_function(site)} ({site})"] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        leaves = [x for x in tree_flatten((args, kwargs))[0] if torch.is_tensor(x)]
        on_device = any(self.on_device(x) for x in leaves)
        if on_device:
            target = _target_device(args[1:], kwargs) if name == "to" else None
            if name in READS or (name == "to" and target == "cpu") or (
                    name == "__getitem__" and any(torch.is_tensor(i) and i.dtype == torch.bool
                                                  for i in tree_flatten(args[1:])[0])):
                self.count(f"read.{name}")
        elif name == "to" and _target_device(args[1:], kwargs) is not None:  # a host tensor sent to the device
            self.count("h2d_async" if kwargs.get("non_blocking") else "h2d_blocking")
            on_device = True
        elif name in FACTORIES and kwargs.get("device") not in (None, "cpu"):  # a device's, not the host's
            if name in COPIES:
                self.count("h2d_scalar_copy")  # a copy from host memory, blocking
            on_device = True
        out = func(*args, **kwargs)
        if on_device and (name == "cpu" or (name == "to" and _target_device(args[1:], kwargs) == "cpu")):
            self.paused += 1  # a copy on the host: a distinct tensor (on the CPU `.cpu()` returns its input)
            try:
                return out.clone()
            finally:
                self.paused -= 1
        if on_device:
            self.mark(tree_flatten(out)[0])
        return out


def _site() -> str:
    """Where the counted call comes from: the HF model's forward (`transformers`), evr1's model code
    (`evr1.models`: log-prob passes, batches) or the worker's step code and `evr1.rl` (`step`)."""
    files = [f.filename for f in traceback.extract_stack(limit=48)]
    if any("/transformers/" in f for f in files):
        return "transformers"
    return "evr1.models" if any("/evr1/models/" in f for f in files) else "step"


def _function(site: str) -> str:
    """The innermost frame of `site`'s package that made the call, as `file.py:function`."""
    part = {"transformers": "/transformers/", "evr1.models": "/evr1/models/"}.get(site, "/evr1/")
    for frame in reversed(traceback.extract_stack(limit=48)):
        if part in frame.filename:
            return f"{Path(frame.filename).name}:{frame.name}"
    return "?"


def _target_device(args, kwargs) -> str | None:
    """The device a `.to(...)` call names. On this CPU the device's tensors live on "cpu" too: for one of
    them, a string "cpu" is a copy to the host (`.to("cpu")`), a `torch.device` (`.to(x.device)`) stays
    where it is; for a host tensor, any device is a copy to the device."""
    for value in [kwargs.get("device"), *args]:
        if isinstance(value, str):
            return value
        if isinstance(value, torch.device):
            return "same"
    return None


def _instrument(worker, mode: DeviceWaits):
    """Host-side work (cutting micro-batches, collating) runs unobserved; what `_on_device` returns is on
    the device; copies are counted.
    Returns a function that puts the module functions it replaced back."""
    import evr1.models.batch as batch_module
    import evr1.models.shared_prefix as shared_prefix_module
    import evr1.train.workers.policy as policy_module

    replaced: list[tuple[object, str, object]] = []

    def replace(module, name: str, value) -> None:
        replaced.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def paused(fn):
        def run(*args, **kwargs):
            mode.paused += 1
            try:
                return fn(*args, **kwargs)
            finally:
                mode.paused -= 1
        return run

    worker._micro_batches = paused(worker._micro_batches)
    worker._data_metrics = paused(worker._data_metrics)
    # The host's own work on a batch before it moves (its rope positions and packed layout): on this CPU
    # the factories it calls with `device=` would otherwise count as the device's.
    for module in (policy_module, shared_prefix_module):
        for name in ("host_prepared", "with_host_positions", "packed_layout"):
            if hasattr(module, name):
                replace(module, name, paused(getattr(module, name)))
    if hasattr(batch_module, "to_device"):  # this tree stages copies itself: count them as it issues them
        plain = batch_module.to_device

        def to_device(t, device, dtype=None, *, non_blocking=False):
            mode.count("h2d_async" if non_blocking else "h2d_blocking")
            return plain(t, "cpu", dtype)

        counted = paused(to_device)
        for module in list(sys.modules.values()):  # every evr1 module that imported it by name
            if getattr(module, "__name__", "").startswith("evr1.") and getattr(module, "to_device", None) is plain:
                replace(module, "to_device", counted)
    on_device = worker._on_device

    def moved(*args, **kwargs):  # observed (its copies count), and what it returns lives on the device
        out = on_device(*args, **kwargs)
        mode.mark(out)
        return out
    worker._on_device = moved
    # The queued device-to-host copies and their one wait, under this tree's names (`to_host` since
    # the policy module was split, `_to_host` before).
    names = next((pair for pair in (("to_host", "wait_for_copies"), ("_to_host", "_wait_for_copies"))
                  if hasattr(policy_module, pair[0])), None)
    if names is not None:
        def to_host(t):
            mode.counts["d2h_async"] += 1
            return t.detach().clone()  # a host copy: reading it later waits for nothing
        replace(policy_module, names[0], paused(to_host))
        plain_wait = getattr(policy_module, names[1])

        def wait(device):
            mode.count("read.stream_sync")
            plain_wait(device)
        replace(policy_module, names[1], wait)
    clip = worker._clip_and_step

    def clip_and_step():
        for p in worker.model.parameters():
            if p.grad is not None:
                mode.mark(p.grad)
        return clip()
    worker._clip_and_step = clip_and_step

    def restore() -> None:
        for module, name, value in reversed(replaced):
            setattr(module, name, value)
    return restore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args) -> dict:
    import evr1.train.workers.policy as policy_module
    from bench_cache import make_clip
    from bench_train import FAMILY, SIZES
    from evr1.config import load_config
    from evr1.models import load_adapter, make_tiny
    from evr1.train.actor_group import worker_options
    from evr1.train.protocol import ReaderSpec, Shard, grouped_calls

    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    work = Path(args.workdir)
    clips = [make_clip(work / f"clip{i}.mp4", 1, seed=i, height=args.height, width=args.width)
             for i in range(args.prompts)]
    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        make_tiny(FAMILY["tiny"], model_dir, seed=0, **SIZES["tiny"])
    adapter = load_adapter(model_dir)
    results = {}
    for shared in (True, False):
        cfg = load_config(ROOT / "conf/tiny.yaml", [
            f"run.root={work}/runs", "tracking.enabled=false", f"model.path={model_dir}", "model.dtype=float32",
            "trainer.world_size=1", f"trainer.micro_batch_size={args.n}", "algorithm.use_kl_loss=true",
            "algorithm.kl_loss_coef=0.01", f"cache.nframes={args.frames}", f"cache.min_frames={min(4, args.frames)}",
            "cache.max_frames=768", f"cache.max_pixels={args.height * args.width}", "cache.min_pixels=1024"])
        spec = ReaderSpec(None, cfg.cache.frame_params(adapter.family.factor), "decode-only", None, None, False)
        worker = policy_module.PolicyWorker(0, 1, str(model_dir), worker_options(cfg), spec)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        worker.setup(f"127.0.0.1:{_free_port()}")
        if args.threads:
            torch.set_num_threads(args.threads)  # one thread: the same figures run to run (to compare trees)
        try:
            rows = [{"sample_id": f"s{i}", "problem_id": f"p{i}", "problem": "<video>\nWhat colour is the box?",
                     "answer": "A", "problem_type": "multiple choice", "data_type": "video",
                     "options": ["A. red", "B. blue"], "videos": [str(c)], "images": []} for i, c in enumerate(clips)]
            rows = [r for r in rows for _ in range(args.n)]
            g = torch.Generator().manual_seed(0)
            responses = [torch.randint(10, 600, (args.response_tokens - i % 3,), generator=g).tolist()
                         for i in range(len(rows))]
            advantages = [[1.0 if i % 2 else -1.0] * len(r) for i, r in enumerate(responses)]
            shard = Shard(rows=rows, responses=responses, advantages=advantages,
                          global_token_count=sum(map(len, responses)), global_sequence_count=len(responses))
            if shared:
                shard.log_prob_calls = shard.update_calls = grouped_calls([shard], args.n)
            mode = DeviceWaits()
            for m in [worker.model] + ([worker.ref] if worker.ref is not None else []):
                for t in [*m.parameters(), *m.buffers()]:  # on a GPU, both live there
                    mode.mark(t)
            restore = _instrument(worker, mode)
            passes = {}
            micro = len(rows) // args.n
            with mode:
                t0 = time.perf_counter()
                lp = worker.log_probs(shard)
                passes["log_probs"] = (dict(mode.counts), time.perf_counter() - t0, dict(mode.functions))
                mode.counts.clear()
                mode.functions.clear()
                shard.old_log_probs, shard.ref_log_probs = lp["old"], lp["ref"]
                t0 = time.perf_counter()
                metrics = worker.step(shard, 1e-5)
                passes["update"] = (dict(mode.counts), time.perf_counter() - t0, dict(mode.functions))
            assert all(v == v for v in metrics.values() if isinstance(v, float)), metrics
            results["shared" if shared else "unshared"] = {
                name: {"micro_batches": micro, "seconds": round(seconds, 3), **_per_micro(counts, micro),
                       "waits_by_function": dict(sorted(functions.items(), key=lambda kv: -kv[1]))}
                for name, (counts, seconds, functions) in passes.items()}
            results["shared" if shared else "unshared"]["metrics"] = {
                k: v for k, v in metrics.items() if k.startswith("actor/")}
        finally:
            if "restore" in locals():
                restore()
            worker.shutdown()
    return results


def _per_micro(counts: dict, micro: int) -> dict:
    """Per micro-batch by site: host waits (reads of device values, scalar copies from host memory) and
    host-to-device copies, blocking and not; and every wait by operation."""
    sites = ("step", "evr1.models", "transformers")
    waits, blocking, asynchronous = (dict.fromkeys(sites, 0) for _ in range(3))
    by_op: Counter = Counter()
    for key, value in counts.items():
        if ":" not in key:
            continue
        what, site = key.rsplit(":", 1)
        if what == "h2d_blocking":
            blocking[site] += value
        elif what == "h2d_async":
            asynchronous[site] += value
        else:
            waits[site] += value
            by_op[f"{what.removeprefix('read.')} ({site})"] += value

    def per(d):
        return {k: round(v / micro, 2) for k, v in d.items()}
    return {"host_waits_per_micro_batch": per(waits), "h2d_blocking_per_micro_batch": per(blocking),
            "h2d_async_per_micro_batch": per(asynchronous), "d2h_async": counts.get("d2h_async", 0),
            "waits_by_op": dict(sorted(by_op.items()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=4, help="responses per prompt (= micro_batch_size)")
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--response-tokens", type=int, default=16)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the worker's own choice)")
    ap.add_argument("--smoke", action="store_true", help="1 prompt, n 2, 2 frames of 64x112: seconds")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.n, args.frames, args.height, args.width, args.response_tokens = 1, 2, 2, 64, 112, 4
    with tempfile.TemporaryDirectory(prefix="evr1_step_syncs") as tmp:
        args.workdir = args.workdir or tmp
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        out = run(args)
    import evr1
    print(json.dumps({"bench": "step_syncs", "smoke": args.smoke, "evr1": str(Path(evr1.__file__).parent),
                      "prompts": args.prompts, "n": args.n, **out}))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

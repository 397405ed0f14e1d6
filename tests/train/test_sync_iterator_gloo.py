"""`iter_sync_weights` on a real FSDP2 model: two gloo ranks on the CPU, tiny Qwen2.5-VL and Qwen3-VL.

Each rank builds the model the way a policy rank does (`build_sharded` + `shard_model`: every decoder
block a unit, the root the rest) under the bf16 mixed-precision policy the CUDA ranks use
(`precision("bfloat16", "cuda")`, float32 master weights), so `unshard()` gathers bf16 here as on a GPU
(gloo all-gathers bf16), and Qwen3-VL once more without a policy (float32 throughout: `precision()` on
the CPU), where the units gather float32 and the stream casts.
Checked on every rank, in the parent (each rank sends what it found through a queue):

* the stream equals `get_model_state_dict(full_state_dict=True)` cast to bf16, bit for bit;
* its names are the saved checkpoint's safetensors keys (in state-dict naming), each exactly once:
  the tied `lm_head.weight` is sent once, as `model.language_model.embed_tokens.weight`;
* layerwise=True (per unit) and layerwise=False (per tensor) give the same items in the same order;
* `tied_names=True` (what a vLLM engine needs) sends the same stream plus `lm_head.weight` right after
  the embedding, equal to it, and `sync_names(model, tied_names=True)` lists it;
* dtype=None keeps float32 exactly although the units gather bf16 (the per-tensor fallback), also when
  a forward left the root unit unsharded; afterwards every parameter is sharded again;
* `counting` and `check_complete` agree with the stream, and `HFEngine.update_weights` takes it as is
  (`copy=False`) into a bf16 replica that then equals the cast state dict (lm_head through the tie).
"""

from __future__ import annotations

import os
import queue
import re
import socket
import time
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

from evr1.models import make_tiny

FAMILIES = ["qwen2_5_vl", "qwen3_vl"]
# (family, under the bf16 policy?): the CUDA ranks' policy on both; no policy (float32 everywhere, what
# `precision()` gives on the CPU) on one
CASES = [("qwen2_5_vl", True), ("qwen3_vl", True), ("qwen3_vl", False)]
# transformers' Qwen2-VL legacy checkpoint layout (`visual.*`, `model.layers.*`) → state-dict names
LEGACY = [(re.compile(r"^visual"), "model.visual"),
          (re.compile(r"^model(?!\.(language_model|visual))"), "model.language_model")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint_names(model_dir: Path) -> list[str]:
    """The safetensors keys of a saved checkpoint, in state-dict naming."""
    from safetensors import safe_open

    names = []
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            keys = f.keys()
            for key in keys:
                for pattern, repl in LEGACY:
                    key = pattern.sub(repl, key)
                names.append(key)
    return names


def _problems(model_dir: str, mesh, policy, rank: int) -> dict[str, object]:
    """What a rank finds wrong (empty lists: nothing), plus a few facts for the report."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )
    from torch.distributed.tensor import DTensor

    from evr1.engines.hf import HFEngine
    from evr1.models import load_model
    from evr1.train.weight_sync import (
        SyncReport,
        check_complete,
        counting,
        iter_sync_weights,
        sync_names,
    )
    from evr1.train.workers.sharded_load import build_sharded, shard_model

    bf16 = torch.bfloat16
    model = build_sharded(model_dir, rank=rank, dtype=torch.float32, attn_implementation="sdpa", device="cpu",
                          shard=lambda m: shard_model(m, mesh, policy))
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    out: dict[str, object] = {}

    start = time.perf_counter()
    layerwise = list(iter_sync_weights(model, dtype=bf16))
    out["layerwise_s"] = time.perf_counter() - start
    start = time.perf_counter()
    per_tensor = list(iter_sync_weights(model, dtype=bf16, layerwise=False))
    out["per_tensor_s"] = time.perf_counter() - start
    names = [n for n, _ in layerwise]
    out["names"] = names
    out["sync_names_differ"] = names != sync_names(model)
    out["not_bf16"] = [n for n, t in layerwise if t.dtype != bf16]
    out["not_equal_bf16"] = [n for n, t in layerwise if not torch.equal(t, sd[n].to(bf16))]
    out["left_out_of_state_dict"] = sorted(set(sd) - set(names))
    out["tie_differs"] = not torch.equal(sd["lm_head.weight"], sd["model.language_model.embed_tokens.weight"])
    out["per_tensor_differs"] = [n for (n, a), (m, b) in zip(layerwise, per_tensor, strict=True)
                                 if n != m or a.dtype != b.dtype or not torch.equal(a, b)]
    both = list(iter_sync_weights(model, dtype=bf16, tied_names=True))
    out["tied_names"] = [n for n, _ in both]
    out["tied_names_listed"] = sync_names(model, tied_names=True) == out["tied_names"]
    out["tied_not_equal"] = [n for n, t in both if not torch.equal(t, sd[n].to(bf16))]

    # copy=False: each item used before the next is requested (a view of the unsharded unit is fine then)
    borrowed = [(n, t.clone()) for n, t in iter_sync_weights(model, dtype=bf16, copy=False)]
    out["borrowed_differs"] = [n for (n, a), (m, b) in zip(layerwise, borrowed, strict=True)
                               if n != m or not torch.equal(a, b)]

    # dtype=None: float32 as stored, though each unit gathers bf16 (falls back to per-tensor gathers);
    # first a forward, which leaves the root unit unsharded (its parameters bf16)
    ids = torch.randint(10, 100, (1, 8), generator=torch.Generator().manual_seed(0))
    out["root_unsharded_after_forward"], out["not_equal_fp32"], out["left_unsharded"] = [], [], []
    for layerwise in (True, False):
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        out["root_unsharded_after_forward"].append(not isinstance(model.lm_head.weight, DTensor))
        kept = list(iter_sync_weights(model, dtype=None, layerwise=layerwise))
        out["not_equal_fp32"] += [(layerwise, n) for n, t in kept if t.dtype != torch.float32 or not torch.equal(t, sd[n])]
        out["left_unsharded"] += [(layerwise, n) for n, p in model.named_parameters() if not isinstance(p, DTensor)]

    # accounting, completeness and an engine in the same process
    engine = HFEngine(load_model(model_dir, dtype=bf16), adapter=None)
    with torch.no_grad():
        for p in engine.model.parameters():
            p.zero_()
    report = SyncReport(version=3)
    engine.update_weights(counting(iter_sync_weights(model, dtype=bf16, copy=False), report))
    check_complete(report.names, sync_names(engine.model), where=f"rank {rank}")
    out["report"] = (report.tensors, report.bytes)
    out["expected_report"] = (len(sd) - 1, sum(t.numel() * 2 for n, t in sd.items() if n != "lm_head.weight"))
    got = engine.model.state_dict()
    out["engine_differs"] = sorted(n for n in sd if not torch.equal(got[n], sd[n].to(bf16)))
    return out


def _worker(rank: int, port: int, dirs: dict[str, str], results, errors) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        from evr1.train.workers.precision import precision

        mesh = init_device_mesh("cpu", (2,))
        policy = precision("bfloat16", "cuda").policy  # the CUDA ranks' policy, on the CPU
        for family, mixed in CASES:
            results.put((rank, (family, mixed), _problems(dirs[family], mesh, policy if mixed else None, rank)))
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def test_streamed_sync_equals_the_full_state_dict_in_bf16_on_two_gloo_ranks(tmp_path):
    dirs = {fam: str(make_tiny(fam, tmp_path / fam, seed=0)) for fam in FAMILIES}
    ctx = mp.get_context("spawn")
    results, errors = ctx.Queue(), ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, dirs, results, errors)) for r in range(2)]
    for p in procs:
        p.start()
    found: dict[tuple[int, tuple[str, bool]], dict] = {}
    deadline = time.monotonic() + 240
    while len(found) < 2 * len(CASES) and time.monotonic() < deadline:
        if errors.qsize():
            break
        try:
            rank, case, out = results.get(timeout=1)
            found[(rank, case)] = out
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    messages = [errors.get() for _ in range(errors.qsize())]
    assert not messages, "\n".join(messages)
    codes = [p.exitcode for p in procs]  # -11: a segfault (e.g. a tensor read after its unit's reshard)
    assert sorted(found) == sorted((r, c) for r in range(2) for c in CASES), f"results {sorted(found)}, exit codes {codes}"
    assert codes == [0, 0], codes

    for (rank, (family, mixed)), out in sorted(found.items()):
        where = f"rank {rank}, {family}, {'bf16 policy' if mixed else 'no policy'}"
        expected = checkpoint_names(Path(dirs[family]))
        assert sorted(out["names"]) == sorted(expected), where  # the checkpoint's tensors, each once
        assert len(out["names"]) == len(set(out["names"])), where
        assert "model.language_model.embed_tokens.weight" in out["names"], where
        assert out["left_out_of_state_dict"] == ["lm_head.weight"] and not out["tie_differs"], where
        assert not out["sync_names_differ"], where
        embed = out["names"].index("model.language_model.embed_tokens.weight")
        assert out["tied_names"] == [*out["names"][:embed + 1], "lm_head.weight", *out["names"][embed + 1:]], where
        assert out["tied_names_listed"] and out["tied_not_equal"] == [], where
        for check in ("not_bf16", "not_equal_bf16", "per_tensor_differs", "borrowed_differs", "not_equal_fp32",
                      "left_unsharded", "engine_differs"):
            assert out[check] == [], f"{where}: {check}: {out[check]}"
        assert out["root_unsharded_after_forward"] == [True, True], where  # the fallback ran from an unsharded root
        assert out["report"] == out["expected_report"], where
        print(f"{where}: {len(out['names'])} tensors; layerwise {out['layerwise_s'] * 1e3:.1f} ms, "
              f"per tensor {out['per_tensor_s'] * 1e3:.1f} ms")

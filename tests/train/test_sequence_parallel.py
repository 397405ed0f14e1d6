"""Ulysses sequence parallelism (sp=2, two gloo ranks on CPU) equals the single-rank path, per family.

One process pair checks every family: log-probs and entropy equal `response_log_probs` (atol 1e-5),
and the parameter gradients of a GRPO-shaped loss, summed over the two ranks, equal the single-rank
gradients (max error <= 1e-4 of each tensor's largest entry), on a batch with a video + image row,
an image row and a text-only row (left-padded prompts, right-padded responses of different lengths,
an empty response, a response spanning both ranks' slices); with gradient checkpointing (the backward's recompute) and with fewer key/value
heads than ranks; and with the output head applied per chunk of response tokens (`chunk_tokens`,
each rank over its own slice). Qwen3.5 is refused with a clear error. The sequence lengths are odd on purpose,
so the last rank's slice is padded.
"""

from __future__ import annotations

import os
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from evr1.models import load_adapter, load_model, make_tiny, response_log_probs
from evr1.train.workers.sequence_parallel import sp_groups, sp_response_log_probs
from tests.models.conftest import make_clip

SP_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
# case → (family, gradient checkpointing, logits chunk); "kv1": one key/value head, fewer than the 2 ranks
# (repeated); "chunked": the head applied 3 response tokens at a time on each rank's slice
CASES = {"qwen2_vl": ("qwen2_vl", False, None), "qwen2_5_vl": ("qwen2_5_vl", True, None),
         "qwen3_vl": ("qwen3_vl", False, None), "qwen3_vl_kv1": ("qwen3_vl", True, None),
         "qwen3_vl_chunked": ("qwen3_vl", False, 3)}
TEMPERATURE = 0.7
LOGPROB_ATOL = 1e-5
GRAD_RTOL = 1e-4


def _batch(ad):
    f = ad.family.factor
    prompts = [
        ad.encode_prompt("Compare <video> with <image>", videos=[make_clip(f, t=4, seed=2)],
                         images=[make_clip(f, t=1, seed=3).frames[0]]),
        ad.encode_prompt("<image> What colour?", images=[make_clip(f, t=1, h_blocks=3, seed=4).frames[0]]),
        ad.encode_prompt("Answer with a letter."),
        ad.encode_prompt("Answer yes or no."),
    ]
    # one response longer than the prompts, so the response positions straddle the two ranks' slices
    responses = [[20, 21, 22, 23, 24, ad.eos_token_ids[0]], [30, 31], list(range(40, 130)), []]
    if (max(map(len, prompts)) + 90) % 2 == 0:  # an odd length: the last rank's slice is padded
        responses[2].append(131)
    return ad.collate(prompts, responses).to("cpu", torch.float32)


def _loss(log_probs, entropy, mask):
    adv = torch.linspace(-1.0, 1.0, log_probs.shape[0])[:, None]
    return -(adv * log_probs).sum() / mask.sum() - 0.01 * entropy.sum() / mask.sum()


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _check_family(model_dir, group, checkpointing: bool, chunk: int | None = None) -> str:
    ad, model = load_adapter(model_dir), load_model(model_dir)
    if checkpointing:  # the backward recomputes each layer: the recompute must be sequence-parallel too
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = _batch(ad)
    ref, ref_ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True)
    _loss(ref, ref_ent, batch.response_mask).backward()
    ref_grads = _grads(model)
    model.zero_grad(set_to_none=True)

    got, ent = sp_response_log_probs(model, batch, group, temperature=TEMPERATURE, with_entropy=True,
                                     chunk_tokens=chunk)
    assert got.shape == ref.shape and (got[batch.response_mask == 0] == 0).all()
    assert torch.allclose(got, ref.detach(), atol=LOGPROB_ATOL), (got - ref).abs().max()
    assert torch.allclose(ent, ref_ent.detach(), atol=LOGPROB_ATOL), (ent - ref_ent).abs().max()
    _loss(got, ent, batch.response_mask).backward()
    grads = _grads(model)
    again, _ = response_log_probs(model, batch, temperature=TEMPERATURE)  # the switched model, without a group
    assert torch.allclose(again, ref, atol=LOGPROB_ATOL)
    assert ref_grads.keys() == grads.keys() and any("visual" in n for n in grads)
    worst = 0.0
    for name, g in grads.items():
        dist.all_reduce(g, group=group)  # the group's ranks' gradients sum to the single-rank gradient
        scale = ref_grads[name].abs().max().clamp_min(1e-6)
        err = float((g - ref_grads[name]).abs().max() / scale)
        assert err <= GRAD_RTOL, (name, err)
        worst = max(worst, err)
    return f"L={batch.input_ids.shape[1]} worst grad rel err {worst:.1e}"


def _worker(rank: int, port: int, dirs: dict[str, str], errors) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        groups = sp_groups(2, 2)
        assert (groups.sp_rank, groups.sp_size, groups.dp_rank, groups.dp_size) == (rank, 2, 0, 1)
        for case, (fam, checkpointing, chunk) in CASES.items():
            print(case, rank, _check_family(dirs.get(case, dirs[fam]), groups.group, checkpointing, chunk), flush=True)
        model, ad = load_model(dirs["qwen3_5"]), load_adapter(dirs["qwen3_5"])
        with pytest.raises(ValueError, match="not supported for qwen3_5.*gated-delta-net"):
            sp_response_log_probs(model, _batch(ad), groups.group)
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(target, world: int, args: tuple, *, timeout: float) -> None:
    """`target(rank, port, *args, errors)` in `world` spawned processes; fails with every rank's traceback."""
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, port, *args, errors)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
    messages = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
    assert not messages, "\n".join(messages)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def test_sp2_equals_sp1_every_family(tmp_path):
    dirs = {fam: str(make_tiny(fam, tmp_path / fam, seed=0)) for fam in [*SP_FAMILIES, "qwen3_5"]}
    dirs["qwen3_vl_kv1"] = str(make_tiny("qwen3_vl", tmp_path / "kv1", seed=1, num_key_value_heads=1))
    _run_ranks(_worker, 2, (dirs,), timeout=300)


def test_sp_groups_validates_divisibility():
    with pytest.raises(ValueError, match="divide the world size"):
        sp_groups(4, 3)


def _groups_worker(rank: int, port: int, errors) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=4)
    try:
        g = sp_groups(4, 2)
        assert (g.sp_rank, g.sp_size, g.dp_rank, g.dp_size) == (rank % 2, 2, rank // 2, 2)
        x = torch.tensor([float(rank)])
        dist.all_reduce(x, group=g.group)  # a sum within the group only: ranks {0, 1} and {2, 3}
        assert x.item() == {0: 1.0, 1: 1.0, 2: 5.0, 3: 5.0}[rank], x
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def test_four_ranks_form_two_sequence_parallel_groups():
    _run_ranks(_groups_worker, 4, (), timeout=120)

"""Loading without a full copy on an accelerator (issue 33, item 6), on two gloo ranks.

Rank 0 reads the checkpoint into host memory; every rank builds on the meta device, shards, and
receives its shard by a tensor-by-tensor broadcast (`sharded_load.build_sharded`). Checked: the
gathered parameters and the buffers equal the checkpoint exactly on both ranks; rank 0 builds the
model it trains on the meta device like its peers (its full copy is the host one); and the frozen
reference stored in bf16 under the bf16 mixed-precision policy gives exactly the log-probs of the
reference stored in fp32 under that policy (FSDP2 rounds each gathered parameter to bf16 anyway).
"""

from __future__ import annotations

import os
import traceback

import pytest
import torch
import torch.distributed as dist

from evr1.models import load_adapter, load_model, make_tiny, response_log_probs
from evr1.train.workers import sharded_load
from evr1.train.workers.precision import precision
from evr1.train.workers.sharded_load import build_sharded, shard_model
from tests.models.conftest import make_clip
from tests.train.test_sequence_parallel import _run_ranks


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _worker(rank: int, port: int, model_dir: str, errors) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2,))
        built_on = []
        real_from_config = sharded_load.AutoModelForImageTextToText.from_config

        def from_config(*args, **kwargs):  # records where every rank builds the model it shards
            model = real_from_config(*args, **kwargs)
            built_on.append(str(next(model.parameters()).device))
            return model
        sharded_load.AutoModelForImageTextToText.from_config = from_config

        model = build_sharded(model_dir, rank=rank, dtype=torch.float32, attn_implementation="sdpa", device="cpu",
                              shard=lambda m: shard_model(m, mesh))
        assert built_on == ["meta"], built_on
        want = load_model(model_dir)
        expected = want.state_dict()
        got = {name: _full(p.detach()) for name, p in model.state_dict().items()}
        assert got.keys() == expected.keys()
        for name, tensor in expected.items():
            assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
        assert any(type(p).__name__ == "DTensor" for p in model.parameters())  # sharded
        for (name, buf), (_, ref_buf) in zip(model.named_buffers(), want.named_buffers(), strict=True):
            assert torch.equal(buf, ref_buf.to(buf.dtype)), name

        # The reference: bf16 storage under the bf16 policy equals fp32 storage under it, exactly.
        prec = precision("bfloat16", "cuda")  # the CUDA policy, on CPU
        assert prec.reference == torch.bfloat16 and precision("bfloat16", "cpu").reference == torch.float32
        refs = {dtype: build_sharded(model_dir, rank=rank, dtype=dtype, attn_implementation="sdpa", device="cpu",
                                     shard=lambda m: shard_model(m, mesh, prec.policy),
                                     prepare=lambda m: m.eval().requires_grad_(False))
                for dtype in (torch.float32, prec.reference)}
        assert {p.dtype for p in refs[torch.bfloat16].parameters()} == {torch.bfloat16}
        ad = load_adapter(model_dir)
        prompt = ad.encode_prompt("<video> What moves?", videos=[make_clip(ad.family.factor, t=4, seed=rank)])
        batch = ad.collate([prompt, prompt], [[20, 21, 22], [30]]).to("cpu", dtype=prec.compute)
        with torch.no_grad():
            lp = {dtype: response_log_probs(m, batch, chunk_tokens=2)[0] for dtype, m in refs.items()}
        assert torch.equal(lp[torch.float32], lp[torch.bfloat16]), (lp[torch.float32] - lp[torch.bfloat16]).abs().max()
        print(f"rank {rank}: {len(expected)} tensors equal the checkpoint; bf16 reference log-probs equal", flush=True)
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("family", ["qwen2_5_vl"])
def test_sharded_parameters_equal_the_checkpoint_and_the_bf16_reference_scores_the_same(tmp_path, family):
    model_dir = str(make_tiny(family, tmp_path / family, seed=0))
    _run_ranks(_worker, 2, (model_dir,), timeout=300)

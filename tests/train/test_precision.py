"""The training precision table, and FSDP2's mixed-precision policy as the ranks apply it (gloo, one rank)."""

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from evr1.train.workers.precision import precision

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype, device, storage, compute, mixed", [
    ("bfloat16", "cuda", torch.float32, torch.bfloat16, True),
    ("float16", "cuda", torch.float32, torch.float16, True),
    ("float32", "cuda", torch.float32, torch.float32, False),
    ("bfloat16", "cpu", torch.float32, torch.float32, False),
])
def test_precision_table(dtype, device, storage, compute, mixed):
    p = precision(dtype, device)
    assert (p.storage, p.compute, p.policy is not None) == (storage, compute, mixed)
    if mixed:
        assert p.policy.param_dtype == compute and p.policy.reduce_dtype == torch.float32


SCRIPT = """
import json, os, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from evr1.models import load_model, make_tiny
from evr1.train.workers.sharded_load import shard_model
from evr1.train.workers.precision import precision
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)
model = load_model(make_tiny("qwen2_5_vl", sys.argv[1], seed=0)).train()
shard_model(model, init_device_mesh("cpu", (1,)), precision("bfloat16", "cuda").policy)  # the CUDA policy, on CPU
seen = set()
model.model.language_model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.add(str(o.dtype)))
ids = torch.randint(10, 100, (1, 12))
model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits.float().sum().backward()
print(json.dumps({"compute": sorted(seen), "params": sorted({str(p.dtype) for p in model.parameters()}),
                  "grads": sorted({str(p.grad.dtype) for p in model.parameters() if p.grad is not None})}))
dist.destroy_process_group()
"""


def test_mixed_precision_policy_computes_in_bf16_and_keeps_float32_weights_and_grads(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path / "m"), str(port)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"compute": ["torch.bfloat16"], "params": ["torch.float32"], "grads": ["torch.float32"]}

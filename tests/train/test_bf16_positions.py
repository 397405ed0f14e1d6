"""The same positions in every pass under FSDP2's bf16 mixed-precision policy (issue 33, item 7).

FSDP2 casts a unit's float forward inputs to the policy's dtype unless told not to: Qwen2.5-VL's
`second_per_grid_ts` would then reach `get_rope_index` in bf16 in the passes whose positions the
model computes itself (a padded batch without host positions), while the packed pass and the shared
prefix's prompt work them out outside the forward in float32 (`with_host_positions`; the trainer's
padded batches get theirs there too). Here the CUDA policy runs on CPU (one gloo rank) on a Qwen2.5-VL
video whose seconds per temporal patch (0.4995: 2 frames at 4.004 fps) round to 0.5 in bf16, so every
temporal position after the first would move by one; the positions each pass hands the language
model are captured and compared, and the log-probs of the grouped (shared-prefix), packed and padded
passes agree (the ratio at the start of a step is 1 within bf16 rounding).
"""

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from evr1.models import load_adapter, load_model, make_tiny
from evr1.train.workers.precision import precision
from evr1.train.workers.sharded_load import shard_model
from tests.models.conftest import make_clip, positions_of_each_pass

cast = sys.argv[3] == "cast"
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)
model_dir = make_tiny("qwen2_5_vl", sys.argv[1], seed=0)
ad, model = load_adapter(model_dir), load_model(model_dir).train()
prec = precision("bfloat16", "cuda")  # the CUDA policy, on CPU
policy = prec.policy
if cast:  # the previous policy, for the record: FSDP2's default casts forward inputs
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
shard_model(model, init_device_mesh("cpu", (1,)), policy)

f = ad.family.factor
clip = make_clip(f, t=16, h_blocks=1, w_blocks=2, fps=4.004, indices=list(range(16)), total=16, seed=1)
prompt = ad.encode_prompt("<video> What happens?", videos=[clip])
responses = [[20, 21, 22, 23, 24], [30, 31, 32]]
batch = ad.collate([prompt] * len(responses), responses).to("cpu", dtype=prec.compute)
out = {"seconds": batch.mm["second_per_grid_ts"].tolist()}
positions, lp_rows = positions_of_each_pass(model, ad, prompt, responses, batch, prec.compute)
out.update(positions)
out["lp_gap"] = {name: float((lp_rows[name] - lp_rows["packed"]).abs().max()) for name in lp_rows}
out["lp_packed_mean"] = float(lp_rows["packed"][batch.response_mask.bool()].mean())
print(json.dumps(out))
dist.destroy_process_group()
"""


def _run(tmp_path, mode: str) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path / mode), str(port), mode],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    print(mode, got["lp_gap"], got["packed"][0][0])
    return got


def test_grouped_packed_and_padded_passes_see_the_same_positions_and_log_probs_under_bf16(tmp_path):
    got = _run(tmp_path, "keep")
    assert got["seconds"] == [pytest.approx(0.4995, abs=1e-6)] * 2  # float32, as the adapter made it
    assert got["grouped"] == got["packed"] == got["padded"]
    # Ratio 1 at the start of a step: the passes differ only by bf16 rounding of the computation order.
    assert got["lp_gap"]["grouped"] <= 2e-2 and got["lp_gap"]["padded"] <= 2e-2, got["lp_gap"]


@pytest.mark.slow
def test_the_default_fsdp2_policy_would_move_the_temporal_positions(tmp_path):
    """The record of why: with forward inputs cast (FSDP2's default) a pass whose positions the model
    computes inside its forward (here the padded one) takes the video's temporal positions from 0.5 s
    instead of 0.4995 s. The grouped pass works its prompt's positions out on the host before the
    forward (`with_host_positions`), as the packed pass does its layout: the cast no longer reaches them."""
    got = _run(tmp_path, "cast")
    assert got["padded"] != got["packed"]
    assert got["grouped"] == got["packed"]

"""Shared prompt prefix vs the plain batch (issue 10, item 3), measured side by side in one run.

A random-init Qwen3-VL wider than the test models (`--hidden`, `--layers`; real vision geometry:
patch 16, merge 2, temporal patch 2) scores n responses to one video prompt two ways:
  - unshared: `response_log_probs(model, adapter.collate([prompt] * n, responses))`, the trainer's
    path today (vision tower and the whole prompt run n times);
  - shared:   `grouped_response_log_probs(model, adapter, prompt, responses)` (prompt and tower once,
    the n responses on its key/value cache).
Each is timed as a log-prob pass (no grad, eval mode) and as an update (forward + backward of a
token-mean loss, train mode), alternating the two ways, best of `--repeats`. It also counts
vision-tower calls per pass and checks that both ways give the same log-probs.

Run:  .venv/bin/python benchmarks/bench_shared_prefix.py [--frames 32 --height 384 --width 672 --n 8] [--skip-update]
Real size is `--frames 64 --height 384 --width 672` (8,064 vision tokens after merge at patch 16 /
merge 2; 16,128 for 128 frames). Prints one JSON line. `--smoke`: the same path at the smallest sizes
(2 frames of 32×32, n 2, 8-token responses, hidden 64, 1 layer, 1 repeat), seconds long: CI runs it
(tests/benchmarks) so the script cannot rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evr1.models import grouped_response_log_probs, load_adapter, load_model, make_tiny, response_log_probs  # noqa: E402
from evr1.video.clip import VideoClip  # noqa: E402
from random_media import random_clip  # noqa: E402


def _clip(frames: int, height: int, width: int) -> VideoClip:
    return random_clip(frames, height, width)


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--height", type=int, default=384)
    ap.add_argument("--width", type=int, default=672)
    ap.add_argument("--n", type=int, default=8, help="responses per prompt")
    ap.add_argument("--response-len", type=int, default=128, help="longest response; others shorter")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-update", action="store_true", help="time the log-prob passes only (real sizes on CPU)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest sizes (2 frames of 32x32, n 2, 8-token responses, hidden 64, 1 layer): seconds")
    args = ap.parse_args()
    if args.smoke:
        args.frames, args.height, args.width, args.n, args.response_len = 2, 32, 32, 2, 8
        args.hidden, args.layers, args.repeats = 64, 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny("qwen3_vl", Path(tmp) / "m", seed=0, hidden_size=args.hidden,
                              intermediate_size=2 * args.hidden, num_hidden_layers=args.layers,
                              num_attention_heads=max(4, args.hidden // 64), num_key_value_heads=2,
                              vision_depth=2, vision_hidden_size=64, vision_heads=2, max_position_embeddings=65536)
        adapter, model = load_adapter(model_dir), load_model(model_dir)
    prompt = adapter.encode_prompt("<video> What happens in the video? Think, then answer.",
                                   videos=[_clip(args.frames, args.height, args.width)])
    rng = np.random.default_rng(1)
    lengths = [args.response_len - (args.response_len // (2 * args.n)) * i for i in range(args.n)]
    responses = [rng.integers(20, 600, size=k).tolist() for k in lengths]
    batch = adapter.collate([prompt] * args.n, responses)

    calls: list[int] = []
    model.model.visual.register_forward_hook(lambda *_: calls.append(1))

    def unshared():
        return response_log_probs(model, batch)[0]

    def shared():
        return grouped_response_log_probs(model, adapter, prompt, responses)[0]

    def update(fn):
        def run():
            model.zero_grad(set_to_none=True)
            lp = fn()
            (-lp.sum() / batch.response_mask.sum()).backward()
        return run

    with torch.no_grad():
        model.eval()
        diff = float((unshared() - shared()).abs().max())  # also a warm-up of both ways
        calls.clear()
        unshared()
        vision_unshared = len(calls)
        calls.clear()
        shared()
        vision_shared = len(calls)
        lp_un, lp_sh = [], []
        for _ in range(args.repeats):  # alternate, so drift in machine load hits both ways alike
            lp_un.append(_best(unshared, 1))
            lp_sh.append(_best(shared, 1))
    model.train()
    up_un, up_sh = [], []
    for _ in range(0 if args.skip_update else args.repeats):
        up_un.append(_best(update(unshared), 1))
        up_sh.append(_best(update(shared), 1))

    media_rows = batch.mm["video_grid_thw"]
    out = {
        "smoke": args.smoke, "prompt_tokens": len(prompt),
        "vision_tokens": int((batch.input_ids[0] == adapter.video_pad_id).sum()),
        "frames": args.frames, "frame_hw": [args.height, args.width], "n": args.n,
        "response_tokens": lengths, "hidden": args.hidden, "layers": args.layers,
        "threads": torch.get_num_threads(),
        "logprob_s_unshared": round(min(lp_un), 3), "logprob_s_shared": round(min(lp_sh), 3),
        "prefix_sharing_logprob_speedup": round(min(lp_un) / min(lp_sh), 2),
        "vision_calls_per_pass": {"unshared": vision_unshared, "shared": vision_shared},
        "videos_encoded_per_pass": {"unshared": int(media_rows.shape[0]), "shared": 1},
        "max_abs_logprob_diff": diff,
    }
    if up_un:
        out.update(update_s_unshared=round(min(up_un), 3), update_s_shared=round(min(up_sh), 3),
                   prefix_sharing_update_speedup=round(min(up_un) / min(up_sh), 2))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

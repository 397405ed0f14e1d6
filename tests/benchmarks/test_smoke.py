"""Every benchmark has a seconds-long `--smoke` mode, and CI runs it, so that changes cannot rot them (issue 29, item 5).

Each script in benchmarks/ with a command line (argparse) is found by glob and run as
`python benchmarks/<name>.py --smoke` from the repository root: it must exit 0 and print the figures it
prints at full size (its JSON line(s) or Markdown table), which are parsed here. A new benchmark
without `--smoke` fails `test_has_a_smoke_flag`; a helper module that is not a benchmark must be
listed in NOT_BENCHMARKS with the reason. Every file under benchmarks/ and research/ must also
byte-compile. The smoke figures mean nothing (tiny sizes, one repeat); only that the path runs.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import py_compile
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
TIMEOUT_S = 600  # a smoke run takes seconds to about a minute alone; the margin is for a loaded machine

# Files in benchmarks/ that are not benchmarks, with why.
NOT_BENCHMARKS = {
    "random_media.py": "a helper (random uint8 clips) that bench_long_video, bench_shared_prefix and bench_train import",
}
# Benchmarks whose smoke run needs a module this environment may lack: (module, why); skipped without it.
NEEDS = {
    "bench_vllm.py": ("vllm", "needs vLLM: it runs in .venv-vllm (`make test-vllm`)"),
}


def _is_benchmark(path: Path) -> bool:
    """A script with a command line: it imports argparse (and so has a main to run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names)
               for node in ast.walk(tree))


def _benchmarks() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in NOT_BENCHMARKS and _is_benchmark(p))


def _smoke_flag(path: Path) -> bool:
    """`add_argument("--smoke", ...)` somewhere in the script."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == "--smoke" for a in node.args)):
            return True
    return False


def test_every_file_is_a_benchmark_or_a_listed_helper():
    files = {p.name for p in BENCHMARKS.glob("*.py")}
    assert set(NOT_BENCHMARKS) <= files, f"listed helpers that are gone: {set(NOT_BENCHMARKS) - files}"
    loose = sorted(f for f in files - set(NOT_BENCHMARKS) if not _is_benchmark(BENCHMARKS / f))
    assert not loose, f"benchmarks/ files with no command line: list them in NOT_BENCHMARKS with the reason: {loose}"
    assert {"bench_cache.py", "bench_train.py", "gpu_smoke.py"} <= set(_benchmarks())


@pytest.mark.parametrize("name", _benchmarks())
def test_has_a_smoke_flag(name):
    assert _smoke_flag(BENCHMARKS / name), (
        f"benchmarks/{name} has no --smoke flag: give it one that runs the same code path at the smallest "
        "sizes in seconds and prints its usual figures (tests/benchmarks/test_smoke.py runs it in CI)")


@pytest.mark.parametrize("folder", ["benchmarks", "research"])
def test_byte_compiles(folder, tmp_path):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files
    for k, path in enumerate(files):
        py_compile.compile(str(path), cfile=str(tmp_path / f"{k}.pyc"), doraise=True)


# --- the smoke runs --------------------------------------------------------------------------------


def _json_lines(out: str) -> list[dict]:
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                rows.append(value)
    return rows


def _table(out: str) -> dict[str, list[str]]:
    """Markdown table rows by their first cell (header and rule rows included)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("|") and line.rstrip().endswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def _one(rows: list[dict], **match) -> dict:
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"expected one JSON line with {match}, got {rows}"
    return found[0]


def _number(text: str) -> float:
    m = re.search(r"-?\d+(\.\d+)?", text)
    assert m, f"no number in {text!r}"
    return float(m.group())


def check_bench_cache(out: str) -> None:
    (fig,) = _json_lines(out)
    assert fig["smoke"] is True and fig["clips"] == 1
    for key in ("cache_read_ms", "decode_on_the_fly_ms", "pt_torch_load_ms", "build_1_worker_fps", "build_2_workers_fps"):
        assert fig[key] > 0, key
    assert fig["sample_shape"][0] == 2 and fig["lance_bytes"] > 0 and fig["pt_bytes"] > 0
    table = _table(out)
    assert _number(table["build, 2 Ray workers"][0]) > 0


def check_bench_eval(out: str) -> None:
    table = _table(out)
    loops = [k for k in table if k.startswith(("synchronous", "async runner"))]
    suites = [k for k in table if k.startswith("one engine")]
    assert len(loops) == 2 and len(suites) == 2, table
    assert all(_number(table[k][0]) > 0 for k in loops + suites)  # items/s
    assert _number(re.search(r"async / sync throughput: (\S+)x", out).group(1)) > 0
    assert _number(re.search(r"one engine / one per benchmark throughput: (\S+)x", out).group(1)) > 0


def check_bench_long_video(out: str) -> None:
    (fig,) = _json_lines(out)
    assert fig["smoke"] is True and fig["frames"] == 2
    assert fig["sp1"]["step_s"] > 0 and len(fig["sp2"]) == 2 and all(r["step_s"] > 0 for r in fig["sp2"])
    assert fig["sp1"]["plan_mib"] > 0
    assert fig["max_abs_logprob_diff"] < 1e-3  # sequence parallelism gives sp=1's log-probs


def check_bench_media_hash(out: str) -> None:
    (fig,) = _json_lines(out)
    assert fig["smoke"] is True and fig["first_hash_s"] > 0 and fig["index_lookup_fresh_process_s"] >= 0
    (stopped,) = [v for k, v in fig.items() if k.startswith("hash_with_timeout_")]
    assert stopped is not None  # the smoke's 1 µs timeout fires: the HashTimeout path ran


def check_bench_rewards(out: str) -> None:
    fig = _one(_json_lines(out), bench="rewards")
    rates = fig["responses_per_second"]
    assert {"multiple choice", "numerical", "boolean", "open-ended"} <= set(rates)
    assert all(v > 0 for v in rates.values()), rates


def check_bench_shared_prefix(out: str) -> None:
    (fig,) = _json_lines(out)
    assert fig["smoke"] is True and fig["n"] == 2
    assert fig["logprob_s_unshared"] > 0 and fig["logprob_s_shared"] > 0
    assert fig["update_s_unshared"] > 0 and fig["update_s_shared"] > 0
    assert fig["vision_calls_per_pass"] == {"unshared": 1, "shared": 1}
    assert fig["max_abs_logprob_diff"] < 1e-3  # both ways score the same


def check_bench_train(out: str) -> None:
    rows = _json_lines(out)
    packing = _one(rows, part="packing")
    assert packing["forward_backward_s"]["padded"] > 0 and packing["forward_backward_s"]["padding_free"] > 0
    assert packing["max_log_prob_diff"] < 1e-3  # padded and packed agree
    trainer = _one(rows, part="trainer")
    assert trainer["smoke"] is True and trainer["steps"] == 1 and trainer["frames"].startswith("2x")
    assert trainer["step_s"]["decode"] > 0 and trainer["step_s"]["cache"] > 0 and trainer["step_s_unshared"] > 0
    assert trainer["driver_bytes_per_prompt"] > 0 and trainer["previous_path_bytes_per_prompt_per_destination"] > 0
    load = trainer["model_load_peak_rss_mb_per_rank"]
    assert len(load["every_rank_reads"]) == len(load["rank0_reads_meta_elsewhere"]) == trainer["world_size"]
    table = _table(out)
    assert {"decode", "cache", "cache, unshared"} <= set(table)


def check_gpu_smoke(out: str) -> None:
    rows = _json_lines(out)
    assert _one(rows, ok=True)
    suite = next(r["suite"] for r in rows if "suite" in r)
    assert suite["suite_failed"] == 0 and suite["suite_items_per_s"] > 0 and suite["sync_items_per_s"] > 0
    (family,) = [next(iter(r.values())) for r in rows if len(r) == 1 and next(iter(r)) not in ("suite", "ok", "imports")]
    imports = _one(rows, imports=next(r["imports"] for r in rows if "imports" in r))["imports"]
    assert imports["attention_ok"] and imports["transformers"], imports  # sdpa: packed = padded on the CPU
    assert family["steps"] == 1 and family["grpo_seconds"] > 0 and family["time/step_s"] > 0
    assert family["cached_frames_equal"] and family["cached_generation_equal"]
    assert family["perf/tokens_per_s_per_device"] > 0 and family["plan_total_gib"] > 0  # the GPU run's figures


def check_gpu_bare(out: str) -> None:
    rows = _json_lines(out)
    assert _one(rows, ok=True)
    parts = {k: v for r in rows for k, v in r.items() if k != "ok"}
    assert set(parts) == {"env", "positions", "logprob_memory", "train", "profile"}, parts
    assert all(v["ok"] for v in parts.values()), parts
    assert parts["env"]["attention_ok"] and parts["positions"]["same_positions"], parts
    train = parts["train"]
    assert train["update_tokens_per_s"] > 0 and train["plan_total_gib"] >= 0 and train["sequence_tokens"] > 0, train
    profile = parts["profile"]  # both vision-attention paths timed, split into the tower, the decoder and the rest
    for path in ("per_window", "varlen"):
        split = profile[path]
        assert split["update_s"] > 0 and split["vision_forward_s"] > 0 and split["decoder_forward_s"] > 0, profile
    assert profile["vision_attention_speedup"] > 0 and profile["top_cpu_ops [name, calls, s]"], profile


def check_any(out: str) -> None:
    """A benchmark without a checker of its own: its JSON line(s) or Markdown table."""
    assert _json_lines(out) or _table(out), "no JSON line and no Markdown table in the output"


def check_bench_imports(out: str) -> None:
    row = _one(_json_lines(out), bench="actor_imports")
    assert row["smoke"] is True and row["lean_s"] > 0 and row["before_s"] > 0, row
    assert row["sklearn_loaded"] == {"lean": False, "before": True}, row  # both ways ran as named


def check_bench_logprob_memory(out: str) -> None:
    (row,) = _json_lines(out)
    assert row["smoke"] and row["same_values"] and row["train_ratio"] > 0 and row["score_ratio"] > 0, row


def check_bench_vllm(out: str) -> None:
    (row,) = [r for r in _json_lines(out) if r.get("size") == "tiny"]
    assert row["smoke"] and row["vllm_tokens_per_s"] > 0 and row["sync_bytes"] > 0, row


def check_bench_rollout_scale(out: str) -> None:
    rows = _json_lines(out)
    separate, colocated = _one(rows, mode="separate"), _one(rows, mode="colocated")
    assert separate["engines"] == 1 and colocated["engines"] == 2, rows
    for row in (separate, colocated):
        assert row["sync_bytes"] == 2 * row["model_bf16_bytes"] and row["gen_tokens_per_s"] > 0, row  # fp32 engines
        assert row["step_s"] > 0 and row["peak_tree_rss_gb"] > 0 and 0 <= row["idle_frac"] < 1, row
    assert separate["sync_buckets"] >= 1 and colocated["sync_buckets"] == 0, rows


def check_bench_async(out: str) -> None:
    rows = _json_lines(out)
    summary = _one(rows, summary=True)
    for mode in ("synchronous", "one_step_off", "bounded"):
        row = _one(rows, mode=mode)
        assert row["step_s"] > 0 and row["tokens_per_s"] > 0, row
    assert _one(rows, mode="synchronous")["staleness_max"] == 0.0
    assert _one(rows, mode="one_step_off")["staleness_max"] == 1.0
    assert summary["speedup_one_step_off"] > 0 and summary["predicted_speedup"] >= 1.0, summary


def check_bench_step_syncs(out: str) -> None:
    """Issue 33 item 11: the step's own code waits for the device once per pass (log-probs: the copies; update:
    the grad norm per mini-batch and the metrics per step), copies nothing to it from pageable memory, and
    the model's rope positions and the chunked log-probs' valid positions are worked out on the host."""
    (row,) = _json_lines(out)
    for mode in ("shared", "unshared"):
        for name, allowed in (("log_probs", {"stream_sync (step)"}), ("update", {"__float__ (step)", "tolist (step)"})):
            figures = row[mode][name]
            step_waits = {op for op in figures["waits_by_op"] if op.endswith("(step)")}
            blocking = figures["h2d_blocking_per_micro_batch"]  # evr1's copies; transformers' own are not ours
            assert step_waits <= allowed and blocking["step"] == blocking["evr1.models"] == 0, (mode, name, figures)
            assert sum(figures["h2d_async_per_micro_batch"].values()) > 0, (mode, name, figures)
            # The rope positions and the packed layout are the host's work (`with_host_positions`): no device
            # wait in `get_rope_index`, nor in the packing, nor in the shared prefix's rope offset.
            rope = {f for f in figures["waits_by_function"]
                    if "get_rope_index" in f or f.startswith(("packed.py:", "shared_prefix.py:_rope_delta"))}
            assert not rope, (mode, name, figures["waits_by_function"])
            # Nor anywhere else in evr1's model code: the chunked log-probs take their valid positions
            # from the host (`ModelBatch.response_index`, `pad_responses`) instead of a `nonzero` there.
            assert figures["host_waits_per_micro_batch"]["evr1.models"] == 0, (mode, name, figures["waits_by_function"])


CHECKS = {f"{name[len('check_'):]}.py": fn for name, fn in globals().items() if name.startswith("check_")}


@pytest.mark.slow
@pytest.mark.parametrize("name", _benchmarks())
def test_smoke_run(name):
    if name in NEEDS:
        module, why = NEEDS[name]
        if importlib.util.find_spec(module) is None:
            pytest.skip(why)
    if not _smoke_flag(BENCHMARKS / name):
        pytest.fail(f"benchmarks/{name} has no --smoke flag (see test_has_a_smoke_flag)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, f"benchmarks/{name}", "--smoke"], cwd=ROOT, env=env, check=False,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, f"{name} --smoke exited {proc.returncode} after {seconds:.0f} s:\n{proc.stderr[-6000:]}"
    print(f"{name} --smoke: {seconds:.1f} s")
    CHECKS.get(name, check_any)(proc.stdout)


def test_every_checker_names_a_benchmark():
    assert set(CHECKS) - {"any.py"} <= set(_benchmarks())


@pytest.mark.slow
def test_bench_train_default_prompt_fits_its_limit(tmp_path):
    """bench_train's default clips (64 frames at 384×672 from 720p) make a ~8,450-token prompt, over
    `data.max_prompt_tokens`' default of 8,192: its config raises the limit so that the prompt is not skipped.
    The prompt is built as the benchmark builds it (`previous_path_message`), from a 3 s clip of the same
    720p source (its timestamps, and so its text, are a few tokens shorter than a 30 s clip's)."""
    saved = list(sys.path)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_train  # it puts the repository root and benchmarks/ on sys.path itself
    finally:
        sys.path[:] = saved
    from evr1.config import load_config
    from evr1.models import make_tiny
    from evr1.models.prompt_length import effective_limit, model_positions

    args = argparse.Namespace(smoke=False, size="tiny", steps=3, clips=2, n=4, max_new_tokens=8, world_size=2,
                              device="cpu")
    clip = bench_train.make_clip(tmp_path / "clip.mp4", 3, seed=0)
    model_dir = make_tiny(bench_train.FAMILY[args.size], tmp_path / "model", seed=0, **bench_train.SIZES[args.size])
    overrides = bench_train.trainer_overrides(args, tmp_path / "train.jsonl", model_dir, tmp_path / "runs", "float32")
    cfg = load_config(ROOT / "conf" / "tiny.yaml", overrides)
    _, _, prompt = bench_train.previous_path_message(model_dir, cfg, bench_train._records([clip]))
    limit = effective_limit(cfg.data.max_prompt_tokens, model_positions(model_dir), cfg.rollout.max_new_tokens)
    assert prompt.videos[0].frames.shape[:3] == (64, 384, 672)
    assert 8192 < len(prompt) <= limit - 64, (len(prompt), limit)

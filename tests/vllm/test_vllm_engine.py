"""The project's VLLMEngine against the trainer and the HF engine, on vLLM's real code path (CPU, fp32).

Per family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and kind (text, image, video, several videos, image +
video, and a video whose temporal extent exceeds its spatial one):

- the prompt vLLM runs is `encode_prompt(...).input_ids`, timestamps included;
- greedy tokens equal the HF engine's, and vLLM's per-token log-probs equal the trainer's
  (`response_log_probs`, padded and packed) within 1e-4;
- after a weight sync to perturbed weights, every prompt and medium served before gives the new
  weights' HF output (caches follow), and after syncing back the old one;
- once with vLLM's default multiprocess engine, where every RPC crosses process boundaries.

Tiny models: head_dim 32 (vLLM's CPU attention has no 16) and prompt-dependent weights (default
tiny weights emit one token whatever the prompt, so equal greedy tokens would prove nothing).
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

from evr1.engines import SamplingParams
from evr1.engines.hf import HFEngine
from evr1.engines.vllm_engine import VLLMEngine
from evr1.models import load_adapter, make_tiny
from evr1.models.packed import packed_response_log_probs
from evr1.models.runtime import response_log_probs
from evr1.models.tiny import VLLM_SIZES
from evr1.train.weight_sync import iter_sync_weights
from evr1.video.clip import VideoClip

pytestmark = pytest.mark.vllm

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
KINDS = ("text", "image", "video", "videos", "image_video", "long_video")
TOL = 1e-4
GREEDY = SamplingParams(n=1, max_new_tokens=12, temperature=0.0, logprobs=True)
ENGINE = {"dtype": "float32", "enforce_eager": True, "max_model_len": 4096, "kv_cache_gib": 0.5, "seed": 0}


def _clip(side: int, t: int, seed: int) -> VideoClip:
    frames = np.random.default_rng(seed).integers(0, 256, (t, side, side, 3), dtype=np.uint8)
    return VideoClip(frames=frames, fps=2.0, frame_indices=list(range(0, 2 * t, 2)), total_frames=2 * t, duration=t)


def _image(f: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (2 * f, 3 * f, 3), dtype=np.uint8)


def make_prompts(adapter) -> dict:
    """One prompt per kind. `long_video`: 8 frames of 2×2 merged tokens, so its temporal positions
    (Qwen2.5-VL: 0, 4, 8, 12; Qwen2-VL: 0..3) pass its spatial ones (0..1)."""
    f = adapter.video.factor
    enc = adapter.encode_prompt
    return {
        "text": enc("Question: what color is the square moving left? Options: A. red B. blue"),
        "image": enc("<image>Describe the image. Which object appears first?", images=[_image(f, 1)]),
        "video": enc("<video>What happens in this video? Answer yes or no.", videos=[_clip(2 * f, 4, 2)]),
        "videos": enc("<video>first clip, <video>second clip: which moves right?",
                      videos=[_clip(2 * f, 4, 3), _clip(2 * f, 6, 4)]),
        "image_video": enc("<image>this frame <video>and this video: count the objects.",
                           images=[_image(f, 5)], videos=[_clip(2 * f, 4, 6)]),
        "long_video": enc("<video>How many seconds does the red circle move?", videos=[_clip(2 * f, 8, 7)]),
    }


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_models")
    return {fam: make_tiny(fam, root / fam, seed=11, init="prompt_dependent", **VLLM_SIZES) for fam in FAMILIES}


def build_vllm(model_dir, *, multiprocess: bool, **kwargs) -> VLLMEngine:
    import vllm.envs

    vllm.envs.disable_envs_cache()  # an in-process engine core caches the env: read it afresh
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocess else "0"
    return VLLMEngine.from_pretrained(model_dir, **{**ENGINE, **kwargs})


def close(engine: VLLMEngine) -> None:
    engine.llm.llm_engine.engine_core.shutdown()
    del engine
    gc.collect()


class Family:
    """One family's engines and prompts, built once per module and family."""

    def __init__(self, name: str, model_dir) -> None:
        self.name = name
        self.model_dir = model_dir
        self.adapter = load_adapter(model_dir)
        self.prompts = make_prompts(self.adapter)
        self.hf = HFEngine.from_pretrained(model_dir, dtype=torch.float32, device="cpu")
        self.base = {k: v.detach().clone() for k, v in self.hf.model.state_dict().items()}
        self.vllm = build_vllm(model_dir, multiprocess=False)

    def perturbed(self, seed: int = 5, scale: float = 0.05) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {k: (v + scale * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v)
                for k, v in self.base.items()}


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, model_dirs):
    f = Family(request.param, model_dirs[request.param])
    yield f
    close(f.vllm)


def trainer_log_probs(hf: HFEngine, adapter, prompt, tokens: list[int], *, packed: bool) -> list[float]:
    """The trainer's log-probs of `tokens` after `prompt` (evr1.models.runtime / packed)."""
    batch = adapter.collate([prompt], [tokens]).to("cpu", dtype=torch.float32)
    with torch.no_grad():
        lp, _ = (packed_response_log_probs if packed else response_log_probs)(hf.model, batch)
    return lp[0, : len(tokens)].tolist()


def assert_parity(f: Family, kinds=KINDS) -> None:
    """Greedy tokens equal the HF engine's; vLLM's log-probs equal the trainer's (padded and packed)."""
    prompts = [f.prompts[k] for k in kinds]
    ours = f.vllm.generate(prompts, GREEDY)
    theirs = f.hf.generate(prompts, GREEDY)
    for kind, prompt, (v,), (h,) in zip(kinds, prompts, ours, theirs):
        assert v.token_ids == h.token_ids, f"{f.name} {kind}: vLLM {v.token_ids} != HF {h.token_ids}"
        assert v.logprobs is not None and len(v.logprobs) == len(v.token_ids)
        for packed in (False, True):
            ref = trainer_log_probs(f.hf, f.adapter, prompt, v.token_ids, packed=packed)
            gap = max(abs(a - b) for a, b in zip(v.logprobs, ref))
            assert gap <= TOL, f"{f.name} {kind}: |Δ log-prob| {gap:.2e} > {TOL} (packed={packed})"


@pytest.mark.parametrize("kind", KINDS)
def test_vllm_runs_the_trainers_prompt(fam, kind):
    prompt = fam.prompts[kind]
    from vllm import SamplingParams as VSP

    (out,) = fam.vllm.llm.generate([fam.vllm._request(prompt)], VSP(max_tokens=1, temperature=0), use_tqdm=False)
    assert list(out.prompt_token_ids) == prompt.input_ids
    if kind != "text":
        assert len(fam.vllm._request(prompt)["prompt_token_ids"]) < len(prompt.input_ids)  # sent folded


def test_outputs_depend_on_the_prompt(fam):
    outs = fam.vllm.generate(list(fam.prompts.values()), GREEDY)
    assert len({tuple(o[0].token_ids) for o in outs}) >= 3


def test_greedy_tokens_and_log_probs_equal_hf_and_trainer(fam):
    assert_parity(fam)


def test_seeds_make_a_prompts_samples_its_own(fam):
    """With per-prompt seeds, a prompt's samples are the same alone and within a call of 3 in another order."""
    sample = {"n": 2, "max_new_tokens": 8, "temperature": 1.0}
    p = fam.prompts
    (alone,) = fam.vllm.generate([p["text"]], SamplingParams(**sample, seeds=(11,)))
    mixed = fam.vllm.generate([p["video"], p["text"], p["image"]], SamplingParams(**sample, seeds=(13, 11, 12)))
    assert [len(row) for row in mixed] == [2, 2, 2]
    assert [g.token_ids for g in mixed[1]] == [g.token_ids for g in alone]
    with pytest.raises(ValueError, match="field seeds has 2 seeds for a call of 3 prompts"):
        fam.vllm.generate([p["video"], p["text"], p["image"]], SamplingParams(**sample, seeds=(1, 2)))


def test_long_video_exercises_the_position_rule(fam):
    """The long video is where transformers 5.19's own rule would differ from vLLM's (defect D)."""
    if fam.name == "qwen3_vl":
        pytest.skip("Qwen3-VL: one temporal position per frame group; the rules agree")
    inner = fam.hf.model.model
    batch = fam.adapter.collate([fam.prompts["long_video"]])
    kw = dict(input_ids=batch.input_ids, mm_token_type_ids=batch.mm_token_type_ids,
              attention_mask=batch.attention_mask,
              **{k: batch.mm[k] for k in ("video_grid_thw", "second_per_grid_ts") if k in batch.mm})
    ours, _ = inner.get_rope_index(**kw)
    transformers_rule, _ = type(inner).evr1_transformers_get_rope_index(inner, **kw)
    assert not torch.equal(ours, transformers_rule)


def test_weight_sync_moves_weights_and_the_caches_follow(fam):
    prompts = list(fam.prompts.values())
    assert_parity(fam)  # served first: prefix and encoder caches now hold the base weights' results
    old = [o[0].token_ids for o in fam.vllm.generate(prompts, GREEDY)]
    new = fam.perturbed()
    try:
        report = fam.vllm.update_weights(new.items(), bucket_bytes=1 << 20)
        fam.hf.update_weights(new)
        assert report.tensors == len(new) and report.buckets >= 1
        assert report.bytes == sum(t.numel() * 4 for t in new.values())  # sent in the engine's fp32
        assert_parity(fam)
        assert [o[0].token_ids for o in fam.vllm.generate(prompts, GREEDY)] != old  # the sync changed outputs
    finally:
        fam.vllm.update_weights(fam.base)
        fam.hf.update_weights(fam.base)
    assert_parity(fam)
    assert [o[0].token_ids for o in fam.vllm.generate(prompts, GREEDY)] == old


def test_the_trainers_sync_stream_reaches_a_tied_output_projection(fam):
    """What a policy rank sends (`iter_sync_weights`, one FSDP unit at a time) into vLLM, for a model
    that ties `lm_head` to the embedding (the tiny models do, as Qwen's small ones). Sent once under the
    checkpoint's name, vLLM's `lm_head` keeps its old weights (its layerwise reload loses the tie): the
    parity fails. Sent under both names (`VLLMEngine.sync_tied_names`), vLLM follows the policy."""
    assert VLLMEngine.sync_tied_names
    new = fam.perturbed(seed=13)
    new["lm_head.weight"] = new["model.language_model.embed_tokens.weight"]  # tied, as the policy's are
    try:
        fam.hf.update_weights(new)
        model = fam.hf.model
        assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
        once = list(iter_sync_weights(model, dtype=torch.float32))
        assert "lm_head.weight" not in dict(once)
        fam.vllm.update_weights(once)
        with pytest.raises(AssertionError, match="log-prob|HF"):
            assert_parity(fam, ("text",))
        fam.vllm.update_weights(iter_sync_weights(model, dtype=torch.float32, tied_names=True))
        assert_parity(fam)
    finally:
        fam.vllm.update_weights(fam.base)
        fam.hf.update_weights(fam.base)
    assert_parity(fam, ("text",))


def test_weight_sync_in_the_default_multiprocess_engine(model_dirs):
    """vLLM's default engine (core and worker in their own processes): the sync's RPCs cross both hops."""
    f = Family.__new__(Family)
    f.name, f.model_dir = "qwen2_5_vl", model_dirs["qwen2_5_vl"]
    f.adapter = load_adapter(f.model_dir)
    f.prompts = make_prompts(f.adapter)
    f.hf = HFEngine.from_pretrained(f.model_dir, dtype=torch.float32, device="cpu")
    f.base = {k: v.detach().clone() for k, v in f.hf.model.state_dict().items()}
    f.vllm = build_vllm(f.model_dir, multiprocess=True)
    try:
        kinds = ("text", "image", "video", "long_video")
        assert_parity(f, kinds)
        new = f.perturbed(seed=9)
        report = f.vllm.update_weights(new, bucket_bytes=256 << 10)
        assert report.buckets > 1
        f.hf.update_weights(new)
        assert_parity(f, kinds)
        f.vllm.update_weights(f.base)
        f.hf.update_weights(f.base)
        assert_parity(f, kinds)
    finally:
        close(f.vllm)


def _keyed(clip: VideoClip, key: str) -> VideoClip:
    """`clip` as the frame cache returns it: its key in `extra["cache_key"]` (evr1/cache/store.py)."""
    return VideoClip(frames=clip.frames, fps=clip.fps, frame_indices=list(clip.frame_indices),
                     total_frames=clip.total_frames, duration=clip.duration, extra={"cache_key": key})


def test_cached_videos_reach_vllm_by_their_cache_key(fam):
    """A video from the frame cache goes to vLLM with its key as `multi_modal_uuids` (vLLM hashes the
    key, not 64 frames); the generation is the one vLLM computes from the frames (parity with HF and
    the trainer), and a clip without a key is hashed by vLLM as before."""
    from vllm import SamplingParams as VSP

    f = fam.adapter.video.factor
    a, b = _clip(2 * f, 4, 21), _clip(2 * f, 6, 22)
    keyed = fam.adapter.encode_prompt("<video>first clip, <video>second clip: which moves right?",
                                      videos=[_keyed(a, "k-a"), b])
    request = fam.vllm._request(keyed)
    uuids = request["multi_modal_uuids"]["video"]
    assert uuids[0].startswith("evr1:k-a:4x") and uuids[1] is None
    assert "multi_modal_uuids" not in fam.vllm._request(fam.prompts["video"])  # no cache key: nothing sent
    plain = fam.adapter.encode_prompt("<video>first clip, <video>second clip: which moves right?", videos=[a, b])
    ((with_key,),), ((without,),) = fam.vllm.generate([keyed], GREEDY), fam.vllm.generate([plain], GREEDY)
    assert with_key.token_ids == without.token_ids and with_key.logprobs == pytest.approx(without.logprobs, abs=TOL)
    fam.prompts["keyed_videos"] = keyed
    try:
        assert_parity(fam, ("keyed_videos",))
    finally:
        del fam.prompts["keyed_videos"]
    # vLLM trusts the key: what it computed for one set of pixels serves another under the same key
    # (the prefix cache holds the first request's vision tokens). Hence `media_uuid` is the frame
    # cache's content key, and takes in the shape and frame indices the clip arrived with.
    other = _clip(2 * f, 4, 23)
    first = fam.adapter.encode_prompt("<video>What happens in this video? Answer yes or no.", videos=[_keyed(a, "same")])
    second = fam.adapter.encode_prompt("<video>What happens in this video? Answer yes or no.",
                                       videos=[_keyed(other, "same")])
    unkeyed = fam.adapter.encode_prompt("<video>What happens in this video? Answer yes or no.", videos=[other])
    greedy = VSP(max_tokens=8, temperature=0)
    out = [fam.vllm.llm.generate([fam.vllm._request(p)], greedy, use_tqdm=False)[0].outputs[0].token_ids
           for p in (first, second, unkeyed)]
    assert list(out[1]) == list(out[0]) and list(out[2]) != list(out[0])


def test_media_uuid_follows_what_could_change_the_pixels():
    from evr1.engines.vllm_engine import media_uuid

    base = _keyed(_clip(8, 4, 1), "k")
    assert media_uuid(_clip(8, 4, 1)) is None
    assert media_uuid(base) == media_uuid(_keyed(_clip(8, 4, 1), "k"))
    others = [_keyed(_clip(8, 4, 1), "k2"), _keyed(_clip(8, 6, 1), "k"), _keyed(_clip(16, 4, 1), "k")]
    shifted = _keyed(_clip(8, 4, 1), "k")
    shifted.frame_indices = [i + 1 for i in shifted.frame_indices]
    assert len({media_uuid(c) for c in [base, *others, shifted]}) == 5


def test_stop_strings_still_stop_with_detokenization_off_elsewhere(fam):
    """vLLM detokenizes only when a stop string needs its text (evr1 decodes the ids itself); a stop
    string still ends the sample, and the text is the decoded ids either way."""
    sampled = SamplingParams(n=1, max_new_tokens=12, temperature=0.0)
    (full,) = fam.vllm.generate([fam.prompts["text"]], sampled)[0]
    assert full.text == fam.adapter.decode(full.token_ids)
    assert not fam.vllm._sampling_params(sampled).detokenize
    pieces = [fam.adapter.decode(full.token_ids[: i + 1]) for i in range(len(full.token_ids))]
    cut = next(i for i in range(2, len(pieces)) if pieces[i] != pieces[i - 1] and pieces[i].strip())
    stop = pieces[cut][len(pieces[cut - 1]):].strip() or pieces[cut].strip()[-1]
    stopping = SamplingParams(n=1, max_new_tokens=12, temperature=0.0, stop=(stop,))
    assert fam.vllm._sampling_params(stopping).detokenize
    (short,) = fam.vllm.generate([fam.prompts["text"]], stopping)[0]
    assert stop in short.text and short.token_ids == full.token_ids[: len(short.token_ids)]
    assert len(short.token_ids) <= cut + 1 and short.finish_reason == "stop"


def test_many_seeded_requests_do_not_kill_the_cpu_engine(model_dirs):
    """vLLM 0.32's CPU build dies ("CPU Generator does not use offset") when a chunked prefill
    discards a seeded request's token; `from_pretrained` turns chunked prefill off on the CPU. 32
    prompts × 8 seeded samples: the crash with chunked prefill (the control), a full answer without."""
    adapter = load_adapter(model_dirs["qwen2_5_vl"])
    prompts = [adapter.encode_prompt(f"Question {i}: which of {i % 7} and {i % 5} is larger? Think.") for i in range(32)]
    params = SamplingParams(n=8, max_new_tokens=4, temperature=1.0, seeds=tuple(range(0, 320, 10)))
    engine = build_vllm(model_dirs["qwen2_5_vl"], multiprocess=False, max_model_len=1024)
    try:
        out = engine.generate(prompts, params)
        assert [len(group) for group in out] == [8] * 32
    finally:
        close(engine)
    control = build_vllm(model_dirs["qwen2_5_vl"], multiprocess=False, max_model_len=1024, enable_chunked_prefill=True)
    try:
        with pytest.raises(Exception, match="does not use offset"):
            control.generate(prompts, params)
    finally:
        close(control)

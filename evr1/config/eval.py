"""The sections that configure `evr1.eval`: `eval` and its `judge`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evr1.config.base import Section


class JudgeConfig(Section):
    """The LLM judge for open-ended items (a second pass after scoring; docs/eval.md)."""

    enabled: bool = False
    engine: Literal["hf", "vllm"] = "hf"
    model_path: str | None = None          # None: the evaluated model judges itself (smoke tests only)
    prompt: str | None = None              # a Jinja2 template (text or .jinja path); None: the built-in one
    # Room for a brief reason and the verdict; a thinking judge needs more (or enable_thinking: false below).
    max_new_tokens: int = Field(1024, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    batch_size: int = Field(8, ge=1)
    # Passed to the judge's chat template, e.g. {enable_thinking: false} for Qwen3.
    chat_template_kwargs: dict[str, Any] = {}


class EvalConfig(Section):
    enabled: bool = True
    # Registry names (`evr1 benchmarks` lists them); "heldout" is the run's own held-out split.
    benchmarks: list[str] = ["heldout"]
    # official: each benchmark's own rules (bugs fixed); easyvideor1: the reference project's scorer.
    profile: Literal["official", "easyvideor1"] = "official"
    # Folder of annotation files (e.g. ../shared/benchmarks/annotations); `files` overrides per benchmark.
    annotations_dir: str | None = None
    files: dict[str, str] = {}
    # Folder holding each benchmark's video root (Video-MME/, MVBench/, …); `video_roots` overrides per benchmark.
    data_dir: str | None = None
    video_roots: dict[str, str] = {}
    subtitles: bool = False
    # A Lance frames table holding the benchmarks' videos (`evr1 cache`); None: the run's own cache, if any.
    frames_uri: str | None = None
    # Prompt style of the model family: auto (from the model directory), qwen3 (Qwen3-VL, 3.5) or qwen25.
    family: Literal["auto", "qwen3", "qwen25"] = "auto"
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    stop: list[str] = []  # as rollout.stop: strings that end a response (kept in it)
    # vLLM only (Qwen3-VL's Instruct setting, and EasyVideoR1's scripts, use 1.5); the HF engine refuses it.
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    batch_size: int = Field(8, ge=1)
    concurrency: int = Field(4, ge=1)
    queue_size: int = Field(16, ge=1)
    # Data-parallel engine replicas (one per GPU, each a Ray actor off the flow's process) fed from the one
    # queue of the whole suite; tensor_parallel GPUs per replica (vLLM) for a model one GPU cannot hold.
    engines: int = Field(1, ge=1)
    tensor_parallel: int = Field(1, ge=1)
    timeout_s: float = Field(300.0, gt=0.0)
    thinking: bool = False
    limit: int | None = Field(None, ge=1)
    # Row of evr1.eval.reference to set results beside (e.g. "qwen3-vl-8b-instruct"); None: no comparison.
    reference_model: str | None = None
    judge: JudgeConfig = JudgeConfig()

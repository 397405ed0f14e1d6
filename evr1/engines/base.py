"""What every generation engine takes and returns, and the registry that builds one by name.

Rollout (training) and evaluation share these types so an engine can be swapped by config:
`hf` (transformers, CPU or GPU) or `vllm` (GPU worker image only, imported lazily).
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from evr1.models.adapter import PromptInputs

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `temperature == 0` means greedy; `top_k == 0` and `top_p == 1` disable those filters."""

    n: int = 1
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    # One seed per prompt of the call (empty: none). When given, prompt i's `n` samples depend only
    # on its inputs, seeds[i], the model and the other fields here: not on the other prompts of the
    # call, their order, the engine's batch size or which engine instance runs it (so 1 engine and
    # N engines each given their share of the prompts, with their seeds, sample the same). `seed` is
    # then ignored. Each in [0, 2**63): vLLM reads -1 as "no seed", and seeds each of a prompt's n
    # samples with seeds[i] + j, so space a call's seeds at least n apart (or hash them) where the
    # same prompt may appear under two seeds. Greedy decoding ignores them (it is deterministic).
    seeds: tuple[int, ...] = ()
    # vLLM's presence penalty (Qwen3-VL's recommended Instruct setting is 1.5); transformers has none.
    presence_penalty: float = 0.0
    # Strings that end a response (kept in it, like vLLM's include_stop_str_in_output), e.g.
    # "</answer>": what a policy writes after its answer is never scored, only trained on as noise.
    stop: tuple[str, ...] = ()
    # Return each sampled token's log-prob (`Generation.logprobs`), e.g. to log the rollout-vs-trainer
    # gap. HF: log_softmax(raw logits / temperature), no top-p / top-k filtering (greedy: temperature
    # 1), as the trainer computes them; vLLM: per its `logprobs_mode` (raw, or after its processors).
    logprobs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))  # a list after a trip through Ray
        object.__setattr__(self, "seeds", tuple(
            int(x) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else x for x in self.seeds))
        checks = {
            "n": self.n >= 1,
            "max_new_tokens": self.max_new_tokens >= 1,
            "temperature": self.temperature >= 0,
            "top_p": 0 < self.top_p <= 1,
            "top_k": self.top_k >= 0,
            "presence_penalty": -2.0 <= self.presence_penalty <= 2.0,
            "stop": all(isinstance(x, str) and x for x in self.stop),
            "seeds": all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63 for x in self.seeds),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"SamplingParams: field {name} has invalid value {getattr(self, name)!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def prompt_seeds(self, num_prompts: int) -> tuple[int, ...] | None:
        """`seeds` checked against a call of `num_prompts` prompts, or None when not given."""
        if not self.seeds:
            return None
        if len(self.seeds) != num_prompts:
            raise ValueError(f"SamplingParams: field seeds has {len(self.seeds)} seeds for a call of "
                             f"{num_prompts} prompts (one seed per prompt)")
        return self.seeds


@dataclass
class Generation:
    """One sampled response: token ids (ending with the eos token when `finish_reason == "stop"`)."""

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None  # per token, when asked for (`SamplingParams.logprobs`)


@runtime_checkable
class Engine(Protocol):
    """Generates `params.n` responses for each prompt (outer list: prompts, inner: samples)."""

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]: ...

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]: ...


class EngineBase(abc.ABC):
    """Shared behaviour: `agenerate` runs the blocking `generate` in a worker thread for asyncio callers.

    `concurrent` says whether `agenerate` calls may overlap (vLLM's AsyncLLM batches requests
    continuously); the eval runner then keeps several calls in flight instead of one at a time.
    """

    concurrent: bool = False
    # Whether `generate` takes precomputed vision features (`generate(..., visual=[...])`, one
    # `VisualFeatures` or None per prompt) and `encode_visual(prompts)` makes them: HF does, so a
    # colocated rank with a frozen tower and its engine encode each prompt once between them.
    accepts_visual: bool = False
    # Whether a weight sync must send a tied tensor under each of its names (`weight_sync.iter_sync_weights`'s
    # `tied_names`): vLLM's layerwise reload does not keep the tie its model was built with.
    sync_tied_names: bool = False

    @abc.abstractmethod
    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        """Blocking generation; each engine implements it."""

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        return await asyncio.to_thread(self.generate, prompts, params)


def finish(token_ids: Sequence[int], eos_ids: Sequence[int], max_new_tokens: int) -> tuple[list[int], FinishReason]:
    """Cut a raw continuation at its first eos (kept) and say why it ended.

    Everything after the first eos is padding (or, for pad == eos checkpoints, more eos tokens).
    """
    eos = set(eos_ids)
    out: list[int] = []
    for t in list(token_ids)[:max_new_tokens]:
        out.append(int(t))
        if t in eos:
            return out, "stop"
    return out, "length"


def cut_at_stop(token_ids: Sequence[int], decode: Callable[[Sequence[int]], str],
                stop: Sequence[str]) -> list[int] | None:
    """The shortest prefix of `token_ids` whose text contains one of the `stop` strings, or None.

    Found on decoded prefixes, so a stop string split across tokens (or merged into a longer token)
    ends the response at the token that completes it; by bisection, so a response of thousands of
    tokens costs a dozen decodes (a prefix's text is a prefix of a longer one's)."""
    def has_stop(k: int) -> bool:
        text = decode(token_ids[:k])
        return any(s in text for s in stop)

    if not token_ids or not has_stop(len(token_ids)):
        return None
    low, high = 1, len(token_ids)  # has_stop(high) holds; find the smallest such k
    while low < high:
        mid = (low + high) // 2
        if has_stop(mid):
            high = mid
        else:
            low = mid + 1
    return list(token_ids[:low])


# name → "module:Class"; modules are imported only when an engine of that name is built, so
# `import evr1.engines` never imports vllm.
ENGINES: dict[str, str] = {
    "hf": "evr1.engines.hf:HFEngine",
    "vllm": "evr1.engines.vllm_engine:VLLMEngine",
}


def engine_class(name: str) -> type:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (known: {sorted(ENGINES)})")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)


# Keywords callers (the rollout worker, eval) pass to every engine whatever its name; an engine
# that has no use for one (vLLM batches by itself and picks its own device) simply does not get it.
COMMON_KWARGS: frozenset[str] = frozenset({"batch_size", "device", "dtype", "asynchronous"})


def engine_kwargs(name: str, factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of `kwargs` that `factory` accepts by name.

    A common keyword it does not name is dropped: its `**extra` catch-all (vLLM forwards those to
    `vllm.LLM`, which rejects e.g. `batch_size`) does not count. Any other keyword it does not name
    goes to the catch-all when there is one, else it is a TypeError naming the engine and keyword.
    """
    params = inspect.signature(factory).parameters
    named = {p for p, v in params.items() if v.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY)}
    catch_all = any(v.kind is inspect.Parameter.VAR_KEYWORD for v in params.values())
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in named:
            out[key] = value
        elif key in COMMON_KWARGS:
            continue
        elif catch_all:
            out[key] = value
        else:
            raise TypeError(f"engine {name!r}: unknown keyword {key!r} (it accepts {sorted(named)}; "
                            f"{sorted(COMMON_KWARGS)} are dropped where an engine has no use for them)")
    return out


def make_engine(name: str, **kwargs: Any) -> Engine:
    """Build engine `name`: from a checkpoint when `model_dir=` is given, else from its constructor kwargs.

    Each engine gets only the keywords it accepts (see `engine_kwargs`), so callers can pass the
    common ones (`batch_size`, `device`, `dtype`) whatever the engine.
    """
    cls = engine_class(name)
    if "model_dir" in kwargs:
        model_dir = kwargs.pop("model_dir")
        return cls.from_pretrained(model_dir, **engine_kwargs(name, cls.from_pretrained, kwargs))
    return cls(**engine_kwargs(name, cls, kwargs))

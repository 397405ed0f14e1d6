"""The LLM judge: a second pass after scoring that decides open-ended items.

An item is pending when its newest record in the result store says `needs_judge: True` and is not
`judged`, and either its benchmark's `needs_judge(item)` is true (open-ended items) or the record is
`undecided` (a multiple-choice or numerical answer the official rule stage could not read, such as
`<answer>D</answer>` under Video-MME's rules: the official pipelines hand those to a GPT judge). For a
multiple-choice item the ground truth shown to the judge is the letter with its option text ("D. a red car"). The judge model is asked whether the
model's final answer is semantically consistent with the ground truth; the pass appends one new
record per item (the old record's fields kept) with `score` (the verdict), `judge_output` and
`judged: True`, so a rerun judges nothing twice.

The model's final answer is the record's `pred` when the scorer set one, else the text after the
last "Therefore, the final answer is:" (case-insensitive), else the output; reasoning blocks are
removed first in both fallbacks. An empty answer is not sent: it scores 0 (`judge_note` says why).

Verdict (`parse_verdict`): the LAST "Judgement: 0|1" (case-insensitive; "Judgment", markdown bold
such as `**Judgement**: 1` tolerated) after the judge's reasoning blocks are removed. Deviations
from EasyVideoR1's `llm_judge.py` (spec §5.5, §7 item 10), all deliberate:
- no "the output ends with 1" fallback: a verdict that cannot be read scores 0 and is recorded
  with `judge_error` (still `judged`: the judge answered; rerunning would ask it the same thing);
- the prompt goes through the judge model's chat template (the reference sent raw text to a chat model);
- which items are judged is the benchmark's `needs_judge`, not the exact type string "open-ended".

Judging runs through the evaluation runner (`run_items`: bounded concurrency, batches, a timeout
per prompt and per engine call, never two engine calls at once) with a scratch store of the pass's
own. The runner's failure records (a prompt that cannot be built, an engine error, a timeout) go
there and come back to the result store as `judge_error` + `judge_stage` on a copy of the item's
record, NOT `judged`, so the next pass retries them; they never carry `error`, so the
evaluation's resume does not regenerate the model's answer (a runner failure record in the
result store itself would have replaced the output and done exactly that).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evr1.eval import aio
from evr1.engines import Engine, SamplingParams, make_engine
from evr1.eval.prompting import question, strip_reasoning
from evr1.eval.runner import run_items
from evr1.eval.store import ResultStore
from evr1.models.batch import PromptInputs

# EasyVideoR1's judge prompt (spec §5.5), as a template over `question`, `ground_truth`, `answer`.
DEFAULT_TEMPLATE = (
    'Judge whether the model answer is semantically consistent with the ground truth answer. Reply with a brief '
    'reason, then output "Judgement: 1" if consistent or "Judgement: 0" if not.\n\n'
    "Ground Truth: {{ ground_truth }}\n"
    "Model Answer: {{ answer }}"
)
_TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2")
_VERDICT = re.compile(r"\bjudge?ment[*_\s]*[:：][*_\s]*([01])(?![0-9]|\.[0-9])", re.IGNORECASE)
_OPEN_THINK = re.compile(r"<(?:think|analysis)>", re.IGNORECASE)
_MARKER = re.compile(r"therefore,\s*the\s+final\s+answer\s+is\s*:", re.IGNORECASE)
# Fields a judge record sets; a new judge record starts from the old record without them.
JUDGE_FIELDS = ("judge_output", "judged", "judge_error", "judge_stage", "judge_note")

_env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)


class JudgeError(ValueError):
    """A judge template or setting that cannot be used; the message names the field."""


# ---- parsing ------------------------------------------------------------------------------------
def parse_verdict(output: str) -> int | None:
    """1 or 0 from the last "Judgement: 0|1" outside reasoning blocks; None when there is none.

    An unterminated `<think>` (a judge cut off mid-reasoning) is dropped to the end of the text:
    a tentative verdict inside it is not the judge's answer.
    """
    text = strip_reasoning(output or "")
    opened = _OPEN_THINK.search(text)
    if opened:
        text = text[: opened.start()]
    found = _VERDICT.findall(text)
    return int(found[-1]) if found else None


def final_answer(record: Mapping[str, Any]) -> str:
    """The model's final answer in a result record: `pred`, else after the marker, else the output."""
    pred = record.get("pred")
    if pred is not None and str(pred).strip():
        return str(pred).strip()
    text = strip_reasoning(str(record.get("output") or ""))
    markers = list(_MARKER.finditer(text))
    return text[markers[-1].end():].strip() if markers else text


def ground_truth(item: Mapping[str, Any]) -> str:
    """The ground truth as the judge sees it: a choice letter with its option text, else `gt`."""
    gt = str(item.get("gt", ""))
    letters, texts = list(item.get("letters") or ()), list(item.get("option_texts") or ())
    if gt in letters and len(texts) == len(letters) and texts[letters.index(gt)]:
        return f"{gt}. {texts[letters.index(gt)]}"
    return gt


# ---- prompts ------------------------------------------------------------------------------------
def load_template(template: str | os.PathLike[str] | None) -> Template:
    """A sandboxed template from text or a file (a path object, or one line ending in .jinja/.jinja2/.j2)."""
    if template is None:
        template = DEFAULT_TEMPLATE
    is_path = isinstance(template, os.PathLike) or (
        "\n" not in template and template.strip().endswith(_TEMPLATE_SUFFIXES))
    if is_path:
        path = Path(template)
        if not path.is_file():
            raise JudgeError(f"judge field 'prompt': template file {str(path)!r} does not exist")
        template = path.read_text(encoding="utf-8")
    try:
        return _env.from_string(str(template))
    except TemplateError as e:
        raise JudgeError(f"judge field 'prompt': not a valid Jinja2 template: {e}") from None


class ChatPrompter:
    """Text-only chat prompts for the judge model: its tokenizer and chat template, no media.

    A Qwen-VL directory is read through evr1's adapter (its template may live in
    chat_template.jinja); any other directory (a text-only LLM) through its own tokenizer.
    `chat_template_kwargs` reach the template (e.g. `{"enable_thinking": False}` for Qwen3).
    """

    def __init__(self, model_dir: str | os.PathLike[str], *, chat_template_kwargs: Mapping[str, Any] | None = None):
        from evr1.models import load_adapter

        try:
            adapter = load_adapter(model_dir)
            self.tokenizer, self.chat_template = adapter.tokenizer, adapter.chat_template
        except ValueError:  # not a Qwen-VL family checkpoint: a text-only judge
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            self.chat_template = self.tokenizer.chat_template
            if not self.chat_template:
                raise JudgeError(f"judge model {model_dir}: its tokenizer has no chat template") from None
        self.kwargs = dict(chat_template_kwargs or {})
        self.specials = [t for t in self.tokenizer.all_special_tokens if t]

    def clean(self, text: str) -> str:
        """Special-token strings removed from data (a stray `<|video_pad|>` would break the model)."""
        for tok in self.specials:
            text = text.replace(tok, "")
        return text

    def __call__(self, text: str) -> PromptInputs:
        chat = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], chat_template=self.chat_template,
                                                  tokenize=False, add_generation_prompt=True, **self.kwargs)
        ids = list(self.tokenizer(chat, add_special_tokens=False)["input_ids"])
        return PromptInputs(input_ids=ids, mm_token_type_ids=[0] * len(ids), mm={}, text=chat)


# ---- the pass -----------------------------------------------------------------------------------
@dataclass
class JudgeCounts:
    """What one pass did: `pending` items were asked about; `skipped` were judged before."""

    pending: int = 0
    judged: int = 0          # got a verdict record (unparseable ones included, scored 0)
    correct: int = 0         # verdict 1
    unparseable: int = 0     # the judge answered without a readable verdict
    failed: int = 0          # prompt, engine error or timeout: retried by the next pass
    skipped: int = 0         # already judged


class Judge:
    """A judge model behind any evr1 engine, its prompt template and sampling settings."""

    def __init__(self, engine: Engine, prompter: Callable[[str], PromptInputs], *,
                 template: str | os.PathLike[str] | None = None, max_new_tokens: int = 256,
                 temperature: float = 0.0, batch_size: int = 8, timeout_s: float = 600.0, seed: int | None = 0):
        if batch_size < 1 or timeout_s <= 0:
            raise JudgeError(f"judge fields batch_size ({batch_size}) and timeout_s ({timeout_s}) must be positive")
        self.engine, self.prompter = engine, prompter
        self.template = load_template(template)
        self.sampling = SamplingParams(n=1, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
        self.batch_size, self.timeout_s = batch_size, timeout_s

    def prompt_text(self, item: Mapping[str, Any], record: Mapping[str, Any]) -> str:
        clean = getattr(self.prompter, "clean", lambda s: s)
        return self.template.render(question=clean(question(item)), ground_truth=clean(ground_truth(item)),
                                    answer=clean(final_answer(record)))

    async def run(self, items: Sequence[Mapping[str, Any]], store: ResultStore,
                  needs_judge: Callable[[Mapping[str, Any]], bool], *, concurrency: int = 2) -> JudgeCounts:
        """Judge every pending item of `items` in `store`; return the counts of this pass.

        The questions go through `run_items` (prompts built by `concurrency` threads, batches of
        `batch_size`, one engine call at a time, `timeout_s` per prompt and per call) with a
        scratch store of this pass's own: the runner's failure records land there, and are
        turned into `judge_error` records that keep the item's old fields (see the module doc).
        """
        counts = JudgeCounts()
        pending: dict[str, dict] = {}
        asked: list[Mapping[str, Any]] = []
        for item in items:
            rec = store.results.get(str(item["id"]))
            if rec is None or not rec.get("needs_judge") or not (needs_judge(item) or rec.get("undecided")):
                continue
            if rec.get("judged"):
                counts.skipped += 1
                continue
            counts.pending += 1
            if final_answer(rec):
                pending[str(item["id"])] = rec
                asked.append(item)
            else:
                verdict(store, rec, "", 0, counts, note="empty answer: not sent to the judge")

        def load(item: Mapping[str, Any]) -> PromptInputs:
            return self.prompter(self.prompt_text(item, pending[str(item["id"])]))

        def score(text: str, item: Mapping[str, Any]) -> dict[str, float]:
            value = parse_verdict(text)
            verdict(store, pending[str(item["id"])], text, value, counts)
            return {"score": float(value or 0)}

        if not asked:
            return counts
        with tempfile.TemporaryDirectory(prefix="evr1-judge-") as tmp:
            scratch = ResultStore(Path(tmp) / "judge.jsonl")
            await run_items(asked, load=load, engine=self.engine, score=score, store=scratch, sampling=self.sampling,
                            concurrency=concurrency, batch_size=self.batch_size, timeout_s=self.timeout_s,
                            benchmark="judge")
            for item_id, rec in pending.items():
                got = scratch.results.get(item_id)
                if got is None or "error" in got:
                    why = got or {"error": "the runner returned no result", "stage": "judge"}
                    failure(store, rec, str(why.get("stage", "judge")), str(why["error"]), counts)
        return counts


def _base(rec: Mapping[str, Any]) -> dict:
    return {k: v for k, v in rec.items() if k not in JUDGE_FIELDS}


def verdict(store: ResultStore, rec: Mapping[str, Any], text: str, value: int | None, counts: JudgeCounts, *,
            note: str | None = None) -> None:
    """Append the judged record: score = verdict, or 0 with `judge_error` when none could be read."""
    new = {**_base(rec), "score": float(value or 0), "judge_output": text, "judged": True}
    if note:
        new["judge_note"] = note
    if value is None and note is None:
        new["judge_error"] = "no 'Judgement: 0|1' in the judge output"
        counts.unparseable += 1
    counts.judged += 1
    counts.correct += int(value == 1)
    store.append(new)


def failure(store: ResultStore, rec: Mapping[str, Any], stage: str, err: BaseException | str,
            counts: JudgeCounts) -> None:
    """Append a judge failure: the old record kept, not judged, so the next pass retries it."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    store.append({**_base(rec), "judge_error": text, "judge_stage": stage})
    counts.failed += 1


def judge_results(items: Sequence[Mapping[str, Any]], store: ResultStore, judge: Judge,
                  needs_judge: Callable[[Mapping[str, Any]], bool], *, concurrency: int = 2) -> JudgeCounts:
    """Synchronous entry point of one pass (`evr1.eval.aio.run` around `Judge.run`)."""
    return aio.run(judge.run(items, store, needs_judge, concurrency=concurrency))


def open_judge(settings: Any, *, model_dir: str | os.PathLike[str], engine: Engine | None = None,
               device: str | None = None, dtype: str = "float32", timeout_s: float = 600.0,
               seed: int | None = 0, chat_template_kwargs: Mapping[str, Any] | None = None) -> Judge:
    """A judge from `cfg.eval.judge` (engine, model_path, prompt, max_new_tokens, temperature, batch_size).

    `model_dir` is used when `settings.model_path` is None. Without `engine`, `settings.engine` is
    built in this process with `make_engine` (hf: CPU or GPU; vllm: on a GPU worker only); a caller
    in a process without vLLM passes a remote engine instead.
    """
    path = settings.model_path or model_dir
    if engine is None:
        engine = make_engine(settings.engine, model_dir=str(path), batch_size=settings.batch_size, device=device,
                             dtype=dtype)
    return Judge(engine, ChatPrompter(path, chat_template_kwargs=chat_template_kwargs), template=settings.prompt,
                 max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                 batch_size=settings.batch_size, timeout_s=timeout_s, seed=seed)


def run_judge(settings: Any, bench: Any, items: Sequence[Mapping[str, Any]], store: ResultStore, *,
              default_model_dir: str | os.PathLike[str], device: str | None = None, concurrency: int = 2,
              timeout_s: float = 600.0, engine: Engine | None = None, dtype: str = "float32") -> dict[str, int]:
    """The eval stage's judge pass for benchmark `bench` (its `needs_judge`): the counts as a dict."""
    judge = open_judge(settings, model_dir=default_model_dir, engine=engine, device=device, dtype=dtype,
                       timeout_s=timeout_s, chat_template_kwargs=getattr(settings, "chat_template_kwargs", None))
    return asdict(judge_results(items, store, judge, bench.needs_judge, concurrency=concurrency))

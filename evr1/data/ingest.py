"""Ingest JSON / JSONL / Parquet datasets in the EasyVideoR1 schema into Lance `samples` + `rejects`.

Every record read ends up in exactly one of the two tables (accepted + rejected = read): a bad record
is rejected with its place (`file:line` for JSON lines, `file#N` for the N-th record of a JSON array or
row of a Parquet file, counted from 1), the offending field and a sentence saying why, and its raw text is
kept verbatim, so nothing is lost and nothing fails silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import lance
import pyarrow as pa
from pydantic import BaseModel

from evr1.models.prompt_length import PromptLimit, record_texts
from evr1.rewards import classify_tests
from evr1.rewards import resolve as reward_family
from evr1.data.schema import CONSUMED_FIELDS, REJECTS_SCHEMA, SAMPLES_SCHEMA, Reject, Sample, canonical_json
from evr1.data.sources import DatasetSourceError, RawRecord, collect_sources, read_records
from evr1.data.validate import Context, ProblemTypeResolver, RecordError, default_resolve_problem_type, validate_record

log = logging.getLogger(__name__)

WriteMode = Literal["overwrite", "append"]
_ID_HASH_CHARS = 16  # 64 bits of sha256: collisions are negligible at dataset scale
#: Prompts of at least this many text tokens are counted (and warned about) as long: within the
#: limit, each still costs memory in proportion to its length in every pass that holds it.
LONG_PROMPT_TOKENS = 4096
CODE_FAMILY = "code"


class IngestReport(BaseModel):
    """What one ingest did; small enough to pass between pipeline stages.

    `content_hash` hashes the content of the whole `samples` table after the write (every column
    but `source`, in table order): equal hashes mean equal training data, so downstream stages can
    cache on it. In overwrite mode that is exactly the rows accepted by this call.
    """

    samples_uri: str
    rejects_uri: str
    split: str
    read: int
    accepted: int
    rejected: int
    reasons: dict[str, int]
    samples_version: int
    rejects_version: int
    content_hash: str
    per_problem_type: dict[str, int]
    per_data_type: dict[str, int]
    files: int = 0
    skipped_files: list[str] = []
    # Code samples by the form of their tests (evr1.rewards.classify_tests); `unjudgeable_tests` counts
    # the accepted ones whose verdicts cannot be trusted (kept only with allow_unjudgeable_tests).
    per_test_form: dict[str, int] = {}
    unjudgeable_tests: int = 0
    # Long prompts (text and chat template, before vision tokens): how many have at least
    # `long_prompt_tokens`, and the longest (exact when tokenized, else an upper bound: one per byte).
    # A higher layer turns the token count into memory (evr1/train/plan.py) and says so.
    long_prompt_tokens: int = LONG_PROMPT_TOKENS
    long_prompts: int = 0
    longest_prompt_tokens: int = 0
    longest_prompt_source: str = ""


class EmptyDatasetError(DatasetSourceError):
    """A split with no record read, or with every record rejected. Both tables are written first (the
    rejects say why); `report` is what the ingest did."""

    def __init__(self, message: str, report: IngestReport) -> None:
        super().__init__(message)
        self.report = report


def _record_id(value: Any) -> str:
    if isinstance(value, dict) and value.get("problem_id") is not None:
        return str(value["problem_id"])
    return ""


def _sample_id(record: dict[str, Any], problem_id_counts: Counter[str]) -> tuple[str, str | None]:
    """The record's `problem_id` when unique in the inputs, else a content hash; plus a note if it fell back."""
    problem_id = _record_id(record)
    if problem_id.strip() and problem_id_counts[problem_id] == 1:
        return problem_id, None
    digest = hashlib.sha256(canonical_json(record).encode("utf-8")).hexdigest()[:_ID_HASH_CHARS]
    if problem_id.strip():
        times = problem_id_counts[problem_id]
        return digest, f"sample_id: problem_id {problem_id!r} occurs {times} times in the inputs; used a content hash"
    return digest, None


def _describe(rec: RawRecord) -> str:
    record_id = _record_id(rec.value) if rec.parsed else ""
    details = [rec.where] + ([f"problem_id {record_id!r}"] if record_id else [])
    return f"record {rec.source} ({', '.join(details)})"


def _reject(rec: RawRecord, kind: str, field: str, message: str) -> Reject:
    return Reject(
        source=rec.source,
        record_id=_record_id(rec.value) if rec.parsed else "",
        field=field,
        kind=kind,
        reason=f"{_describe(rec)}: {message}",
        raw=rec.raw,
    )


def _exists(uri: str) -> bool:
    try:
        lance.dataset(uri)
    except (ValueError, OSError, FileNotFoundError):
        return False
    return True


def _write(rows: list[dict[str, Any]], schema: pa.Schema, uri: str, mode: WriteMode) -> lance.LanceDataset:
    table = pa.Table.from_pylist(rows, schema=schema)
    # Append to a missing table creates it; overwrite of an existing one makes a new version.
    exists = _exists(uri)
    lance_mode = ("append" if mode == "append" else "overwrite") if exists else "create"
    return lance.write_dataset(table, uri, schema=schema, mode=lance_mode)


def table_content_hash(dataset: lance.LanceDataset) -> str:
    """sha256 over the canonical JSON of every row (all columns but `source`), in table order."""
    columns = [name for name in SAMPLES_SCHEMA.names if name != "source"]
    digest = hashlib.sha256()
    for batch in dataset.to_batches(columns=columns):
        for row in batch.to_pylist():
            digest.update(canonical_json(row).encode("utf-8"))
            digest.update(b"\n")
    return digest.hexdigest()


def ingest(
    sources: Sequence[str | Path],
    samples_uri: str | Path,
    rejects_uri: str | Path,
    *,
    split: str = "train",
    data_root: str | Path | None = None,
    resolve_problem_type: ProblemTypeResolver = default_resolve_problem_type,
    check_media_exists: bool = True,
    mode: WriteMode = "overwrite",
    prompt_limit: PromptLimit | None = None,
    offline_key: str | None = None,
    allow_unjudgeable_tests: bool = False,
    long_prompt_tokens: int = LONG_PROMPT_TOKENS,
) -> IngestReport:
    """Validate every record of `sources` and write the Lance `samples` and `rejects` tables.

    Relative media paths join `data_root`, or the source file's directory when no root is given;
    with a root, a path resolving outside it is rejected. `resolve_problem_type` maps a raw type to
    its canonical name, or None for an unknown type (rejected). With `offline_key` (mixed offline-online
    training), a record whose `has_offline_trajectory` is true needs a non-empty string there. Raises DatasetSourceError (one line
    naming the file) for an unreadable source, and EmptyDatasetError when nothing is accepted.

    Code samples (problem types of the reward family "code") have the form of their `tests` classified
    (`evr1.rewards.classify_tests`, counted in `per_test_form`); tests whose verdict a policy could
    forge are rejected (kind `unjudgeable_tests`, field `tests`) unless `allow_unjudgeable_tests`
    (`reward.allow_unjudgeable_tests`), which keeps them with a note and a warning. Prompts of at least
    `long_prompt_tokens` text tokens are counted in the report, with the longest (and a warning).
    """
    if mode not in ("overwrite", "append"):
        raise ValueError(f"ingest mode must be 'overwrite' or 'append', got {mode!r}")
    samples_uri, rejects_uri = str(samples_uri), str(rejects_uri)
    root = Path(data_root).resolve() if data_root is not None else None

    found = collect_sources(sources)
    records = [rec for path in found.files for rec in read_records(path)]
    problem_id_counts = Counter(_record_id(r.value) for r in records if r.parsed and _record_id(r.value))

    first_seen: dict[str, str] = {}
    if mode == "append" and _exists(samples_uri):
        existing = lance.dataset(samples_uri).to_table(columns=["sample_id", "source"]).to_pylist()
        first_seen = {row["sample_id"]: f"{row['source']} (already in {samples_uri})" for row in existing}

    samples: list[Sample] = []
    rejects: list[Reject] = []
    contexts: dict[Path, Context] = {}
    test_forms: Counter[str] = Counter()
    unjudgeable_kept: Counter[str] = Counter()
    long_prompts = 0
    longest: tuple[int, str] = (0, "")
    for rec in records:
        if not rec.parsed:
            rejects.append(_reject(rec, "malformed_json", "", rec.error))
            continue
        ctx = contexts.get(rec.path)
        if ctx is None:
            ctx = contexts[rec.path] = Context(
                base_dir=rec.path.parent.resolve(),
                data_root=root,
                check_media_exists=check_media_exists,
                resolve_problem_type=resolve_problem_type,
                offline_key=offline_key,
            )
        try:
            draft = validate_record(rec.value, ctx)
        except RecordError as err:
            rejects.append(_reject(rec, err.kind, err.field, err.message))
            continue
        too_long = prompt_limit.measure(record_texts(draft.problem, draft.options)) if prompt_limit else None
        if too_long is not None:  # before anything keeps the text around (evr1/models/prompt_length.py)
            rejects.append(_reject(rec, "prompt_too_long", "problem", prompt_limit.reason(too_long)))
            continue
        tests_note = None
        if reward_family(draft.problem_type) == CODE_FAMILY:
            form = classify_tests(draft.record)
            if not form.judgeable and not allow_unjudgeable_tests:
                rejects.append(_reject(rec, "unjudgeable_tests", "tests",
                                       f"field 'tests' cannot be judged safely ({form.form}): {form.reason}; a policy "
                                       "could be rewarded for a wrong answer (set reward.allow_unjudgeable_tests=true "
                                       "to keep such samples anyway)"))
                continue
            test_forms[form.form] += 1
            if not form.judgeable:
                unjudgeable_kept[form.form] += 1
                tests_note = (f"tests: {form.form} cannot be judged safely ({form.reason}); kept because "
                              "reward.allow_unjudgeable_tests is set")
        tokens = _prompt_tokens(draft, prompt_limit, long_prompt_tokens)
        if tokens >= long_prompt_tokens:
            long_prompts += 1
            longest = max(longest, (tokens, rec.source), key=lambda t: t[0])
        sample_id, id_note = _sample_id(draft.record, problem_id_counts)
        if sample_id in first_seen:
            rejects.append(
                _reject(rec, "duplicate_sample_id", "sample_id",
                        f"duplicate sample_id {sample_id!r}; first seen at {first_seen[sample_id]}")
            )
            continue
        first_seen[sample_id] = rec.source
        samples.append(
            Sample(
                sample_id=sample_id,
                split=split,
                problem=draft.problem,
                answer=draft.answer,
                problem_type=draft.problem_type,
                problem_type_raw=draft.problem_type_raw,
                data_type=draft.data_type,
                options=draft.options,
                videos=draft.videos,
                images=draft.images,
                extra={k: v for k, v in draft.record.items() if k not in CONSUMED_FIELDS},
                source=rec.source,
                notes=draft.notes + [n for n in (id_note, tests_note) if n],
            )
        )

    assert len(samples) + len(rejects) == len(records), "every record read must be accepted or rejected"
    samples_ds = _write([s.to_row() for s in samples], SAMPLES_SCHEMA, samples_uri, mode)
    rejects_ds = _write([r.model_dump() for r in rejects], REJECTS_SCHEMA, rejects_uri, mode)
    report = IngestReport(
        samples_uri=samples_uri,
        rejects_uri=rejects_uri,
        split=split,
        read=len(records),
        accepted=len(samples),
        rejected=len(rejects),
        reasons=dict(Counter(r.kind for r in rejects)),
        samples_version=samples_ds.version,
        rejects_version=rejects_ds.version,
        content_hash=table_content_hash(samples_ds),
        per_problem_type=dict(Counter(s.problem_type for s in samples)),
        per_data_type=dict(Counter(s.data_type for s in samples)),
        files=len(found.files),
        skipped_files=[str(p) for p in found.skipped],
        per_test_form=dict(test_forms),
        unjudgeable_tests=sum(unjudgeable_kept.values()),
        long_prompt_tokens=long_prompt_tokens,
        long_prompts=long_prompts,
        longest_prompt_tokens=longest[0],
        longest_prompt_source=longest[1],
    )
    if unjudgeable_kept:
        forms = ", ".join(f"{form} {n}" for form, n in sorted(unjudgeable_kept.items()))
        log.warning("ingest %s: kept %d code sample(s) whose tests cannot be judged safely (%s) because "
                    "reward.allow_unjudgeable_tests is set: a policy can be rewarded for wrong answers on them",
                    split, report.unjudgeable_tests, forms)
    if long_prompts:
        log.warning("ingest %s: %d prompt(s) of at least %d text tokens (longest %d, %s), before vision tokens: "
                    "within the limit, but each needs memory in proportion to its length in generation and "
                    "training (see `evr1 plan`)", split, long_prompts, long_prompt_tokens, longest[0], longest[1])
    if found.skipped:
        log.warning("ingest %s: skipped %d file(s) that are not .json/.jsonl/.parquet data, e.g. %s", split,
                    len(found.skipped), found.skipped[0])
    log.info("ingest %s: read %d, accepted %d, rejected %d %s", split, report.read, report.accepted,
             report.rejected, report.reasons)
    _require_samples(report, [str(s) for s in sources])
    return report


def _prompt_tokens(draft: Any, limit: PromptLimit | None, threshold: int) -> int:
    """The record's prompt text in tokens when it may reach `threshold`, else 0 (not counted).

    Byte-level BPE gives at most one token per byte, so a text shorter than `threshold` bytes is never
    tokenized; longer ones are counted with the limit's tokenizer (one per byte without one)."""
    text = "\n".join(record_texts(draft.problem, draft.options))
    nbytes = len(text.encode("utf-8", "surrogatepass"))
    fixed = limit.fixed_tokens if limit is not None else 0
    if nbytes + fixed < threshold:
        return 0
    counted = limit.count_text(text) if limit is not None else 0
    return (counted if counted > 0 else nbytes) + fixed


def _require_samples(report: IngestReport, sources: list[str]) -> None:
    """Raise EmptyDatasetError for a split that yields no sample: training on nothing is never meant."""
    where = ", ".join(sources) or "(no sources)"
    if report.read == 0:
        skipped = f" ({len(report.skipped_files)} other file(s) skipped)" if report.skipped_files else ""
        raise EmptyDatasetError(f"dataset split {report.split!r}: no records in {where}{skipped}", report)
    if report.accepted == 0:
        reasons = ", ".join(f"{kind} {n}" for kind, n in sorted(report.reasons.items()))
        raise EmptyDatasetError(f"dataset split {report.split!r}: all {report.read} records of {where} were "
                                f"rejected ({reasons}); the reasons are in {report.rejects_uri}", report)


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def read_samples(
    uri: str | Path, *, split: str | None = None, columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Rows of a `samples` table (optionally one split / some columns), with `extra` decoded to a dict."""
    dataset = lance.dataset(str(uri))
    table = dataset.to_table(
        columns=list(columns) if columns is not None else None,
        filter=f"split = {_sql_string(split)}" if split is not None else None,
    )
    rows = table.to_pylist()
    for row in rows:
        if "extra" in row:
            row["extra"] = json.loads(row["extra"])
    return rows


def read_rejects(uri: str | Path) -> list[dict[str, Any]]:
    """Every row of a `rejects` table."""
    return lance.dataset(str(uri)).to_table().to_pylist()


def reward_sample(row: Mapping[str, Any]) -> dict[str, Any]:
    """A `samples` row as the mapping rewards and prompts read: its fields (options included) plus its extras."""
    extra = row.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra else {}
    return {**extra, **{k: v for k, v in row.items() if k != "extra"}}

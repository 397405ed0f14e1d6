"""Build the Lance `frames` cache: resolve, hash, dedupe, skip what is cached, decode the rest on Ray.

Each miss is one Ray task (one CPU, one decoder thread, at most `workers` in flight) that decodes the
video and writes its row as a Lance data file itself, returning only the small fragment description;
frames never travel through the Ray object store. The driver is the only committer: it appends the
finished fragments in one atomic commit every `commit_rows` fragments or `COMMIT_SECONDS`, and once at
the end. A build killed halfway therefore leaves a readable table holding every committed video, and
the next build decodes only what is missing. Each task has a deadline: it stops itself cooperatively,
and the driver force-cancels it shortly after (a decoder stuck in native code cannot hang the build).
Every failure becomes a reject row (record id, path, reason); the rest of the build continues.

Failures are remembered: a file whose hashing timed out, or that could not be decoded with these
parameters, is noted with its reason beside the run folder's hash index (`keys.FailureIndex`, keyed
by path, size and mtime), and the next build (by cache, train or eval) rejects it again with the same
reason without hashing or decoding it, unless `retry_failed` is set. A timeout is retried when the
limit has grown; a changed file is a new file; unexpected errors (kind "error") are not remembered.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from rich.console import Console

from evr1.cache.keys import (
    Failure,
    FailureIndex,
    HashTimeout,
    content_hash,
    failure_index_for,
    frame_key,
    hash_index_for,
)
from evr1.cache.paths import resolve_media_path
from evr1.cache.rejects import REJECTS_SCHEMA, distinct_rejects, write_rejects  # noqa: F401 (re-exported)
from evr1.cache.store import (
    build_lock,
    clip_row,
    commit_fragments,
    ensure_frames,
    existing_keys,
    remove_stray_files,
    write_fragment,
)
from evr1.cluster.local import start_local
from evr1.video.clip import FrameParams, VideoClip
from evr1.video.decode import decode_video, load_image
from evr1.video.errors import MediaDecodeError

COMMIT_ROWS = 16  # fragments (videos) per Lance commit: a kill loses at most this many decoded entries
COMMIT_SECONDS = 30.0  # ... or whatever finished in this long, whichever comes first
SERIAL_BATCH_BYTES = 256 << 20  # in-process builds buffer rows up to this many frame bytes per file
CANCEL_GRACE_S = 5.0  # the driver force-cancels a task this long after its own deadline
RAY_OBJECT_STORE_BYTES = 256 << 20
HASH_SCOPE = "hash"
TRANSIENT_KINDS = frozenset({"error"})  # not remembered: a crash of ours or of a worker, not the file's fault

log = logging.getLogger(__name__)

@dataclass
class CacheBuildReport:
    """What a build did. `unique`, `hits` and `decoded` count keys; `failed` counts rejected records;
    `remembered` counts the records among them rejected for a failure an earlier build recorded (not
    tried again)."""

    frames_uri: str
    requested: int = 0
    unique: int = 0
    hits: int = 0
    decoded: int = 0
    failed: int = 0
    remembered: int = 0
    rejects: list[dict] = field(default_factory=list)
    version: int | None = None
    seconds: float = 0.0


@dataclass
class _Job:
    """One unique key to decode, with every record that asked for it."""

    key: str
    content_hash: str
    kind: str
    path: str
    record_ids: list[str]


# --- decoding (runs in Ray workers or in-process) -----------------------------------------------


def _image_clip(path: str, params: FrameParams) -> VideoClip:
    frame = load_image(path, params)
    return VideoClip(frames=frame[None], fps=0.0, frame_indices=[0], total_frames=1, duration=0.0)


_DECODERS: dict[str, Callable[[str, FrameParams, float | None, int | None], VideoClip]] = {
    "video": lambda path, params, timeout, threads: decode_video(path, params, timeout=timeout, threads=threads),
    "image": lambda path, params, timeout, threads: _image_clip(path, params),
}


def decode_row(job: _Job, params: FrameParams, timeout_s: float | None, threads: int | None = None) -> dict:
    """Decode one job into a `frames` row; raises MediaDecodeError on bad media."""
    clip = _DECODERS[job.kind](job.path, params, timeout_s, threads)
    return clip_row(job.key, job.content_hash, job.kind, clip, params, job.path)


def decode_fragment(job: _Job, params: FrameParams, timeout_s: float | None, frames_uri: str) -> dict:
    """Ray task: decode one job with one decoder thread and write its row as an uncommitted fragment.

    Returns {"fragments": [...], "frames": T, "bytes": stored bytes}; the driver commits the fragments.
    """
    import torch

    torch.set_num_threads(1)  # the frame resize: one CPU per task, like the decoder
    row = decode_row(job, params, timeout_s, threads=1)
    return {"fragments": write_fragment(frames_uri, [row]), "frames": row["shape"][0], "bytes": len(row["frames"])}


def _failure(exc: BaseException) -> tuple[str, str]:
    """(kind, reason) for a reject row, unwrapping Ray's task error to the original exception."""
    cause = getattr(exc, "cause", None) or exc
    if isinstance(cause, MediaDecodeError):
        return cause.kind, cause.reason
    return "error", f"{type(cause).__name__}: {cause}"


# --- planning ----------------------------------------------------------------------------------


def _decode_scope(key: str) -> str:
    return f"decode:{key}"


def _plan(
    items: Iterable[tuple[str, str, str]], params: FrameParams, data_root, reject, frames_uri: str,
    timeout_s: float | None, failures: FailureIndex | None = None, retry_failed: bool = False,
    remembered: Callable[[], None] | None = None,
) -> tuple[int, dict[str, _Job]]:
    """Resolve and hash every item; group records by key. Returns (requested, jobs by key).

    Hashes come from the run folder's persisted index when the file is unchanged (path, size, mtime);
    a file whose hashing outlasts `timeout_s` is rejected like a decode that times out, and noted in
    `failures` (when given): a later build rejects it again without hashing (`remembered()` counts it)
    unless `retry_failed`.
    """
    jobs: dict[str, _Job] = {}
    requested = 0
    index = hash_index_for(frames_uri)
    failed: dict[str, tuple[str, str]] = {}  # a path that failed once fails alike for every record
    for record_id, media_path, kind in items:
        requested += 1
        try:
            if kind not in _DECODERS:
                raise MediaDecodeError(media_path, f"kind must be one of {sorted(_DECODERS)}, got {kind!r}",
                                       kind="bad_kind")
            path = resolve_media_path(media_path, data_root)
            if path in failed:
                reject(str(record_id), str(media_path), *failed[path])
                continue
            if not os.path.exists(path):
                raise MediaDecodeError(media_path, f"file does not exist ({path})", kind="missing")
            if not os.path.isfile(path):
                raise MediaDecodeError(media_path, f"not a regular file ({path})", kind="not_a_file")
            before = failures.get(path, HASH_SCOPE) if failures is not None else None
            if before is not None and before.applies(timeout_s) and not retry_failed:
                failed[path] = (before.kind, before.reason)
                reject(str(record_id), str(media_path), before.kind, before.reason)
                if remembered is not None:
                    remembered()
                continue
            try:
                digest = content_hash(path, index=index, timeout_s=timeout_s)
            except HashTimeout as exc:
                failed[path] = ("timeout", str(exc))
                if failures is not None:
                    failures.put(path, HASH_SCOPE, Failure("timeout", str(exc), timeout_s))
                raise MediaDecodeError(media_path, str(exc), kind="timeout") from exc
            if before is not None and failures is not None:  # tried again (a longer limit) and hashed
                failures.forget(path, HASH_SCOPE)
        except (MediaDecodeError, OSError) as exc:
            reject(str(record_id), str(media_path), *_failure(exc))
            continue
        key = frame_key(digest, params, kind)
        if key in jobs:
            jobs[key].record_ids.append(str(record_id))
        else:
            jobs[key] = _Job(key, digest, kind, path, [str(record_id)])
    return requested, jobs


# --- executors: yield (job, result | None, kind, reason) as results arrive -------------------------
# A result is {"fragments": [...]} (already written) or {"row": {...}} (to be written by the driver).


def _run_serial(jobs: list[_Job], params: FrameParams, timeout_s: float | None, workers: int, ray_address,
                frames_uri: str):
    for job in jobs:
        try:
            yield job, {"row": decode_row(job, params, timeout_s)}, "", ""
        except Exception as exc:  # any failure of one file must not stop the build
            yield job, None, *_failure(exc)


def _ensure_ray(workers: int, ray_address: str | None) -> bool:
    """Connect to `ray_address`, reuse a running Ray, or start a small local one. True if we started it."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray_address:
        ray.init(address=ray_address, logging_level="WARNING")
        return True
    # Ray workers must import evr1 even when it is not installed (a source checkout).
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pythonpath = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
    start_local(  # dies with this command, even after a kill -9 (see evr1.cluster.local)
        num_cpus=max(1, workers),
        include_dashboard=False,
        object_store_memory=RAY_OBJECT_STORE_BYTES,
        logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
    )
    return True


def _run_ray(jobs: list[_Job], params: FrameParams, timeout_s: float | None, workers: int, ray_address,
             frames_uri: str):
    import ray

    started = _ensure_ray(workers, ray_address)
    task = ray.remote(num_cpus=1, max_retries=0)(decode_fragment)
    params_ref = ray.put(params)
    queue: Iterator[_Job] = iter(jobs)
    pending: dict = {}  # ref -> (job, deadline)
    try:
        while True:
            # Submit only as many as can run, so a deadline measures decoding time, not queueing.
            while len(pending) < workers and (job := next(queue, None)) is not None:
                deadline = time.monotonic() + timeout_s + CANCEL_GRACE_S if timeout_s else float("inf")
                pending[task.remote(job, params_ref, timeout_s, frames_uri)] = (job, deadline)
            if not pending:
                return
            wait_s = min(d for _, d in pending.values()) - time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.05, min(wait_s, 1.0)))
            for ref in ready:
                job, _ = pending.pop(ref)
                try:
                    yield job, ray.get(ref), "", ""
                except Exception as exc:
                    yield job, None, *_failure(exc)
            now = time.monotonic()
            for ref, (job, deadline) in list(pending.items()):
                if now > deadline:
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    yield job, None, "timeout", f"decoding took longer than {timeout_s} s; the worker was killed"
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if pending:  # a build run right after this one (a resume) must not be handed a worker being killed
            ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
        if started:
            ray.shutdown()


# --- the build ---------------------------------------------------------------------------------


def _progress(progress: bool | Console):
    """A rich progress bar on stderr (or the given console); disabled when `progress` is False."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = progress if isinstance(progress, Console) else Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[status]}"), console=console, disable=progress is False)


def build_frame_cache(
    items: Iterable[tuple[str, str, str]],
    frames_uri: str,
    params: FrameParams,
    *,
    data_root: str | os.PathLike | None = None,
    workers: int = 2,
    ray_address: str | None = None,
    timeout_s: float | None = 120,
    rejects_uri: str | None = None,
    progress: bool | Console = True,
    commit_rows: int = COMMIT_ROWS,
    on_commit: Callable[[int], None] | None = None,
    retry_failed: bool = False,
) -> CacheBuildReport:
    """Decode every (record_id, media_path, kind) item not yet cached into the `frames` table.

    `workers=0` decodes serially in this process (no Ray; the timeout is then only cooperative).
    Media an earlier build of this run folder failed to hash or decode are rejected again with their
    recorded reason, untried, unless `retry_failed` (`cache.retry_failed`); see the module docstring.
    `progress` shows a bar on stderr (or on the given rich Console). `on_commit(version)` runs after
    each Lance commit (for progress hooks; tests use it to simulate a crash mid-build).
    """
    t0 = time.perf_counter()
    frames_uri = str(frames_uri)
    report = CacheBuildReport(frames_uri=frames_uri)

    def reject(record_id: str, path: str, kind: str, reason: str) -> None:
        report.rejects.append({"record_id": record_id, "path": path, "stage": "cache", "kind": kind,
                               "reason": f"{kind}: {reason}"})

    failures = failure_index_for(frames_uri)

    def remembered() -> None:
        report.remembered += 1

    report.requested, jobs = _plan(items, params, data_root, reject, frames_uri, timeout_s, failures=failures,
                                   retry_failed=retry_failed, remembered=remembered)
    report.unique = len(jobs)
    cached = existing_keys(frames_uri)
    misses = [job for key, job in jobs.items() if key not in cached]
    report.hits = report.unique - len(misses)
    if failures is not None:
        misses = _skip_remembered(misses, failures, timeout_s, retry_failed, reject, remembered)
    if report.remembered:
        log.info("frame cache: %d record(s) rejected for media that failed in an earlier build (reasons in the "
                 "rejects; set cache.retry_failed=true to try them again)", report.remembered)
    report.version = ensure_frames(frames_uri).version
    with build_lock(frames_uri) as alone:
        if alone:  # no other build is writing: data files no version references are a killed build's
            remove_stray_files(frames_uri)
        _build(report, misses, frames_uri, params, workers, ray_address, timeout_s, progress, commit_rows,
               on_commit, reject, failures)
    report.failed = len(report.rejects)
    if rejects_uri:
        write_rejects(rejects_uri, report.rejects)
    report.seconds = time.perf_counter() - t0
    return report


def _skip_remembered(misses: list[_Job], failures: FailureIndex, timeout_s: float | None, retry_failed: bool,
                     reject: Callable[..., None], remembered: Callable[[], None]) -> list[_Job]:
    """The misses to decode: without `retry_failed`, those whose decode with this key failed before are
    rejected again with the recorded reason instead."""
    if retry_failed:
        return misses
    keep = []
    for job in misses:
        before = failures.get(job.path, _decode_scope(job.key))
        if before is None or not before.applies(timeout_s):
            keep.append(job)
            continue
        for record_id in job.record_ids:
            reject(record_id, job.path, before.kind, before.reason)
            remembered()
    return keep


def _build(report: CacheBuildReport, misses: list[_Job], frames_uri: str, params: FrameParams, workers: int,
           ray_address: str | None, timeout_s: float | None, progress: bool | Console, commit_rows: int,
           on_commit: Callable[[int], None] | None, reject: Callable[..., None],
           failures: FailureIndex | None = None) -> None:
    """Decode `misses` and commit their rows as they finish (see the module docstring)."""
    rows: list[dict] = []  # serial builds: rows not yet written
    fragments: list[dict] = []  # written, not yet committed
    pending_videos = 0
    last_commit = time.monotonic()

    def commit() -> None:
        nonlocal pending_videos, last_commit
        if rows:
            fragments.extend(write_fragment(frames_uri, rows))
            rows.clear()
        if fragments:
            report.version = commit_fragments(frames_uri, fragments)
            fragments.clear()
            if on_commit is not None:
                on_commit(report.version)
        pending_videos, last_commit = 0, time.monotonic()

    run = _run_ray if workers > 0 and misses else _run_serial
    with _progress(progress) as bar:
        task = bar.add_task("frame cache", total=len(misses), status=f"{report.hits} cached")
        for job, result, kind, reason in run(misses, params, timeout_s, workers, ray_address, frames_uri):
            if result is None:
                for record_id in job.record_ids:
                    reject(record_id, job.path, kind, reason)
                if failures is not None and kind not in TRANSIENT_KINDS:
                    failures.put(job.path, _decode_scope(job.key), Failure(kind, reason, timeout_s))
            else:
                if failures is not None:
                    failures.forget(job.path, _decode_scope(job.key))
                if "row" in result:
                    rows.append(result["row"])
                else:
                    fragments.extend(result["fragments"])
                report.decoded += 1
                pending_videos += 1
            bar.update(task, advance=1, status=f"{report.hits} cached, {report.decoded} decoded, "
                                               f"{len(report.rejects)} rejected")
            if pending_videos and (
                pending_videos >= commit_rows
                or time.monotonic() - last_commit >= COMMIT_SECONDS
                or sum(len(r["frames"]) for r in rows) >= SERIAL_BATCH_BYTES
            ):
                commit()
        commit()

"""Prompts read and prepared on the worker that uses them, with a bounded background prefetch.

The driver sends sample rows (a few hundred bytes); each rollout worker and policy rank reads the
frames from the Lance cache itself (decoding on a miss with the same rules) and tokenises them, with
the float patches deferred to the model's device (`PromptInputs.deferred`). A background thread
prepares the prompts the driver announced for the next pass while the current one generates or
updates, so reading frames stays off the critical path.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from evr1 import prompts
from evr1.cache import CacheMiss, FrameReader
from evr1.data.ingest import reward_sample
from evr1.models.prompt_length import PromptTooLong
from evr1.train.protocol import ReaderSpec, row_key
from evr1.video.errors import MediaDecodeError

# What "this sample's media cannot be read here" looks like: skipped and counted, never a crash.
# A prompt over `data.max_prompt_tokens` once its vision tokens are known is skipped the same way.
READ_ERRORS = (MediaDecodeError, CacheMiss, OSError, PromptTooLong)


def encode_row(row: dict, adapter, reader: FrameReader, spec: ReaderSpec, *, defer_media: bool = True):
    """Render the prompt, fetch frames (cache or decode, same rules) and tokenise: a `PromptInputs`."""
    text = prompts.render(reward_sample(row), template=spec.template, thinking=spec.thinking)
    videos = [reader.video(p) for p in row.get("videos") or []]
    images = [reader.image(p) for p in row.get("images") or []]
    try:
        return adapter.encode_prompt(text, videos=videos, images=images, defer_media=defer_media)
    except PromptTooLong as exc:  # the skip is logged with this message: name the sample it skips
        record = f"record {row.get('sample_id') or row_key(row)!r}"
        if record in str(exc):
            raise
        raise PromptTooLong(f"{record}: {str(exc).removeprefix('prompt: ')}") from exc


class PromptPrep:
    """Encoded prompts by sample key: prefetched in the background (at most `limit` ahead), held for the
    current pass until `release()`. `wait_s` is the time callers spent waiting for data."""

    def __init__(self, adapter, spec: ReaderSpec, *, limit: int = 64):
        self.adapter, self.spec, self.limit = adapter, spec, limit
        if spec.max_prompt_tokens is not None:  # the worker's own adapter refuses over-long prompts
            adapter.max_prompt_tokens = spec.max_prompt_tokens
        self.reader = spec.reader()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-prefetch")
        self._ahead: OrderedDict[str, Future] = OrderedDict()
        self._current: dict[str, object] = {}
        self.wait_s = 0.0
        self.prefetched = 0

    def _encode(self, row: dict):
        return encode_row(row, self.adapter, self.reader, self.spec)

    def prefetch(self, rows: list[dict]) -> None:
        """Start reading `rows` in the background, at most `limit` prompts ahead: the oldest announced
        prompts not yet used (e.g. groups dynamic sampling dropped) make room for new ones."""
        for row in rows[: self.limit]:
            key = row_key(row)
            if key in self._ahead or key in self._current:
                continue
            while len(self._ahead) >= self.limit:
                self._ahead.popitem(last=False)[1].cancel()
            self._ahead[key] = self._pool.submit(self._encode, row)

    def get(self, row: dict):
        """The row's prompt; raises one of `READ_ERRORS` when its media cannot be read here."""
        key = row_key(row)
        if key not in self._current:
            t0 = time.perf_counter()
            future = self._ahead.pop(key, None)
            try:
                self.prefetched += future is not None
                self._current[key] = future.result() if future is not None else self._encode(row)
            except READ_ERRORS as e:
                self._current[key] = e  # the same answer for every response of this prompt
            finally:
                self.wait_s += time.perf_counter() - t0
        value = self._current[key]
        if isinstance(value, BaseException):
            raise value
        return value

    def release(self) -> None:
        """Forget the current pass's prompts (prefetched ones for the next pass stay)."""
        self._current.clear()

    def take_reads(self) -> dict[str, float]:
        """Cache hits and misses (decoded on the fly) of this worker's reader since the last call."""
        out = {"data/cache_hits": float(self.reader.hits), "data/cache_misses": float(self.reader.misses)}
        self.reader.hits = self.reader.misses = 0
        return out

    def take_wait(self) -> float:
        out, self.wait_s = self.wait_s, 0.0
        return out

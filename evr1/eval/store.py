"""Per-item results, appended as JSON lines under the item's id, so a rerun resumes exactly.

Items finish in any order under concurrency; keying by id (not by position, the reference's bug,
its §7.2 item 1) makes resume order-independent. A torn last line from a kill is ignored.

The file is append-only: a rerun retries items whose newest record is an error (a timeout or an
OOM is not a verdict on the model), appends the new record after the old one, and the newest record
for an id is the one `results` holds and summaries count.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


class ResultStore:
    """Per-item records in a JSONL file; `results` maps each id to its newest record."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.results: dict[str, dict] = {}
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        good = []
        with self.path.open("rb") as f:
            for raw in f:
                try:
                    rec = json.loads(raw)
                except json.JSONDecodeError:
                    continue  # a line torn by a kill: that item simply runs again
                if isinstance(rec, dict) and "id" in rec:
                    self.results[str(rec["id"])] = rec
                    good.append(raw if raw.endswith(b"\n") else raw + b"\n")
        # Rewrite without torn lines so later appends start on a clean line.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(good))
        os.replace(tmp, self.path)

    def done(self, item_id: str) -> bool:
        """True when the item's newest record is a result; an error record means "run it again"."""
        rec = self.results.get(str(item_id))
        return rec is not None and "error" not in rec

    def append(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self.results[str(record["id"])] = record

    def __len__(self) -> int:
        return len(self.results)

"""Persistent SQLite cache of model outputs; a hit costs no budget."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

_KEY_JSON = json.JSONEncoder(ensure_ascii=False)  # `json.dumps(parts, ensure_ascii=False)`, built once
# Values read are kept in memory, up to this many (then forgotten all at once): a key keeps its first stored value
# (`put_many`), so a kept value never goes stale, and a search reads most answers again (twins, final races).
READ_MEMO_ENTRIES = 200_000


def cache_key(*parts: Any) -> str:
    """Hash of the model identity, exact prompt, scoring mode/decoding and example id."""
    return hashlib.sha256(_KEY_JSON.encode(parts).encode()).hexdigest()


class ResultCache:
    """Key → JSON value in one SQLite file; share the file across runs to reuse outputs.

    Any thread may use it, one at a time (a lock serialises them): DSPy's GEPA evaluates
    candidates in a worker thread while the thread that opened the cache waits.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()
        self._read: dict[str, Any] = {}

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        with self._lock:
            found = {key: self._read[key] for key in keys if key in self._read}
            unread = [key for key in keys if key not in found]
            for start in range(0, len(unread), 500):
                chunk = unread[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value in self._db.execute(f"SELECT key, value FROM results WHERE key IN ({marks})",
                                                   chunk):
                    found[key] = json.loads(value)
            if len(self._read) > READ_MEMO_ENTRIES:
                self._read.clear()
            self._read.update((key, found[key]) for key in unread if key in found)
        return found

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        """Store new entries; a key already stored keeps its first value. Processes sharing the file
        can miss the same key at once, and a model in bf16 may answer one prompt slightly differently
        in another batch: the first answer stays the one every reader sees (`Meter.run` reads it back)."""
        rows = [(k, json.dumps(v)) for k, v in items]
        with self._lock:
            self._db.executemany("INSERT OR IGNORE INTO results VALUES (?, ?)", rows)
            self._db.commit()

    def unpaid(self, keys: list[str]) -> list[str]:
        """Hits the reading run must pay for: none, because a run reads only its own private cache
        directly (a shared one, or the one a resumed run inherits, goes through `MeteredCache`)."""
        return []

    def mark_paid(self, hits: Mapping[str, Any]) -> None:
        """Nothing to remember (see `unpaid`)."""

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

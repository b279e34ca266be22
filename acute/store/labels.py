"""Labels attached to a store's records after they were written: the store's ``labels.jsonl``.

A record committed without a label (``"correct": null``: an answer ``acute serve --record-to``
recorded before anyone knew whether it was right) gets one later, as one line of the store's
append-only ``labels.jsonl``::

    {"id": "chatcmpl-3f0c...", "correct": true, "labelled": "2025-01-31T12:00:00+00:00"}

Shards are never rewritten (their checksums stay valid); :func:`acute.store.open_store` reads the
file and every record it names carries that label (:attr:`acute.store.Store.records`,
``Store.correct``). A record has at most one label: its own or one line here, never both.

Durability: :class:`LabelFile` appends each label as one line with one ``write`` and fsyncs it
before it returns, so a label acknowledged is on disk. A crash can cut only the last line short
(no newline): readers ignore such a tail and the next :class:`LabelFile` removes it. Only the
store's single writer (:class:`acute.store.StoreWriter`, holding the store's lock) appends, and
only labels of committed records, so a label never names a record that a crash could lose.
A complete line that is not a label, a second label for one id, or a label of a record the
store does not hold is a :class:`~acute.errors.CorruptStoreError` naming the file and line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import CorruptStoreError, InputError
from ..fileio import fsync_dir
from .format import dumps
from .manifest import now

__all__ = ["LABELS", "LabelFile", "check_labels", "read_labels"]

#: the labels file of a store folder
LABELS = "labels.jsonl"


def _complete_lines(path: Path) -> tuple[list[bytes], int]:
    """The complete lines of ``path`` and the byte length they span (a cut tail excluded)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(), end


def read_labels(store_dir: str | os.PathLike) -> dict[Any, bool]:
    """``{record id: correct}`` of a store's ``labels.jsonl`` (empty without one); a last line
    cut short by a crash is ignored. :class:`CorruptStoreError` naming the file and line for a
    line that is not ``{"id": str|int, "correct": bool, ...}`` or a second label of one id."""
    path = Path(store_dir) / LABELS
    if not path.is_file():
        return {}
    out: dict[Any, bool] = {}
    for lineno, line in enumerate(_complete_lines(path)[0], 1):
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CorruptStoreError(f"{path}:{lineno}: not a JSON line") from None
        rid = obj.get("id") if isinstance(obj, dict) else None
        if (isinstance(rid, bool) or not isinstance(rid, (str, int))
                or not isinstance(obj.get("correct"), bool)):
            raise CorruptStoreError(f'{path}:{lineno}: expected {{"id": str or int, "correct": true or false}}')
        if rid in out:
            raise CorruptStoreError(f"{path}:{lineno}: a second label for record {rid!r}")
        out[rid] = obj["correct"]
    return out


def check_labels(store_dir: str | os.PathLike, labels: dict, records: list[dict]) -> None:
    """:class:`CorruptStoreError` naming ``labels.jsonl`` when a label names a record the store
    does not hold or one that carries its own label."""
    own = {r["id"]: r.get("correct") for r in records}
    for rid in labels:
        if rid not in own:
            raise CorruptStoreError(f"{Path(store_dir) / LABELS}: labels record {rid!r}, which the "
                                    "store does not hold")
        if own[rid] is not None:
            raise CorruptStoreError(f"{Path(store_dir) / LABELS}: labels record {rid!r}, which "
                                    "carries its own label in its shard")


class LabelFile:
    """Appends labels to a store's ``labels.jsonl`` (see the module doc). Open it only while
    holding the store's writer lock (:class:`acute.store.StoreWriter`): opening drops a line a
    crash cut short. :attr:`labels` is every label in the file, this writer's included."""

    def __init__(self, store_dir: str | os.PathLike):
        self.path = Path(store_dir) / LABELS
        self.labels = read_labels(store_dir)
        if self.path.is_file():
            end = _complete_lines(self.path)[1]
            if end != self.path.stat().st_size:
                os.truncate(self.path, end)

    def add(self, record_id: Any, correct: bool) -> None:
        """Append the label of ``record_id`` and fsync it; InputError for a record already
        labelled here or a label that is not a bool."""
        if not isinstance(correct, bool):
            raise InputError(f"correct must be true or false, got {correct!r}")
        if record_id in self.labels:
            raise InputError(f"record {record_id!r} is already labelled")
        line = dumps({"id": record_id, "correct": correct, "labelled": now()}, f"label of {record_id!r}")
        data = (line + "\n").encode("utf-8")
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"{self.path}: short write (disk full?)")
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, start)  # no partial line before the next one
                raise
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.path.parent)
        self.labels[record_id] = correct

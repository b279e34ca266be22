"""Writing a store: :class:`StoreWriter` (one shard at a time, by the commit protocol of
:mod:`acute.store.commit`), and :func:`prepare_store` / :func:`finalize_store`, which the main
process of a multi-process collection calls before and after its part writers."""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import IncompatibleStoreError, InputError, StoreError
from ..validation import first_nonfinite_row
from .checkpoints import Schedule, checkpoint_counts, parse_schedule
from .compat import check_compatible, check_poolings, merge_weights, resolve_checkpoints
from .commit import ShardDirectory
from .files import PART_LOCK_RE, SHARD_FILES
from .format import (DEFAULT_STORE_DTYPE, FORMAT, FORMAT_VERSION, MANIFEST, MEAN_ONLY, STATUSES, STORAGE_DTYPES, TENSORS,
                     collection_key, dumps, storage_dtype)
from .pooling import POOLINGS
from .header import array_bytes_sha256
from .locks import lock_part, lock_store, store_lock, unlock_part
from .manifest import Tally, fill_shape, load_manifest, normalised_manifest, now, shape_of, write_manifest
from .shard import Shard, load_shards

__all__ = ["StoreWriter", "finalize_store", "prepare_store"]


def _writer_args(manifest: Any, dtype: Any, shard_size: Any) -> tuple[str, int]:
    """Validate a writer's arguments; returns the normalised ``(dtype, shard_size)``."""
    if not isinstance(manifest, dict):
        raise InputError(f"manifest must be a dict, got {type(manifest).__name__}")
    if (isinstance(shard_size, bool) or not isinstance(shard_size, (int, np.integer))
            or shard_size < 1):
        raise InputError(f"shard_size must be a positive int, got {shard_size!r}")
    return storage_dtype(dtype), int(shard_size)


def _delete(path: Path, names: Iterable[str]) -> None:
    for name in names:
        (path / name).unlink(missing_ok=True)


def _open_as_owner(path: Path, new: dict, shard_size: int, allow_other_weights: bool = False,
                   decide_poolings: bool = False) -> tuple[dict, list[Shard]]:
    """Create or resume a store with the (normalised) manifest ``new``; the caller holds the
    exclusive store lock.

    Resuming checks the manifests agree (:class:`IncompatibleStoreError` naming the key), deletes
    every orphan and stale part lock file, and verifies all committed shards. Writes the manifest
    with status ``"collecting"`` and current counts; returns it and the shards. The manifest's
    ``poolings`` stay undecided (absent) while the store has no records and no one chose them,
    unless ``decide_poolings`` (then ``["mean"]``).
    """
    mpath = path / MANIFEST
    shard_dir = ShardDirectory(path, SHARD_FILES)
    if mpath.is_file():
        old = load_manifest(path)
        check_compatible(mpath, old, new, allow_other_weights)
        if "poolings" not in old and shard_dir.committed():
            old["poolings"] = list(MEAN_ONLY)  # a store from before acute kept other poolings
        check_poolings(path, old.get("poolings"), new.get("poolings"), IncompatibleStoreError)
        merged = fill_shape({**old, **new, "created": old.get("created", now())}, old)
        merged.pop("checkpoints", None)
        schedule = resolve_checkpoints(path, old, new, bool(shard_dir.committed()))
        if schedule is not None:
            merged["checkpoints"] = schedule
        merge_weights(merged, old, new, path)
        merged["format_version"] = max(old.get("format_version") or 1, new["format_version"])
        shard_dir.remove_temporaries()
        _delete(path, [e for e in os.listdir(path) if PART_LOCK_RE.match(e)])
        shards = load_shards(path, merged)
        fill_shape(merged, shape_of(shards))
    else:
        if shard_dir.committed():
            raise StoreError(f"{path}: has shard files but no {MANIFEST}; refusing to write")
        merged, shards = new, []
        merged.setdefault("created", now())
    if decide_poolings:
        merged.setdefault("poolings", list(MEAN_ONLY))
    merged["shard_size"] = shard_size
    merged["status"] = "collecting"
    write_manifest(path, Tally(shards).stamp(merged))
    return merged, shards


def prepare_store(out_dir: str | os.PathLike, manifest: dict, dtype: str = DEFAULT_STORE_DTYPE,
                  shard_size: int = 256, *, allow_other_weights: bool = False) -> dict:
    """Create or resume a store for part writers; the main process calls it before they start.

    Does what a single :class:`StoreWriter` does when it opens (same checks: a resumed store must
    agree on the manifest keys, else :class:`IncompatibleStoreError` naming the key; deletes all
    orphans; status ``"collecting"``), holding the exclusive store lock during the call only
    (:class:`StoreError` if another writer is active). Decides the store's ``poolings``, which
    part writers cannot agree on among themselves: the manifest's ``"poolings"`` (``["mean"]``
    when absent; :class:`IncompatibleStoreError` when a store with records holds others); the part
    writers' adds must match. Sets ``format_version`` to
    :data:`FORMAT_VERSION` (2), which part writers require, so that older acute releases refuse
    the store instead of skipping its part shards. Returns the manifest as written.
    """
    dtype, shard_size = _writer_args(manifest, dtype, shard_size)
    new = {**normalised_manifest(manifest, dtype), "format_version": FORMAT_VERSION}
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    with store_lock(path):
        written, _ = _open_as_owner(path, new, shard_size, allow_other_weights, decide_poolings=True)
    return written


def finalize_store(out_dir: str | os.PathLike, status: str = "complete") -> dict:
    """Recount a store from its committed shards (all parts) and set its ``status``.

    The main process calls it after every part writer has closed: updates the manifest's
    ``num_records``, ``num_shards``, ``summary``, ``status`` and ``updated`` (and ``num_layers``/
    ``hidden_size`` when it did not know them) atomically, and returns it. Verifies every shard
    like :func:`open_store`; :class:`StoreError` while another writer holds the store.
    """
    if status not in STATUSES:
        raise InputError(f"status must be one of {STATUSES}, got {status!r}")
    path = Path(out_dir)
    with store_lock(path):
        manifest = load_manifest(path)
        shards = load_shards(path, manifest)
        fill_shape(manifest, shape_of(shards))
        manifest["status"] = status
        write_manifest(path, Tally(shards).stamp(manifest))
    return manifest


def _checked_states(name: str, value: Any, ids: Sequence, num_layers: int | None, hidden: int | None,
                    dtype: str) -> np.ndarray:
    """Pooled states ``value`` [b, L+1, d] of the records ``ids`` cast to the storage ``dtype``;
    InputError naming the tensor ``name`` (and the record) for a wrong shape (``num_layers``,
    ``hidden``: the expected L and d, None when unknown), a non-float or non-finite value, or
    one that overflows the storage dtype."""
    arr = np.asarray(value)
    b = len(ids)
    if arr.ndim != 3:
        raise InputError(f"{name} must have shape [b, L+1, d], got {arr.shape}")
    if arr.shape[0] != b:
        raise InputError(f"{name} has {arr.shape[0]} rows but {b} records were given")
    if num_layers is not None and arr.shape[1] != num_layers + 1:
        raise InputError(f"{name} has {arr.shape[1]} layers but num_layers={num_layers} "
                         f"(expected L+1 = {num_layers + 1})")
    if hidden is not None and arr.shape[2] != hidden:
        raise InputError(f"{name} hidden size {arr.shape[2]} != hidden_size {hidden}")
    if arr.shape[1] < 1 or arr.shape[2] < 1:
        raise InputError(f"{name} has an empty dimension: {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise InputError(f"{name} must be a float array, got dtype {arr.dtype}")
    bad = first_nonfinite_row(arr)
    if bad is not None:
        raise InputError(f"{name} has non-finite values (record {ids[bad]!r})")
    with np.errstate(over="ignore"):
        stored = arr.astype(STORAGE_DTYPES[dtype])
    bad = first_nonfinite_row(stored)
    if bad is not None:
        raise InputError(f"{name} overflows {dtype} (|x| > 65504) in record {ids[bad]!r}; use dtype='float32'")
    return stored


def checkpoint_tensors(entries: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """A shard's checkpoint tensors from each record's ``(tokens, means)``."""
    counts = [len(tokens) for tokens, _ in entries]
    return {"checkpoint_means": np.ascontiguousarray(np.concatenate([means for _, means in entries])),
            "checkpoint_tokens": np.concatenate([tokens for tokens, _ in entries]).astype(np.int64),
            "checkpoint_offsets": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)}


class StoreWriter:
    """Append records to a store in atomically committed shards; resumes an existing store.

    Parameters
    ----------
    out_dir : store directory (created if needed). If it already holds a manifest, the writer
        resumes: the manifests must agree (see :func:`prepare_store`; else
        :class:`IncompatibleStoreError` naming the key), orphans are deleted, ``done_ids`` lists
        the committed ids and new shards continue the numbering.
    manifest : JSON-serialisable dict describing the collection (see the module docstring).
        ``num_layers``/``hidden_size`` (or the same keys in ``model_fingerprint``) are used to
        validate shapes; when absent they are inferred from the first batch and recorded.
        ``poolings`` (``["mean"]`` or :data:`POOLINGS`) may declare up front what the first
        :meth:`add` otherwise decides; it must agree with a resumed store's.
    dtype : storage dtype of the hidden states, one of :data:`~acute.store.format.STORAGE_DTYPES`
        (default :data:`~acute.store.format.DEFAULT_STORE_DTYPE`, ``"float16"``).
    shard_size : records per shard (the last shard may be smaller).
    allow_other_weights : resume a store whose manifest records another weights digest
        (``model_weights``); the stored digest stays and the new one is listed in
        ``model_weights_also``. Without it such a resume raises :class:`IncompatibleStoreError`.
    part : None (default) for the single writer that owns the manifest and holds the store's
        exclusive lock. An int ``k >= 0`` for one process of a multi-process collection (see the
        module docstring): the store must have been prepared (:func:`prepare_store`, else
        :class:`StoreError`), the manifest must agree with the stored one, shards are named
        ``shard-p{k:03d}-{i:05d}``, only part ``k``'s orphans are deleted, the manifest is never
        written (:func:`finalize_store` does that), and a second writer of part ``k`` gets a
        :class:`StoreError`. ``done_ids`` covers every part's committed records.

    Use as a context manager: a clean exit commits the buffered records (``close()``); an
    exception commits nothing more (buffered records are recomputed on resume) and, for a single
    writer, marks the manifest ``"interrupted"``. Either way the locks are released. A second
    writer on the same store (or part) fails with :class:`StoreError` instead of clobbering it.
    """

    def __init__(self, out_dir: str | os.PathLike, manifest: dict, dtype: str = DEFAULT_STORE_DTYPE,
                 shard_size: int = 256, *, part: int | None = None, allow_other_weights: bool = False):
        self._store_fd: int | None = None
        self._part_fd: int | None = None
        self.dtype, self.shard_size = _writer_args(manifest, dtype, shard_size)
        if part is not None and (isinstance(part, bool) or not isinstance(part, (int, np.integer))
                                 or part < 0):
            raise InputError(f"part must be None or an int >= 0, got {part!r}")
        new = normalised_manifest(manifest, self.dtype)
        self.path = Path(out_dir)
        self.part = None if part is None else int(part)
        self._closed = False
        self._dir = ShardDirectory(self.path, SHARD_FILES, self.part)
        # (record, its JSON line, its pooled states, its log-probs, its checkpoints or None)
        self._buffer: list[tuple[dict, str, tuple[np.ndarray, ...], np.ndarray, Any]] = []
        self._pending: set = set()
        if self.part is None:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not (self.path / MANIFEST).is_file():
            raise StoreError(
                f"{self.path / MANIFEST} does not exist: call prepare_store() in the main process "
                "before opening part writers"
            )
        self._store_fd = lock_store(self.path, exclusive=self.part is None)
        try:
            if self.part is None:
                self.manifest, shards = _open_as_owner(self.path, new, self.shard_size, allow_other_weights)
            else:
                self._part_fd = lock_part(self.path, self.part)
                self.manifest, shards = self._open_part(new, allow_other_weights)
        except BaseException:
            self._release()
            raise
        self._tally = Tally(shards)
        self._key = collection_key(self.manifest)
        poolings = self.manifest.get("poolings")  # None: undecided until the first add
        self._poolings = None if poolings is None else tuple(poolings)
        schedule = self.manifest.get("checkpoints")
        self._schedule = None if schedule is None else parse_schedule(schedule)
        self._next_index = self._dir.next_index()

    # -- opening / closing ----------------------------------------------------------------------
    def _open_part(self, new: dict, allow_other_weights: bool = False) -> tuple[dict, list[Shard]]:
        """Check a part writer's (normalised) manifest against the stored one, delete this part's
        orphans and load the committed shards of every part. Returns (stored manifest, shards)."""
        stored = load_manifest(self.path)
        if (stored.get("format_version") or 1) < FORMAT_VERSION:
            raise StoreError(
                f"{self.path / MANIFEST}: format_version {stored.get('format_version')} was not "
                "prepared for part writers: call prepare_store() in the main process first"
            )
        check_compatible(self.path / MANIFEST, stored, new, allow_other_weights)
        stored.setdefault("poolings", list(MEAN_ONLY))  # prepared by an acute that kept the mean only
        check_poolings(self.path, stored["poolings"], new.get("poolings"), IncompatibleStoreError)
        resolve_checkpoints(self.path, stored, new, has_records=True)  # prepare_store decided them
        fill_shape(stored, new)
        self._dir.remove_temporaries()
        shards = load_shards(self.path, stored)
        return fill_shape(stored, shape_of(shards)), shards

    def _write_manifest(self) -> None:
        write_manifest(self.path, self._tally.stamp(self.manifest))

    def _release(self) -> None:
        """Release the part lock (deleting its file), then the store lock; idempotent."""
        part_fd, self._part_fd = self._part_fd, None
        store_fd, self._store_fd = self._store_fd, None
        try:
            if part_fd is not None:
                unlock_part(self.path, self.part, part_fd)
        finally:
            if store_fd is not None:
                os.close(store_fd)

    def __del__(self) -> None:
        try:
            self._release()  # a writer dropped without close() must not keep the store locked
        except Exception:
            pass

    # -- public API -----------------------------------------------------------------------------
    @property
    def done_ids(self) -> frozenset:
        """Ids committed to disk: every shard of the store when the writer opened (all parts,
        earlier runs included) plus this writer's own commits; buffered ids are not included."""
        return frozenset(self._tally.ids)

    @property
    def poolings(self) -> tuple[str, ...] | None:
        """The poolings the store keeps for every record: ``("mean",)``, :data:`POOLINGS`, or
        None while undecided (no record yet and none declared)."""
        return self._poolings

    @property
    def checkpoints(self) -> Schedule | None:
        """The prefix-checkpoint schedule every record of the store keeps (its manifest's
        ``checkpoints``), or None: the store keeps none, and :meth:`add` takes none."""
        return self._schedule

    @property
    def num_buffered(self) -> int:
        return len(self._buffer)

    @property
    def buffered_ids(self) -> frozenset:
        """Ids added but not yet committed (:meth:`flush` commits them)."""
        return frozenset(self._pending)

    def is_committed(self, record_id) -> bool:
        """Whether ``record_id`` is in a committed shard (of any part, earlier runs included)."""
        return record_id in self._tally.ids

    def flush(self) -> None:
        """Commit the buffered records now, as one (possibly smaller) shard; nothing without any."""
        if self._closed:
            raise InputError("StoreWriter is closed")
        self._flush(len(self._buffer))

    # Long because adding is one ordered sequence (validate every record, then buffer them, then
    # record what the first batch decides, then commit full shards); splitting it would hide the order.
    def add(self, records: Sequence[dict], layer_means: np.ndarray, token_logprobs: Sequence[np.ndarray],
            *, last_prompt: np.ndarray | None = None, last_answer: np.ndarray | None = None,
            checkpoints: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None) -> None:
        """Buffer a batch of ``b`` records and commit every full shard.

        ``layer_means`` is [b, L+1, d] (finite; must fit float16 when storing float16),
        ``token_logprobs`` is a list of ``b`` 1-D arrays of finite log-probs. ``last_prompt`` and
        ``last_answer`` (both or neither) are the states at the prompt's last token and at the
        answer's last pooled position, shaped and checked like ``layer_means``. A store keeps them
        for all of its records or for none: the first add with records decides (the manifest's
        ``poolings``), a later add that differs (also after a resume) is an InputError naming the
        store and both choices. ``checkpoints`` = ``(tokens, means)``, one int array [C_k] and one
        [C_k, L+1, d] array per record, is given exactly when the store keeps prefix checkpoints
        (:attr:`checkpoints`); each record's token counts must be its schedule's
        (:func:`acute.store.checkpoints.checkpoint_counts` of its length). Records are copied; ``n_tokens`` and ``raw_confidence`` are filled
        in when absent (``n_tokens`` must equal the number of log-probs when present). ValueError
        for a duplicate id (committed, buffered or within the batch), wrong shapes, non-finite
        values or non-JSON-serialisable records.
        """
        if self._closed:
            raise InputError("StoreWriter is closed")
        if (last_prompt is None) != (last_answer is None):
            raise InputError("give both last_prompt and last_answer, or neither")
        given = MEAN_ONLY if last_prompt is None else POOLINGS
        check_poolings(self.path, self._poolings, given)
        records = list(records)
        b = len(records)
        ids = [rec.get("id") if isinstance(rec, dict) else None for rec in records]
        L, d = self.manifest.get("num_layers"), self.manifest.get("hidden_size")
        lm = _checked_states("layer_means", layer_means, ids, L, d, self.dtype)
        states = [lm] + [_checked_states(TENSORS[p], x, ids, lm.shape[1] - 1, lm.shape[2], self.dtype)
                         for p, x in zip(given[1:], (last_prompt, last_answer))]
        if len(token_logprobs) != b:
            raise InputError(f"token_logprobs has {len(token_logprobs)} entries but {b} records were given")
        ckpts = self._checked_checkpoints(checkpoints, ids, token_logprobs, lm.shape)

        batch_ids: set = set()
        prepared = []
        for k, (rec, lp) in enumerate(zip(records, token_logprobs)):
            if not isinstance(rec, dict):
                raise InputError(f"records[{k}] must be a dict, got {type(rec).__name__}")
            if "id" not in rec:
                raise InputError(f"records[{k}] has no 'id'")
            rid = rec["id"]
            if isinstance(rid, np.generic):
                rid = rid.item()
            if isinstance(rid, bool) or not isinstance(rid, (str, int)):
                raise InputError(f"records[{k}]['id'] must be a str or int, got {rid!r}")
            if rid in self._tally.ids or rid in self._pending or rid in batch_ids:
                where = ("already committed" if rid in self._tally.ids else
                         "already buffered" if rid in self._pending else "repeated in this batch")
                raise InputError(f"duplicate id {rid!r} ({where})")
            batch_ids.add(rid)
            if np.ndim(lp) != 1:
                raise InputError(f"token_logprobs[{k}] (id {rid!r}) must be 1-D, got shape {np.shape(lp)}")
            lp = np.asarray(lp, dtype=np.float32).astype(np.float64)
            if not np.all(np.isfinite(lp)):
                raise InputError(f"token_logprobs[{k}] (id {rid!r}) has non-finite values")
            if lp.size and lp.max() > 1e-4:
                raise InputError(f"token_logprobs[{k}] (id {rid!r}) has positive log-probs (max {lp.max()})")
            rec = dict(rec)
            rec["id"] = rid
            if rec.get("n_tokens") is not None and rec["n_tokens"] != lp.size:
                raise InputError(
                    f"records[{k}] (id {rid!r}) has n_tokens={rec['n_tokens']} but {lp.size} log-probs"
                )
            rec["n_tokens"] = int(lp.size)
            if rec.get("raw_confidence") is None:
                rec["raw_confidence"] = math.exp(math.fsum(lp))
            line = dumps(rec, f"records[{k}] (id {rid!r})")
            prepared.append((rec, line, tuple(x[k] for x in states), lp.astype(np.float32), ckpts[k]))

        for entry in prepared:
            self._buffer.append(entry)
            self._pending.add(entry[0]["id"])
        decided = b > 0 and self._poolings is None
        if decided:
            self._poolings = given
            self.manifest["poolings"] = list(given)
        learnt = b > 0 and self.manifest.get("num_layers") is None
        if learnt:
            self.manifest["num_layers"] = int(lm.shape[1] - 1)
            self.manifest["hidden_size"] = int(lm.shape[2])
        if (decided or learnt) and self.part is None:
            self._write_manifest()
        while len(self._buffer) >= self.shard_size:
            self._flush(self.shard_size)

    def _checked_checkpoints(self, given: Any, ids: Sequence, token_logprobs: Sequence,
                             shape: tuple) -> list:
        """Per record ``(tokens int64 [C], means [C, L+1, d] in the storage dtype)`` of ``given``
        (None per record when the store keeps none); InputError naming the store or the record."""
        if (given is None) != (self._schedule is None):
            have = "keeps prefix checkpoints" if self._schedule is not None else "keeps no prefix checkpoints"
            raise InputError(f"{self.path}: the store {have} for all of its records; these records come "
                             f"{'without' if given is None else 'with'} them")
        if given is None:
            return [None] * len(ids)
        tokens, means = given
        if len(tokens) != len(ids) or len(means) != len(ids):
            raise InputError(f"checkpoints have {len(tokens)} token arrays and {len(means)} state arrays "
                             f"for {len(ids)} records")
        out = []
        for k, (rid, tok, mean, lp) in enumerate(zip(ids, tokens, means, token_logprobs)):
            want = checkpoint_counts(int(np.size(lp)), self._schedule)
            if not np.array_equal(np.asarray(tok), want):
                raise InputError(f"record {rid!r}: checkpoints at {np.asarray(tok).tolist()} tokens, but its "
                                 f"{np.size(lp)} tokens and the schedule {self._schedule.to_json()} give {want.tolist()}")
            mean = _checked_states(f"checkpoint_means of record {rid!r}", mean, [rid] * want.size,
                                   shape[1] - 1, shape[2], self.dtype)
            out.append((want, mean))
        return out

    def _flush(self, count: int) -> None:
        """Commit the first ``count`` buffered records as the next shard."""
        from safetensors.numpy import save_file  # lazy: import time

        batch = self._buffer[:count]
        if not batch:
            return
        lengths = [len(entry[3]) for entry in batch]
        tensors = {
            **{TENSORS[p]: np.ascontiguousarray(np.stack([entry[2][j] for entry in batch]))
               for j, p in enumerate(self._poolings)},
            "token_logprobs": (np.concatenate([entry[3] for entry in batch]).astype(np.float32)
                               if sum(lengths) else np.zeros(0, np.float32)),
            "token_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        }
        if self._schedule is not None:
            tensors.update(checkpoint_tensors([entry[4] for entry in batch]))
        text = "".join(entry[1] + "\n" for entry in batch).encode("utf-8")
        metadata = {"format": FORMAT, "num_records": str(len(batch)), "collection_key": self._key,
                    "records_sha256": hashlib.sha256(text).hexdigest(),
                    "tensors_sha256": array_bytes_sha256(tensors)}
        self._dir.commit(self._next_index, {
            "jsonl": text, "safetensors": lambda tmp: save_file(tensors, str(tmp), metadata=metadata)})
        del self._buffer[:count]
        for entry in batch:
            self._pending.discard(entry[0]["id"])
        self._tally.add_shard(entry[0] for entry in batch)
        self._next_index += 1
        if self.part is None:  # the counts and accuracy so far, for whoever watches a long collection
            self._write_manifest()

    def close(self) -> None:
        """Commit buffered records (one last, possibly smaller shard), finalise the manifest (a
        single writer only) and release the locks (also when committing fails)."""
        if self._closed:
            return
        try:
            self._flush(len(self._buffer))
            if self.part is None:
                self.manifest["status"] = "complete"
                self._write_manifest()
        finally:
            self._closed = True
            self._release()

    def abort(self) -> None:
        """Drop buffered records (they are recomputed on resume), mark the store interrupted (a
        single writer only) and release the locks."""
        if self._closed:
            return
        self._closed = True
        self._buffer.clear()
        self._pending.clear()
        try:
            if self.part is None:
                self.manifest["status"] = "interrupted"
                self._write_manifest()
        finally:
            self._release()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            try:
                self.abort()
            except OSError:
                pass  # never mask the original exception

"""Reading a store: :func:`open_store` and :class:`Store`, a read-only view over its committed
records that memory-maps the shards' pooled states."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import CorruptStoreError, InputError
from ..validation import first_nonfinite_row
from .labels import check_labels, read_labels
from .format import DEFAULT_STORE_DTYPE, MEAN_ONLY, REMEDY, STORAGE_DTYPES, TENSORS, expected_shape
from .checkpoints import REMEDY as CHECKPOINT_REMEDY, Schedule, parse_schedule, prefix_rows
from .pooling import POOLINGS
from .manifest import load_manifest
from .shard import Shard, load_shards

__all__ = ["Store", "open_store"]


class Store:
    """A read-only view over a store's committed records (use :func:`open_store`).

    Attributes are computed on first access and cached. ``select`` returns another ``Store``
    over a subset of rows that shares the same memory-mapped shards.
    """

    def __init__(self, path: Path, manifest: dict, shards: list[Shard], rows: np.ndarray | None = None,
                 labels: dict | None = None):
        self.path = path
        self.manifest = manifest
        self._shards = shards
        self._labels = labels or {}  # labels.jsonl: ids -> correct (acute.store.labels)
        self._starts = np.cumsum([0] + [s.n for s in shards]).astype(np.int64)
        self._rows = rows  # global row indices of this view, or None for all rows
        self._cache: dict[str, Any] = {}

    # -- basic info -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._starts[-1]) if self._rows is None else len(self._rows)

    def __repr__(self) -> str:
        return (
            f"Store({str(self.path)!r}, n={len(self)}, layers={self.num_layers}, "
            f"hidden_size={self.hidden_size}, dtype={self.dtype})"
        )

    @property
    def num_layers(self) -> int | None:
        """L (layer_means has L+1 rows per record), or None for an empty store that doesn't know."""
        if self._shards:
            return self._shards[0].layer_shape[0] - 1
        return expected_shape(self.manifest)[0]

    @property
    def hidden_size(self) -> int | None:
        if self._shards:
            return self._shards[0].layer_shape[1]
        return expected_shape(self.manifest)[1]

    @property
    def poolings(self) -> tuple[str, ...]:
        """The poolings this store holds for every record: ``("mean",)`` (every store written
        before acute kept the others) or :data:`POOLINGS`."""
        return tuple(self.manifest.get("poolings", MEAN_ONLY))

    def _check_pooling(self, pooling: str) -> str:
        """``pooling``'s tensor name; InputError for an unknown pooling or one the store lacks."""
        if pooling not in POOLINGS:
            raise InputError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
        if pooling not in self.poolings:
            raise InputError(f"{self.path}: the store has no {pooling!r} states (it holds "
                             f"{', '.join(self.poolings)}: collected before acute kept them); {REMEDY}")
        return TENSORS[pooling]

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype of the hidden states (float16 or float32)."""
        if self._shards:
            return self._shards[0].dtype
        return np.dtype(STORAGE_DTYPES.get(self.manifest.get("dtype", DEFAULT_STORE_DTYPE),
                                           STORAGE_DTYPES[DEFAULT_STORE_DTYPE]))

    def _global_rows(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64) if self._rows is None else self._rows

    def where(self, i: int) -> str:
        """``"record <id> (<shard file>)"`` of row ``i`` of this view: how errors name a record."""
        g = int(self._global_rows()[i])
        shard = self._shards[int(np.searchsorted(self._starts, g, side="right")) - 1]
        return f"record {self.ids[i]!r} ({shard.path.name})"

    def check_finite(self) -> None:
        """:class:`CorruptStoreError` naming the record id and shard of the first NaN or inf in
        the raw confidences, the hidden states of any pooling or the prefix checkpoints (read in
        chunks of rows, which are not kept)."""
        conf = np.asarray(self.raw_confidence, dtype=np.float64)
        if not np.isfinite(conf).all():
            i = int(np.argmin(np.isfinite(conf)))
            raise CorruptStoreError(f"{self.path}: {self.where(i)} has a non-finite raw confidence ({conf[i]})")
        rows, step = self._global_rows(), 256
        for pooling in self.poolings if self._shards else ():
            for start in range(0, len(rows), step):
                i = first_nonfinite_row(self._gather(rows[start:start + step], None, pooling))
                if i is not None:
                    raise CorruptStoreError(f"{self.path}: {self.where(start + i)} has a non-finite hidden "
                                            f"state (NaN or inf) in {TENSORS[pooling]}")
        if self.checkpoints is not None:
            for k in np.unique(self._locate()[0]):
                shard = self._shards[k]
                means = shard.states("checkpoints")
                for start in range(0, len(means), step):
                    i = first_nonfinite_row(means[start:start + step])
                    if i is not None:
                        record = int(np.searchsorted(shard.checkpoint_offsets, start + i, side="right")) - 1
                        raise CorruptStoreError(f"{self.path}: record {shard.records[record]['id']!r} "
                                                f"({shard.path.name}) has a non-finite checkpoint state")

    # -- per-record data ------------------------------------------------------------------------
    @property
    def records(self) -> list[dict]:
        """Record dicts in store order (shared objects; copy before mutating); a record labelled
        later (the store's ``labels.jsonl``, :mod:`acute.store.labels`) carries that label as
        its ``correct``."""
        if "records" not in self._cache:
            labels = self._labels
            all_records = [r if r["id"] not in labels else {**r, "correct": labels[r["id"]]}
                           for s in self._shards for r in s.records]
            self._cache["records"] = (
                all_records if self._rows is None else [all_records[i] for i in self._rows]
            )
        return self._cache["records"]

    @property
    def ids(self) -> list:
        return [r["id"] for r in self.records]

    @property
    def correct(self) -> np.ndarray:
        """bool[n] from each record's ``correct``; ValueError naming the first record without one."""
        if "correct" not in self._cache:
            out = np.zeros(len(self), dtype=bool)
            for i, rec in enumerate(self.records):
                value = rec.get("correct")
                if value is None:
                    raise InputError(f"record {rec['id']!r} has no 'correct' label")
                out[i] = bool(value)
            self._cache["correct"] = out
        return self._cache["correct"]

    @property
    def labelled(self) -> np.ndarray:
        """bool[n]: which records carry a label (``correct`` not null: every record of a
        collection; the answers ``acute serve --record-to`` recorded once feedback labelled them)."""
        return np.array([r.get("correct") is not None for r in self.records], dtype=bool)

    @property
    def token_logprobs(self) -> list[np.ndarray]:
        """Per-record float32 log-probs of the generated tokens (read-only views)."""
        if "token_logprobs" not in self._cache:
            flat = [lp for s in self._shards for lp in s.token_logprobs()]
            self._cache["token_logprobs"] = flat if self._rows is None else [flat[i] for i in self._rows]
        return self._cache["token_logprobs"]

    @property
    def raw_confidence(self) -> np.ndarray:
        """float64[n]: exp(sum of token log-probs) (1.0 for a zero-token generation)."""
        if "raw_confidence" not in self._cache:
            self._cache["raw_confidence"] = np.array(
                [math.exp(math.fsum(lp.astype(np.float64))) for lp in self.token_logprobs],
                dtype=np.float64,
            )
        return self._cache["raw_confidence"]

    @property
    def n_tokens(self) -> np.ndarray:
        return np.array([len(lp) for lp in self.token_logprobs], dtype=np.int64)

    # -- hidden states --------------------------------------------------------------------------
    def _empty_shape(self) -> tuple[int, int]:
        L, d = self.num_layers, self.hidden_size
        return (0 if L is None else L + 1, 0 if d is None else d)

    def _gather(self, rows: np.ndarray, layer: int | None, pooling: str = "mean") -> np.ndarray:
        """Rows (global indices, any order) of a pooling's states, or of one of their layers, read
        shard by shard."""
        width = self._shards[0].layer_shape if self._shards else self._empty_shape()
        shape = (len(rows),) + (tuple(width) if layer is None else (width[1],))
        out = np.empty(shape, dtype=self.dtype)
        if len(rows) == 0:
            return out
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for k in np.unique(which):
            mask = which == k
            local = rows[mask] - self._starts[k]
            mm = self._shards[k].states(pooling)
            if layer is None:
                out[mask] = mm[local]
            else:
                out[mask] = mm[local, layer]
        return out

    @property
    def layer_means(self) -> np.ndarray:
        """[n, L+1, d] in the storage dtype: ``states("mean")``.

        A whole store with one shard returns the read-only ``np.memmap`` itself; otherwise the
        shards are concatenated (or the selected rows gathered) into memory on first access and
        cached. Use :meth:`layer` to read one layer without materialising all of them.
        """
        return self.states("mean")

    def states(self, pooling: str = "mean") -> np.ndarray:
        """[n, L+1, d] states of one of :data:`POOLINGS` in the storage dtype, read and cached
        like :attr:`layer_means` (which is ``states("mean")``). InputError naming the store and
        the remedy when the store lacks ``pooling`` (see :attr:`poolings`)."""
        key = self._check_pooling(pooling)
        if key not in self._cache:
            if self._rows is None and len(self._shards) == 1:
                value = self._shards[0].states(pooling)
            elif self._rows is None and len(self._shards) > 1:
                value = np.concatenate([s.states(pooling) for s in self._shards], axis=0)
            else:
                value = self._gather(self._global_rows(), None, pooling)
            self._cache[key] = value
        return self._cache[key]

    def layer(self, i: int, pooling: str = "mean") -> np.ndarray:
        """[n, d] states of layer ``i`` (negative counts from the end) of ``pooling`` (default:
        the hidden-state means), storage dtype.

        Reads only that layer from each shard's memmap (or from :meth:`states` if they are
        already in memory). IndexError when ``i`` is out of range.
        """
        key = self._check_pooling(pooling)
        n_layers = self._empty_shape()[0] if not self._shards else self._shards[0].layer_shape[0]
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"layer index must be an int, got {type(i).__name__}")
        if not -n_layers <= i < n_layers:
            raise IndexError(f"layer {i} out of range for {n_layers} layers (L+1)")
        i = int(i) % n_layers
        if key in self._cache:
            return np.array(self._cache[key][:, i])
        return self._gather(self._global_rows(), i, pooling)

    # -- prefix checkpoints ---------------------------------------------------------------------
    @property
    def checkpoints(self) -> Schedule | None:
        """The prefix-checkpoint schedule every record keeps (:mod:`acute.store.checkpoints`), or
        None for a store collected without them."""
        value = self.manifest.get("checkpoints")
        return None if value is None else parse_schedule(value)

    def _require_checkpoints(self) -> None:
        if self.checkpoints is None:
            raise InputError(f"{self.path}: the store keeps no prefix checkpoints (collected without "
                             f"them); {CHECKPOINT_REMEDY}")

    def _locate(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row of this view: its shard and its row within that shard."""
        rows = self._global_rows()
        which = np.searchsorted(self._starts, rows, side="right") - 1
        return which, rows - self._starts[which]

    @property
    def checkpoint_tokens(self) -> list[np.ndarray]:
        """Per record, int64: the token counts of its checkpoints (the last is its length)."""
        self._require_checkpoints()
        which, local = self._locate()
        return [self._shards[k].checkpoint_tokens[self._shards[k].checkpoint_offsets[i]:
                                                  self._shards[k].checkpoint_offsets[i + 1]]
                for k, i in zip(which.tolist(), local.tolist())]

    @property
    def checkpoint_means(self) -> list[np.ndarray]:
        """Per record, [C, L+1, d] in the storage dtype: the means at its checkpoints (read-only
        views of the shards' memory maps)."""
        self._require_checkpoints()
        which, local = self._locate()
        out = []
        for k, i in zip(which.tolist(), local.tolist()):
            shard = self._shards[k]
            out.append(shard.states("checkpoints")[shard.checkpoint_offsets[i]:shard.checkpoint_offsets[i + 1]])
        return out

    def prefix_states(self, k: int) -> np.ndarray:
        """[n, L+1, d] in the storage dtype: per record the mean states a gate reads after ``k``
        generated tokens: its checkpoint at ``k`` tokens, or the last one before (its final
        means once its answer has ended). InputError naming the store when it keeps no
        checkpoints, or when ``k`` falls before a record's first checkpoint."""
        self._require_checkpoints()
        which, local = self._locate()
        out = np.empty((len(which), *self._empty_shape_of_shards()), dtype=self.dtype)
        for s in np.unique(which):
            shard, mask = self._shards[s], which == s
            own = prefix_rows(shard.checkpoint_tokens, shard.checkpoint_offsets, k)
            out[mask] = shard.states("checkpoints")[own[local[mask]]]
        return out

    def _empty_shape_of_shards(self) -> tuple[int, int]:
        return tuple(self._shards[0].layer_shape) if self._shards else self._empty_shape()

    # -- subsets --------------------------------------------------------------------------------
    def select(self, indices: Sequence[int] | np.ndarray) -> Store:
        """A Store over the given rows (int indices, negatives allowed, in the given order; or a
        boolean mask of length n). Shares the memory-mapped shards; arrays are gathered lazily.
        IndexError for out-of-range indices, ValueError for a mask of the wrong length.
        """
        idx = np.asarray(indices)
        n = len(self)
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise InputError(f"indices: boolean mask has shape {idx.shape}, store has {n} records")
            idx = np.flatnonzero(idx)
        elif idx.size == 0:
            idx = np.zeros(0, dtype=np.int64)
        elif not np.issubdtype(idx.dtype, np.integer):
            raise InputError(f"indices must be integers or a boolean mask, got dtype {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"indices out of range for a store of {n} records")
        idx = np.where(idx < 0, idx + n, idx)
        rows = self._global_rows()[idx]
        return Store(self.path, self.manifest, self._shards, rows, self._labels)


def open_store(path: str | os.PathLike, verify: bool = True) -> Store:
    """Open a store directory for reading (committed shards only, in store order: unpartitioned
    shards by index, then part shards by (part, index)).

    Runs the same checks as :func:`verify_store`, including every shard's sha256 (it reads every
    byte once: about a second per GB; ``verify=False`` skips only the checksums). Raises ``FileNotFoundError`` for a missing
    directory or manifest and :class:`CorruptStoreError` (a ``ValueError``) naming the file for a
    truncated shard, an impossible header length, a jsonl/tensor row-count mismatch, an id in two
    shards, etc., and :class:`IncompatibleStoreError` naming a shard written by another collection.
    A store with zero records opens as an empty Store (see the module docstring). Labels added
    later (``labels.jsonl``, :mod:`acute.store.labels`) are merged into the records; a label of
    a record the store does not hold, or of one labelled in its shard, is a
    :class:`CorruptStoreError` naming the file.
    """
    path = Path(path)
    manifest = load_manifest(path)
    shards = load_shards(path, manifest, verify)
    labels = read_labels(path)
    if labels:
        check_labels(path, labels, [r for s in shards for r in s.records])
    return Store(path, manifest, shards, labels=labels)

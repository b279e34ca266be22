"""On-disk record store: generations, correctness labels and pooled hidden states.

A store is a directory::

    manifest.json                    what was collected and how (see below)
    shard-00000.safetensors          layer_means    float16|float32 [b, L+1, d]  (pooling "mean")
                                     last_prompt    float16|float32 [b, L+1, d]  ("last-prompt", optional)
                                     last_answer    float16|float32 [b, L+1, d]  ("last-answer", optional)
                                     token_logprobs float32 [sum of n_tokens]  (flat concatenation)
                                     token_offsets  int64   [b+1]  (row i: flat[off[i]:off[i+1]])
    shard-00000.jsonl                one JSON record per line, same order as the tensor rows
    shard-00001.safetensors ...      shards of a single writer ("unpartitioned")
    shard-p000-00000.safetensors     shards of part 0 of a multi-process collection
    shard-p000-00000.jsonl ...
    shard-p001-00000.safetensors ... shards of part 1, etc.

Pooled hidden states (:data:`POOLINGS`, one [L+1, d] row per record each): ``layer_means`` is the
mean of each layer's states over the answer positions, ``last_prompt`` the state at the prompt's
last token, ``last_answer`` the state at the answer's last pooled position. A store holds the
last two for all of its records or for none, as its manifest's ``poolings`` says (``["mean"]`` or
``["mean", "last-prompt", "last-answer"]``): the first :meth:`StoreWriter.add` with records
decides (or the manifest given to :func:`prepare_store` for part writers, ``["mean"]`` when it
has none), and every shard has exactly the tensors it names. Stores written before acute kept
them have no ``poolings`` key and read as ``["mean"]``; ``acute rerecord`` adds the others.

Readers see the committed shards of both kinds as one store, in a deterministic order:
unpartitioned shards by index, then part shards by (part, index).

Commit protocol (one shard at a time): both files are written to hidden temporary names in the
store directory and fsync'ed, then the ``.jsonl`` is renamed into place, then the ``.safetensors``.
The ``.safetensors`` file is the commit marker: a shard exists once it exists. A ``.jsonl`` without
its ``.safetensors`` (crash between the two renames) and leftover temporary files are orphans;
readers ignore them and a resuming writer deletes them (a part writer only its own part's).

Format versions: ``format_version`` 1 is a store of unpartitioned shards only; 2 (written by
:func:`prepare_store`) may also hold part shards, which acute releases reading only version 1
would silently skip, so they refuse it instead. The shard files are the same in both. A single
writer keeps a version-1 store at 1; preparing it for part writers raises it to 2.

Shard identity: every shard's safetensors metadata holds a ``collection_key``, a short sha256 of
the manifest's :data:`COLLECTION_KEY_FIELDS` (JSON, sorted keys; ``format_version`` enters as
the shard format, :data:`SHARD_FORMAT_VERSION`, so raising a store to version 2 keeps its
keys). A shard whose key differs from the manifest's was written by another collection (a shard
copied in from another store) and is rejected with :class:`IncompatibleStoreError` naming the
file; shards without a key (written before keys existed) are accepted. An id that appears in two committed shards is a
:class:`CorruptStoreError` naming both files.

Manifest: whatever the caller passes (conventionally ``model``, ``model_fingerprint``, ``tokenizer``,
``generation``, ``task``, ``task_settings``, ``num_layers`` (L, the number of decoder layers),
``hidden_size`` (d), ``model_dtype``) plus the store's own fields: ``format``, ``format_version``,
``dtype`` (the *storage* dtype of the hidden states, set by the writer), ``poolings`` (see
above; absent in older stores and while a new one has no records), ``acute_version``,
``created``, ``updated``, ``shard_size``, ``status`` (``"collecting"``, ``"complete"`` or
``"interrupted"``), ``num_records``, ``num_shards`` and ``summary`` (updated at close, or by
:func:`finalize_store`). Readers never trust ``num_records``; the committed shards are the truth.
Resuming requires a ``format_version`` this acute reads, the manifests to agree on
:data:`COMPAT_KEYS` and, when the stored manifest records them, on ``generation`` and
``task_settings``.

Writers and locks (advisory ``flock`` locks, released when the writer closes, aborts or its
process dies): a single :class:`StoreWriter` (``part=None``) owns the manifest and holds an
exclusive lock on the store directory itself (no lock file, so the directory holds only data);
:func:`prepare_store` and :func:`finalize_store` hold it for the duration of the call. A part
writer (``StoreWriter(part=k)``) holds a shared lock on the directory, so part writers run
together but never alongside a single writer, plus an exclusive lock on ``.part-{k:03d}.lock``
(deleted when the writer closes), so no two processes write the same part. A second claimant
gets a :class:`StoreError` instead of waiting. Locks on the directory are local to one machine
on NFS; the part lock files follow the filesystem's ``flock`` semantics.

Multi-process (data-parallel) collection, N processes of ranks 0..N-1 writing one store::

    rank 0:     prepare_store(dir, manifest)          # create or validate; cleans all orphans
    barrier
    every rank: w = StoreWriter(dir, manifest, part=rank); done = w.done_ids
    barrier     # every rank has read the same done_ids before anyone writes
    every rank: todo = [x for x in items if x.id not in done][rank::N]; w.add(...); w.close()
    barrier
    rank 0:     finalize_store(dir)                   # recount, status "complete"

A resumed run, with any number of processes, redoes only the records that no committed shard
holds (records buffered by a process that died are lost from the buffer, not from the store).

Record dicts carry ``id, prompt, generation, answer, gold, correct, task, n_tokens,
raw_confidence, finish_reason`` (+ task-specific ``meta``); only ``id`` (a str or int, unique in the
store) is required. ``n_tokens`` and ``raw_confidence`` are filled in from the log-probs when absent.

Empty stores (a writer closed without records) open fine: ``len(store) == 0``, ``records == []``,
and ``layer_means`` (like ``states(pooling)``) has shape ``(0, L+1, d)`` (``(0, 0, 0)`` when the
manifest does not know L, d).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import re
import warnings
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .pooling import POOLINGS  # a store holds "mean" only, or all three
from .errors import CorruptStoreError, IncompatibleStoreError, InputError, StoreError
from .validation import _first_nonfinite_row

try:
    import fcntl
except ImportError:  # pragma: no cover - no advisory locks (Windows): one writer at a time
    fcntl = None

from ._util import (TMP_SUFFIX as _TMP_SUFFIX, default_mode, fsync_dir, iter_jsonl, json_ready, tmp_path,
                    write_text_atomic)

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "SHARD_FORMAT_VERSION",
    "COMPAT_KEYS",
    "POOLINGS",
    "StoreError",
    "CorruptStoreError",
    "IncompatibleStoreError",
    "COLLECTION_KEY_FIELDS",
    "StoreWriter",
    "prepare_store",
    "finalize_store",
    "collection_key",
    "Store",
    "open_store",
    "verify_store",
    "read_safetensors_header",
]

FORMAT = "acute-store"
#: Newest store layout this acute reads and writes (1: unpartitioned shards; 2: also part shards).
FORMAT_VERSION = 2
#: Layout version of a store written by a single writer (readable by every acute release).
_SINGLE_WRITER_VERSION = 1
#: Version of the shard files themselves (unchanged by layout version 2); hashed into the keys.
SHARD_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Manifest keys that must agree when a writer resumes an existing store.
COMPAT_KEYS = ("model_fingerprint", "task", "dtype", "num_layers", "hidden_size")
#: Manifest key of the weights digest (:func:`acute.models.weights_digest`): compared on resume
#: when both manifests have it (not hashed into shards, so older stores stay readable).
WEIGHTS_KEY = "model_weights"
#: Manifest keys that must also agree on resume, when the stored manifest records them.
_RUN_KEYS = ("generation", "task_settings")
#: Manifest keys hashed into each shard's ``collection_key`` (see :func:`collection_key`).
COLLECTION_KEY_FIELDS = ("format_version", "model_fingerprint", "task", "dtype", "generation",
                         "task_settings")
STATUSES = ("collecting", "complete", "interrupted")
#: Shard tensor of each pooling.
_TENSORS = {"mean": "layer_means", "last-prompt": "last_prompt", "last-answer": "last_answer"}
_MEAN_ONLY = ("mean",)
#: what re-recording an old store adds (named by the errors about a pooling a store lacks)
_REMEDY = "re-record it with `acute rerecord STORE --out NEW` to add them"

#: ``shard-00007.jsonl`` (unpartitioned) or ``shard-p002-00007.safetensors`` (part 2).
_SHARD_FILE_RE = re.compile(r"^shard-(?:p(\d{3,})-)?(\d{5,})\.(safetensors|jsonl)$")
_PART_FILE_RE = re.compile(r"^\.?shard-p(\d{3,})-")  # a part's shard file or its temporary
_PART_LOCK_RE = re.compile(r"^\.part-\d{3,}\.lock$")
_STORAGE_DTYPES = {"float16": np.float16, "float32": np.float32}
_ST_DTYPES = {
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_MAX_HEADER = 100_000_000  # the safetensors format caps headers at 100 MB





# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _shard_name(part: int | None, index: int, ext: str) -> str:
    """``shard-{index:05d}.{ext}``, or ``shard-p{part:03d}-{index:05d}.{ext}`` for a part."""
    return f"shard-{index:05d}.{ext}" if part is None else f"shard-p{part:03d}-{index:05d}.{ext}"


def _parse_shard_name(name: str) -> tuple[int | None, int, str] | None:
    """``(part or None, index, ext)`` of a shard file name, None for any other name."""
    m = _SHARD_FILE_RE.match(name)
    if not m:
        return None
    return (None if m.group(1) is None else int(m.group(1))), int(m.group(2)), m.group(3)


def _part_of(name: str) -> int | None:
    """The part a shard file or its temporary belongs to; None for anything else."""
    m = _PART_FILE_RE.match(name)
    return int(m.group(1)) if m else None


def _part_lock_name(part: int) -> str:
    return f".part-{part:03d}.lock"


def collection_key(manifest: dict) -> str:
    """Short sha256 (16 hex digits) of the manifest's :data:`COLLECTION_KEY_FIELDS`.

    Written into every shard's safetensors metadata: shards of one collection share it, and a
    shard with another key was collected with another model, task, dtype or settings. The
    manifest's ``format_version`` is replaced by :data:`SHARD_FORMAT_VERSION`: the store layout
    does not change what a shard holds.
    """
    fields = {key: manifest.get(key) for key in COLLECTION_KEY_FIELDS}
    fields["format_version"] = SHARD_FORMAT_VERSION
    text = json.dumps(json_ready(fields, where="collection settings", nonfinite="error"),
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _dumps(obj: Any, what: str) -> str:
    return json.dumps(json_ready(obj, where=what, nonfinite="error"), allow_nan=False, ensure_ascii=False)


#: the temporary file safetensors writes before renaming it into place (left by a kill mid-write)
_SAFETENSORS_TMP_RE = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


def _is_tmp(name: str) -> bool:
    return (name.startswith(".") and name.endswith(_TMP_SUFFIX)) or bool(_SAFETENSORS_TMP_RE.match(name))




def _storage_dtype(dtype: Any) -> str:
    """Normalise a storage dtype spec to ``"float16"`` or ``"float32"``; ValueError otherwise."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in _STORAGE_DTYPES:
        raise InputError(f"dtype must be 'float16' or 'float32', got {dtype!r}")
    return name


def _expected_shape(manifest: dict) -> tuple[int | None, int | None]:
    """(num_layers L, hidden_size d) from the manifest, falling back to ``model_fingerprint``."""
    fp = manifest.get("model_fingerprint")
    fp = fp if isinstance(fp, dict) else {}
    out = []
    for key in ("num_layers", "hidden_size"):
        value = manifest.get(key, fp.get(key))
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"manifest[{key!r}] must be a positive int, got {value!r}")
            value = int(value)
        out.append(value)
    return out[0], out[1]


def _poolings(value: Any, where: str, error: type = InputError) -> tuple[str, ...]:
    """A manifest's ``poolings`` as a tuple, ``("mean",)`` or :data:`POOLINGS`; ``error`` naming
    ``where`` for anything else."""
    if isinstance(value, (list, tuple)) and tuple(value) in (_MEAN_ONLY, POOLINGS):
        return tuple(value)
    raise error(f"{where}: 'poolings' must be {list(_MEAN_ONLY)} or {list(POOLINGS)}, got {value!r}")


def _check_poolings(path: Path, stored: Sequence[str] | None, given: Sequence[str] | None,
                    error: type = InputError) -> None:
    """``error`` naming the store and both choices when records with the poolings ``given`` would
    go into a store that holds ``stored`` (None on either side: not decided yet)."""
    if stored is None or given is None or tuple(stored) == tuple(given):
        return
    hint = f"; or {_REMEDY}, then add to the new store" if tuple(stored) == _MEAN_ONLY else ""
    raise error(
        f"{path}: the store holds the poolings {list(stored)} for all of its records, these records "
        f"come with {list(given)}; a store keeps last_prompt/last_answer for all of its records or "
        f"for none: write them to another store{hint}")


def _load_manifest(path: Path) -> dict:
    if not path.is_dir():
        raise FileNotFoundError(f"store directory not found: {path}")
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise FileNotFoundError(f"not a store: {mpath} does not exist")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptStoreError(f"{mpath}: invalid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise CorruptStoreError(f"{mpath}: expected a JSON object, got {type(manifest).__name__}")
    version = manifest.get("format_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                or version < 1):
        raise CorruptStoreError(f"{mpath}: format_version must be a positive int, got {version!r}")
    if version is not None and version > FORMAT_VERSION:
        raise StoreError(
            f"{mpath}: format_version {version} is newer than this acute supports ({FORMAT_VERSION});"
            " upgrade acute to read this store"
        )
    if "poolings" in manifest:
        _poolings(manifest["poolings"], str(mpath), CorruptStoreError)
    return manifest


def _committed_shards(path: Path) -> list[tuple[int | None, int, Path]]:
    """``(part, index, .safetensors path)`` of the committed shards, in store order:
    unpartitioned shards (``part`` None) by index, then part shards by (part, index)."""
    found = []
    for entry in os.listdir(path):
        parsed = _parse_shard_name(entry)
        if parsed and parsed[2] == "safetensors":
            found.append((parsed[0], parsed[1], path / entry))
    return sorted(found, key=lambda t: (-1 if t[0] is None else t[0], t[1]))


# --------------------------------------------------------------------------------------------
# reading shards
# --------------------------------------------------------------------------------------------


def read_safetensors_header(path: str | os.PathLike) -> tuple[dict, int]:
    """Parse a ``.safetensors`` header without reading the tensor data.

    Returns ``(tensors, data_start)``: ``tensors`` maps each name to ``{"dtype": np.dtype,
    "shape": tuple, "offset": absolute byte offset, "nbytes": int}`` (``__metadata__`` is returned
    under that key as a dict of strings); ``data_start`` is the absolute offset of the byte buffer.
    Raises :class:`CorruptStoreError` naming the file if it is truncated, the header length is
    impossible, the header is not JSON, or a tensor's extent disagrees with its dtype and shape
    or lies outside the file.
    """
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        raise CorruptStoreError(f"{path}: truncated file ({size} bytes, no header length)")
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        if header_len < 2 or header_len > _MAX_HEADER or 8 + header_len > size:
            raise CorruptStoreError(
                f"{path}: header length {header_len} is impossible for a file of {size} bytes "
                "(truncated or not a safetensors file)"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptStoreError(f"{path}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CorruptStoreError(f"{path}: header is not a JSON object")
    data_start = 8 + header_len
    buffer_len = size - data_start
    tensors: dict = {}
    for name, info in header.items():
        if name == "__metadata__":
            tensors[name] = dict(info or {})
            continue
        try:
            dtype = _ST_DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptStoreError(f"{path}: bad header entry for tensor {name!r} ({err!r})") from None
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if any(s < 0 for s in shape) or begin < 0 or end - begin != nbytes:
            raise CorruptStoreError(
                f"{path}: tensor {name!r} has data_offsets {[begin, end]} inconsistent with "
                f"dtype {info['dtype']} and shape {list(shape)}"
            )
        if end > buffer_len:
            raise CorruptStoreError(
                f"{path}: truncated file: tensor {name!r} ends at byte {data_start + end} "
                f"but the file has {size} bytes"
            )
        tensors[name] = {"dtype": dtype, "shape": shape, "offset": data_start + begin, "nbytes": nbytes}
    return tensors, data_start


def _tensors_sha256(path: Path, tensors: dict) -> str:
    """sha256 over the raw bytes of a shard's tensors, in name order (read in 16 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for name in sorted(k for k in tensors if k != "__metadata__"):
            info = tensors[name]
            f.seek(info["offset"])
            left = info["nbytes"]
            while left:
                block = f.read(min(left, 1 << 24))
                if not block:
                    raise CorruptStoreError(f"{path}: truncated while reading tensor {name!r}")
                h.update(block)
                left -= len(block)
    return h.hexdigest()


def _array_bytes_sha256(arrays: dict[str, np.ndarray]) -> str:
    """What :func:`_tensors_sha256` reads back from a shard written from ``arrays``."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(np.ascontiguousarray(arrays[name]).astype(arrays[name].dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def _check_checksums(st_path: Path, jsonl_path: Path, tensors: dict, metadata: dict) -> None:
    """CorruptStoreError naming the file whose bytes differ from the sha256 its shard recorded at
    commit time (``records_sha256`` of the ``.jsonl``, ``tensors_sha256`` of the tensors).
    Shards written before checksums existed have none and are accepted."""
    want = metadata.get("records_sha256")
    if want is not None and hashlib.sha256(jsonl_path.read_bytes()).hexdigest() != want:
        raise CorruptStoreError(f"{jsonl_path}: the records differ from what was committed (sha256 "
                                f"mismatch); restore the file or move shard {st_path.name} out of the store")
    want = metadata.get("tensors_sha256")
    if want is not None and _tensors_sha256(st_path, tensors) != want:
        raise CorruptStoreError(f"{st_path}: the hidden states or log-probs differ from what was committed "
                                "(sha256 mismatch); restore the file or move the shard out of the store")


def _read_small(path: Path, info: dict) -> np.ndarray:
    """Read a (small) tensor fully into memory."""
    with open(path, "rb") as f:
        f.seek(info["offset"])
        buf = f.read(info["nbytes"])
    return np.frombuffer(buf, dtype=info["dtype"]).reshape(info["shape"]).astype(
        info["dtype"].newbyteorder("=")
    )


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise CorruptStoreError(f"{path}: missing (its .safetensors is committed)")
    records = []
    for lineno, rec in iter_jsonl(path, error=CorruptStoreError):
        if "id" not in rec:
            raise CorruptStoreError(f"{path}:{lineno}: expected a JSON object with an 'id'")
        records.append(rec)
    return records


def _check_states_tensor(st_path: Path, name: str, info: dict, manifest: dict,
                         like: dict | None = None) -> None:
    """CorruptStoreError naming the shard when its pooled-state tensor ``name`` is not a 3-D
    [n, L+1, d] tensor of the manifest's storage ``dtype``, ``num_layers + 1`` and ``hidden_size``
    (when known) or, given ``like`` (``layer_means``' header entry), not of its dtype and shape."""
    dtype, shape = info["dtype"], info["shape"]
    want_dtype = manifest.get("dtype")
    if want_dtype is not None and dtype != np.dtype(_STORAGE_DTYPES.get(want_dtype, dtype)):
        raise CorruptStoreError(f"{st_path}: {name} dtype {dtype.name} != manifest dtype {want_dtype}")
    if dtype.name not in _STORAGE_DTYPES:
        raise CorruptStoreError(f"{st_path}: {name} dtype {dtype.name} not supported")
    if len(shape) != 3:
        raise CorruptStoreError(f"{st_path}: {name} must be 3-D, has shape {list(shape)}")
    num_layers, hidden = _expected_shape(manifest)
    if num_layers is not None and shape[1] != num_layers + 1:
        raise CorruptStoreError(
            f"{st_path}: {name} has {shape[1]} layers, manifest num_layers+1 = {num_layers + 1}")
    if hidden is not None and shape[2] != hidden:
        raise CorruptStoreError(f"{st_path}: {name} hidden size {shape[2]} != manifest hidden_size {hidden}")
    if like is not None and (dtype, shape) != (like["dtype"], like["shape"]):
        raise CorruptStoreError(f"{st_path}: {name} is {dtype.name} {list(shape)} but layer_means is "
                                f"{like['dtype'].name} {list(like['shape'])}")


class _Shard:
    """One committed, verified shard: records, log-probs (in memory) and memmaps of the pooled
    states (``layer_means``, and ``last_prompt``/``last_answer`` when the store keeps them).

    ``part`` (None for an unpartitioned shard) and ``index`` come from the file name; ``key`` is
    the manifest's :func:`collection_key`, which the shard's own key (if any) must equal.
    """

    def __init__(self, st_path: Path, manifest: dict, key: str, verify: bool = True):
        self.path = st_path
        self.jsonl_path = st_path.with_suffix(".jsonl")
        self.part, self.index, _ = _parse_shard_name(st_path.name)
        tensors, _ = read_safetensors_header(st_path)
        metadata = tensors.get("__metadata__") or {}
        _check_collection_key(st_path, metadata, key)
        self.has_checksums = "tensors_sha256" in metadata and "records_sha256" in metadata
        self.poolings = tuple(manifest.get("poolings", _MEAN_ONLY))
        extras = [_TENSORS[p] for p in self.poolings[1:]]
        for name in ("layer_means", "token_logprobs", "token_offsets", *extras):
            if name not in tensors:
                raise CorruptStoreError(f"{st_path}: tensor {name!r} is missing")
        for name in (_TENSORS[p] for p in POOLINGS if p not in self.poolings):
            if name in tensors:
                raise CorruptStoreError(f"{st_path}: has a tensor {name!r} but the store's {MANIFEST} "
                                        f"records the poolings {list(self.poolings)}")
        lm, lp, off = tensors["layer_means"], tensors["token_logprobs"], tensors["token_offsets"]
        _check_states_tensor(st_path, "layer_means", lm, manifest)
        for name in extras:
            _check_states_tensor(st_path, name, tensors[name], manifest, like=lm)
        n = lm["shape"][0]
        if lp["dtype"] != np.dtype("<f4") or len(lp["shape"]) != 1:
            raise CorruptStoreError(f"{st_path}: token_logprobs must be a 1-D float32 tensor")
        if off["dtype"] != np.dtype("<i8") or off["shape"] != (n + 1,):
            raise CorruptStoreError(
                f"{st_path}: token_offsets must be int64 of shape [{n + 1}], "
                f"got {off['dtype'].name} {list(off['shape'])}"
            )
        offsets = _read_small(st_path, off)
        if offsets[0] != 0 or offsets[-1] != lp["shape"][0] or np.any(np.diff(offsets) < 0):
            raise CorruptStoreError(
                f"{st_path}: token_offsets must start at 0, be non-decreasing and end at "
                f"len(token_logprobs) = {lp['shape'][0]}"
            )
        self.records = _read_jsonl(self.jsonl_path)
        if len(self.records) != n:
            raise CorruptStoreError(
                f"{self.jsonl_path}: {len(self.records)} records but {st_path.name} has {n} rows"
            )
        self.offsets = offsets
        self.logprobs = _read_small(st_path, lp)
        for i, rec in enumerate(self.records):
            nt = rec.get("n_tokens")
            if nt is not None and nt != offsets[i + 1] - offsets[i]:
                raise CorruptStoreError(
                    f"{self.jsonl_path}: record {rec['id']!r} has n_tokens={nt} but "
                    f"{offsets[i + 1] - offsets[i]} log-probs in {st_path.name}"
                )
        if verify:  # last: a structural problem gets its own, more specific message first
            _check_checksums(st_path, self.jsonl_path, tensors, metadata)
        self.n = n
        self.layer_shape = lm["shape"][1:]
        self.dtype = lm["dtype"].newbyteorder("=")
        self._infos = {p: tensors[_TENSORS[p]] for p in self.poolings}
        self._memmaps: dict[str, np.memmap] = {}

    def states(self, pooling: str = "mean") -> np.ndarray:
        """Read-only memmap [n, L+1, d] of one of this shard's poolings (created on first use)."""
        if pooling not in self._memmaps:
            info = self._infos[pooling]
            self._memmaps[pooling] = np.memmap(self.path, dtype=info["dtype"], mode="r",
                                               offset=info["offset"], shape=info["shape"])
        return self._memmaps[pooling]

    @property
    def layer_means(self) -> np.ndarray:
        return self.states("mean")

    def token_logprobs(self) -> list[np.ndarray]:
        o = self.offsets
        return [self.logprobs[o[i]:o[i + 1]] for i in range(self.n)]


def _check_collection_key(st_path: Path, metadata: dict, key: str) -> None:
    """IncompatibleStoreError naming the shard when its ``collection_key`` is not ``key``
    (shards written before keys existed have none and are accepted)."""
    found = metadata.get("collection_key")
    if found is not None and found != key:
        raise IncompatibleStoreError(
            f"{st_path}: written by a different collection run/settings (collection_key {found} "
            f"!= {key} of {MANIFEST}: model, task, dtype, generation or task settings differ); "
            "move the shard out of this store"
        )


def _load_shards(path: Path, manifest: dict, verify: bool = True) -> list[_Shard]:
    """Every committed shard, verified (with its checksums unless ``verify`` is False), in store
    order; ids must be unique across the store."""
    key = collection_key(manifest)
    shards = [_Shard(p, manifest, key, verify) for _, _, p in _committed_shards(path)]
    seen: dict = {}
    for shard in shards:
        for rec in shard.records:
            rid = rec["id"]
            if rid in seen:
                raise CorruptStoreError(
                    f"{shard.jsonl_path}: id {rid!r} already appears in {seen[rid]}"
                )
            seen[rid] = shard.jsonl_path.name
        if shards and shard.layer_shape != shards[0].layer_shape:
            raise CorruptStoreError(
                f"{shard.path}: layer_means rows have shape {list(shard.layer_shape)} but "
                f"{shards[0].path.name} has {list(shards[0].layer_shape)}"
            )
    return shards


def verify_store(path: str | os.PathLike) -> dict:
    """Check a store's consistency without loading its hidden states.

    Checks that the manifest is readable; for every committed shard, that the safetensors header
    parses and fits the file, the tensors have the right dtypes/shapes (``layer_means`` matches the
    manifest's ``dtype``, ``num_layers + 1`` and ``hidden_size`` when known; ``last_prompt`` and
    ``last_answer`` are present exactly when the manifest's ``poolings`` has them, and shaped like
    ``layer_means``), the ``.jsonl`` line
    count equals the number of rows, ``token_offsets`` start at 0, are non-decreasing and end at
    the number of log-probs, ``n_tokens`` agrees with the offsets, the shard's
    ``collection_key`` (when it has one) matches the manifest; and that ids are unique.
    and every shard's sha256 (of its records and of its tensors, recorded when it was committed).
    Orphan ``.jsonl`` and temporary files are listed, not deleted.

    Returns ``{"num_records", "num_shards", "shards": [{"file", "num_records", "checksummed"}],
    "orphans": [...], "status", "poolings": [...], "problems": [...]}``; ``problems`` names what
    makes the store unfit for use as is without being corrupt: an unfinished collection (status other than
    "complete"), a manifest count that disagrees with the shards, orphans, shards without
    checksums (written by an older acute). Raises ``FileNotFoundError`` (missing directory or
    manifest), :class:`CorruptStoreError` or :class:`IncompatibleStoreError` naming the
    offending file.
    """
    path = Path(path)
    manifest = _load_manifest(path)
    shards = _load_shards(path, manifest)
    n = sum(s.n for s in shards)
    orphans = _orphans(path)
    problems = []
    if manifest.get("status") != "complete":
        problems.append(f"status is {manifest.get('status')!r}: the collection did not finish")
    if manifest.get("num_records") is not None and manifest["num_records"] != n:
        problems.append(f"the manifest counts {manifest['num_records']} records, the shards hold {n}")
    if orphans:
        problems.append(f"{len(orphans)} uncommitted file(s), removed by the next resume: {', '.join(orphans)}")
    unchecked = [s.path.name for s in shards if not s.has_checksums]
    if unchecked:
        problems.append(f"{len(unchecked)} shard(s) without checksums (written by an older acute)")
    return {
        "num_records": n,
        "num_shards": len(shards),
        "shards": [{"file": s.path.name, "num_records": s.n, "checksummed": s.has_checksums} for s in shards],
        "orphans": orphans,
        "status": manifest.get("status"),
        "poolings": list(manifest.get("poolings", _MEAN_ONLY)),
        "problems": problems,
    }


def _orphans(path: Path, part: int | None = None) -> list[str]:
    """Names of uncommitted files: temporaries and ``.jsonl`` files without a ``.safetensors``.

    With ``part``, only that part's (its shards' temporaries and orphan ``.jsonl`` files).
    """
    committed = {p.with_suffix(".jsonl").name for _, _, p in _committed_shards(path)}
    out = []
    for entry in sorted(os.listdir(path)):
        parsed = _parse_shard_name(entry)
        orphan = _is_tmp(entry) or (parsed is not None and parsed[2] == "jsonl"
                                    and entry not in committed)
        if orphan and (part is None or _part_of(entry) == part):
            out.append(entry)
    return out


def _delete(path: Path, names: Iterable[str]) -> None:
    for name in names:
        (path / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Store (reader)
# --------------------------------------------------------------------------------------------


class Store:
    """A read-only view over a store's committed records (use :func:`open_store`).

    Attributes are computed on first access and cached. ``select`` returns another ``Store``
    over a subset of rows that shares the same memory-mapped shards.
    """

    def __init__(self, path: Path, manifest: dict, shards: list[_Shard], rows: np.ndarray | None = None):
        self.path = path
        self.manifest = manifest
        self._shards = shards
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
        return _expected_shape(self.manifest)[0]

    @property
    def hidden_size(self) -> int | None:
        if self._shards:
            return self._shards[0].layer_shape[1]
        return _expected_shape(self.manifest)[1]

    @property
    def poolings(self) -> tuple[str, ...]:
        """The poolings this store holds for every record: ``("mean",)`` (every store written
        before acute kept the others) or :data:`POOLINGS`."""
        return tuple(self.manifest.get("poolings", _MEAN_ONLY))

    def _check_pooling(self, pooling: str) -> str:
        """``pooling``'s tensor name; InputError for an unknown pooling or one the store lacks."""
        if pooling not in POOLINGS:
            raise InputError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
        if pooling not in self.poolings:
            raise InputError(f"{self.path}: the store has no {pooling!r} states (it holds "
                             f"{', '.join(self.poolings)}: collected before acute kept them); {_REMEDY}")
        return _TENSORS[pooling]

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype of the hidden states (float16 or float32)."""
        if self._shards:
            return self._shards[0].dtype
        return np.dtype(_STORAGE_DTYPES.get(self.manifest.get("dtype", "float16"), np.float16))

    def _global_rows(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64) if self._rows is None else self._rows

    def where(self, i: int) -> str:
        """``"record <id> (<shard file>)"`` of row ``i`` of this view: how errors name a record."""
        g = int(self._global_rows()[i])
        shard = self._shards[int(np.searchsorted(self._starts, g, side="right")) - 1]
        return f"record {self.ids[i]!r} ({shard.path.name})"

    def check_finite(self) -> None:
        """:class:`CorruptStoreError` naming the record id and shard of the first NaN or inf in
        the raw confidences or the hidden states of any pooling (read in chunks of rows, which
        are not kept)."""
        conf = np.asarray(self.raw_confidence, dtype=np.float64)
        if not np.isfinite(conf).all():
            i = int(np.argmin(np.isfinite(conf)))
            raise CorruptStoreError(f"{self.path}: {self.where(i)} has a non-finite raw confidence ({conf[i]})")
        rows, step = self._global_rows(), 256
        for pooling in self.poolings if self._shards else ():
            for start in range(0, len(rows), step):
                i = _first_nonfinite_row(self._gather(rows[start:start + step], None, pooling))
                if i is not None:
                    raise CorruptStoreError(f"{self.path}: {self.where(start + i)} has a non-finite hidden "
                                            f"state (NaN or inf) in {_TENSORS[pooling]}")

    # -- per-record data ------------------------------------------------------------------------
    @property
    def records(self) -> list[dict]:
        """Record dicts in store order (shared objects; copy before mutating)."""
        if "records" not in self._cache:
            all_records = [r for s in self._shards for r in s.records]
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
        return Store(self.path, self.manifest, self._shards, rows)


def open_store(path: str | os.PathLike, verify: bool = True) -> Store:
    """Open a store directory for reading (committed shards only, in store order: unpartitioned
    shards by index, then part shards by (part, index)).

    Runs the same checks as :func:`verify_store`, including every shard's sha256 (it reads every
    byte once: about a second per GB; ``verify=False`` skips only the checksums). Raises ``FileNotFoundError`` for a missing
    directory or manifest and :class:`CorruptStoreError` (a ``ValueError``) naming the file for a
    truncated shard, an impossible header length, a jsonl/tensor row-count mismatch, an id in two
    shards, etc., and :class:`IncompatibleStoreError` naming a shard written by another collection.
    A store with zero records opens as an empty Store (see the module docstring).
    """
    path = Path(path)
    manifest = _load_manifest(path)
    return Store(path, manifest, _load_shards(path, manifest, verify))


# --------------------------------------------------------------------------------------------
# locks
# --------------------------------------------------------------------------------------------

_NO_LOCKS_ERRNOS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _try_flock(fd: int, exclusive: bool) -> bool:
    """Take a non-blocking ``flock`` on ``fd``; False when another open file holds a conflicting
    one. Where the filesystem has no locks, warns and returns True (the caller goes unlocked)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno not in _NO_LOCKS_ERRNOS:
            raise
        warnings.warn(f"file locks are not supported here ({err}); make sure that one process "
                      "at most writes each store (or each part)", RuntimeWarning, stacklevel=3)
    return True


def _lock_store(path: Path, exclusive: bool) -> int | None:
    """Lock the store directory itself: exclusive for the manifest's owner (a single writer,
    :func:`prepare_store`, :func:`finalize_store`), shared for part writers.

    Returns the open descriptor (closing it releases the lock; None where the platform has no
    ``fcntl``). StoreError when another process holds a conflicting lock; FileNotFoundError when
    the directory does not exist.
    """
    if not path.is_dir():
        raise FileNotFoundError(f"store directory not found: {path}")
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    if not _try_flock(fd, exclusive):
        os.close(fd)
        holder = ("part writers or another writer" if exclusive else
                  "a single StoreWriter, prepare_store or finalize_store")
        raise StoreError(
            f"{path}: the store is being written by another process ({holder} holds its lock); "
            "wait until it has finished"
        )
    return fd


@contextmanager
def _store_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive store lock for the duration of a ``with`` block."""
    fd = _lock_store(path, exclusive=True)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _lock_part(path: Path, part: int) -> int | None:
    """Exclusive lock on ``.part-{part:03d}.lock`` (created if needed); returns the descriptor
    (None where the platform has no ``fcntl``).

    StoreError naming the part and the store when another process holds it. The holder deletes
    the lock file when it releases it, so a lock won on a file that is no longer at the path is
    retried on a fresh one.
    """
    if fcntl is None:
        return None
    lock = path / _part_lock_name(part)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        if not _try_flock(fd, exclusive=True):
            os.close(fd)
            raise StoreError(
                f"{path}: part {part} is already being written by another process "
                f"(it holds {lock.name}); give every process its own part"
            )
        try:
            at_path = os.stat(lock)
        except FileNotFoundError:
            at_path = None
        mine = os.fstat(fd)
        if at_path is not None and (at_path.st_dev, at_path.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)


def _unlock_part(path: Path, part: int, fd: int) -> None:
    """Delete the part's lock file while still holding it, then release the lock."""
    try:
        (path / _part_lock_name(part)).unlink(missing_ok=True)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# manifests: create, resume, finalize
# --------------------------------------------------------------------------------------------


def _writer_args(manifest: Any, dtype: Any, shard_size: Any) -> tuple[str, int]:
    """Validate a writer's arguments; returns the normalised ``(dtype, shard_size)``."""
    if not isinstance(manifest, dict):
        raise InputError(f"manifest must be a dict, got {type(manifest).__name__}")
    if (isinstance(shard_size, bool) or not isinstance(shard_size, (int, np.integer))
            or shard_size < 1):
        raise InputError(f"shard_size must be a positive int, got {shard_size!r}")
    return _storage_dtype(dtype), int(shard_size)


def _normalised_manifest(manifest: dict, dtype: str) -> dict:
    """A JSON-normalised copy of a caller's manifest with the store's own fields set."""
    new = dict(manifest)
    given = new.get("dtype")
    if given is not None and given != dtype:
        raise InputError(
            f"manifest['dtype']={given!r} but dtype={dtype!r}: the manifest's 'dtype' is the "
            "storage dtype of layer_means; put the model's dtype under 'model_dtype'"
        )
    from acute import __version__

    new["dtype"] = dtype
    if "poolings" in new:
        new["poolings"] = list(_poolings(new["poolings"], "manifest"))
    new["format"] = FORMAT
    new["format_version"] = _SINGLE_WRITER_VERSION
    new.setdefault("acute_version", __version__)
    L, d = _expected_shape(new)
    if L is not None:
        new["num_layers"] = L
    if d is not None:
        new["hidden_size"] = d
    return json.loads(_dumps(new, "manifest"))  # tuples -> lists, numpy -> python


def _check_compatible(mpath: Path, old: dict, new: dict, allow_other_weights: bool = False) -> None:
    """IncompatibleStoreError naming the first key on which the stored manifest ``old`` and a
    writer's ``new`` one disagree: :data:`COMPAT_KEYS` (``num_layers``/``hidden_size`` only when
    both know them), when the stored manifest records them, ``generation``/``task_settings``, and
    the weights digest (``model_weights``) when both record one, unless ``allow_other_weights``."""
    ow, nw = old.get(WEIGHTS_KEY), new.get(WEIGHTS_KEY)
    if ow is not None and nw is not None and ow != nw and not allow_other_weights:
        raise IncompatibleStoreError(
            f"{mpath}: cannot resume with other weights: the store was collected from a model whose "
            f"weights have sha256 {ow.get('sha256')!r}, this model's have {nw.get('sha256')!r} (same "
            "architecture, another checkpoint or dtype?). Use another folder, or allow_other_weights=True "
            "(--allow-other-weights) to add this model's records to the store anyway")
    for key in COMPAT_KEYS + _RUN_KEYS:
        stored, given = old.get(key), new.get(key)
        if key in ("num_layers", "hidden_size") and (stored is None or given is None):
            continue  # unknown on one side: adopt the known value
        if key in _RUN_KEYS and key not in old:
            continue  # a store from before these were recorded
        if stored != given:
            raise IncompatibleStoreError(
                f"{mpath}: cannot resume, manifest key {key!r} differs: "
                f"stored {stored!r}, new {given!r}"
            )


def _merge_weights(merged: dict, old: dict, new: dict, path: Path) -> None:
    """The resumed manifest's weights: the stored digest stays; a different one (allowed by the
    caller) is added to ``model_weights_also``; a store without one adopts the new one."""
    ow, nw = old.get(WEIGHTS_KEY), new.get(WEIGHTS_KEY)
    if ow is None:
        if nw is not None and old.get("num_records"):
            logger.warning("%s records no weights digest (written by an older acute): its %s records "
                           "cannot be checked against this model; recording this model's digest",
                           path, old.get("num_records"))
        return
    merged[WEIGHTS_KEY] = ow
    if nw is not None and nw != ow:
        also = [w for w in old.get("model_weights_also", []) if w != nw]
        merged["model_weights_also"] = also + [nw]


def _fill_shape(manifest: dict, *sources: dict) -> dict:
    """Fill an unknown ``num_layers``/``hidden_size`` from the first source that knows it."""
    for key in ("num_layers", "hidden_size"):
        for source in sources:
            if manifest.get(key) is None and source.get(key) is not None:
                manifest[key] = source[key]
    return manifest


def _shape_of(shards: Sequence[_Shard]) -> dict:
    """``num_layers``/``hidden_size`` of the first shard's ``layer_means`` ({} without shards)."""
    if not shards:
        return {}
    rows, hidden = shards[0].layer_shape
    return {"num_layers": int(rows) - 1, "hidden_size": int(hidden)}


class _Tally:
    """Committed ids and label counts: a writer's ``done_ids`` and the manifest's summary."""

    def __init__(self, shards: Sequence[_Shard] = ()):
        self.ids: set = set()
        self.num_shards = 0
        self.num_labelled = 0
        self.num_correct = 0
        for shard in shards:
            self.add_shard(shard.records)

    def add_shard(self, records: Iterable[dict]) -> None:
        self.num_shards += 1
        for rec in records:
            self.ids.add(rec["id"])
            if rec.get("correct") is not None:
                self.num_labelled += 1
                self.num_correct += bool(rec["correct"])

    def stamp(self, manifest: dict) -> dict:
        """Set the manifest's ``updated``, ``num_records``, ``num_shards``, ``summary``; return it."""
        manifest["updated"] = _now()
        manifest["num_records"] = len(self.ids)
        manifest["num_shards"] = self.num_shards
        manifest["summary"] = {
            "num_records": len(self.ids),
            "num_labelled": self.num_labelled,
            "num_correct": self.num_correct,
            "accuracy": self.num_correct / self.num_labelled if self.num_labelled else None,
        }
        return manifest


def _write_manifest(path: Path, manifest: dict) -> None:
    write_text_atomic(path / MANIFEST, json.dumps(
        json_ready(manifest, where="manifest", nonfinite="error"), indent=2, ensure_ascii=False) + "\n")


def _open_as_owner(path: Path, new: dict, shard_size: int, allow_other_weights: bool = False,
                   decide_poolings: bool = False) -> tuple[dict, list[_Shard]]:
    """Create or resume a store with the (normalised) manifest ``new``; the caller holds the
    exclusive store lock.

    Resuming checks the manifests agree (:class:`IncompatibleStoreError` naming the key), deletes
    every orphan and stale part lock file, and verifies all committed shards. Writes the manifest
    with status ``"collecting"`` and current counts; returns it and the shards. The manifest's
    ``poolings`` stay undecided (absent) while the store has no records and no one chose them,
    unless ``decide_poolings`` (then ``["mean"]``).
    """
    mpath = path / MANIFEST
    if mpath.is_file():
        old = _load_manifest(path)
        _check_compatible(mpath, old, new, allow_other_weights)
        if "poolings" not in old and _committed_shards(path):
            old["poolings"] = list(_MEAN_ONLY)  # a store from before acute kept other poolings
        _check_poolings(path, old.get("poolings"), new.get("poolings"), IncompatibleStoreError)
        merged = _fill_shape({**old, **new, "created": old.get("created", _now())}, old)
        _merge_weights(merged, old, new, path)
        merged["format_version"] = max(old.get("format_version") or 1, new["format_version"])
        _delete(path, _orphans(path))
        _delete(path, [e for e in os.listdir(path) if _PART_LOCK_RE.match(e)])
        shards = _load_shards(path, merged)
        _fill_shape(merged, _shape_of(shards))
    else:
        if _committed_shards(path):
            raise StoreError(f"{path}: has shard files but no {MANIFEST}; refusing to write")
        merged, shards = new, []
        merged.setdefault("created", _now())
    if decide_poolings:
        merged.setdefault("poolings", list(_MEAN_ONLY))
    merged["shard_size"] = shard_size
    merged["status"] = "collecting"
    _write_manifest(path, _Tally(shards).stamp(merged))
    return merged, shards


def prepare_store(out_dir: str | os.PathLike, manifest: dict, dtype: str = "float16",
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
    new = {**_normalised_manifest(manifest, dtype), "format_version": FORMAT_VERSION}
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    with _store_lock(path):
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
    with _store_lock(path):
        manifest = _load_manifest(path)
        shards = _load_shards(path, manifest)
        _fill_shape(manifest, _shape_of(shards))
        manifest["status"] = status
        _write_manifest(path, _Tally(shards).stamp(manifest))
    return manifest


# --------------------------------------------------------------------------------------------
# StoreWriter
# --------------------------------------------------------------------------------------------


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
    bad = _first_nonfinite_row(arr)
    if bad is not None:
        raise InputError(f"{name} has non-finite values (record {ids[bad]!r})")
    with np.errstate(over="ignore"):
        stored = arr.astype(_STORAGE_DTYPES[dtype])
    bad = _first_nonfinite_row(stored)
    if bad is not None:
        raise InputError(f"{name} overflows {dtype} (|x| > 65504) in record {ids[bad]!r}; use dtype='float32'")
    return stored


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
    dtype : storage dtype of the hidden states: ``"float16"`` (default) or ``"float32"``.
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

    def __init__(self, out_dir: str | os.PathLike, manifest: dict, dtype: str = "float16",
                 shard_size: int = 256, *, part: int | None = None, allow_other_weights: bool = False):
        self._store_fd: int | None = None
        self._part_fd: int | None = None
        self.dtype, self.shard_size = _writer_args(manifest, dtype, shard_size)
        if part is not None and (isinstance(part, bool) or not isinstance(part, (int, np.integer))
                                 or part < 0):
            raise InputError(f"part must be None or an int >= 0, got {part!r}")
        new = _normalised_manifest(manifest, self.dtype)
        self.path = Path(out_dir)
        self.part = None if part is None else int(part)
        self._closed = False
        self._buffer: list[tuple[dict, str, tuple[np.ndarray, ...], np.ndarray]] = []
        self._pending: set = set()
        if self.part is None:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not (self.path / MANIFEST).is_file():
            raise StoreError(
                f"{self.path / MANIFEST} does not exist: call prepare_store() in the main process "
                "before opening part writers"
            )
        self._store_fd = _lock_store(self.path, exclusive=self.part is None)
        try:
            if self.part is None:
                self.manifest, shards = _open_as_owner(self.path, new, self.shard_size, allow_other_weights)
            else:
                self._part_fd = _lock_part(self.path, self.part)
                self.manifest, shards = self._open_part(new, allow_other_weights)
        except BaseException:
            self._release()
            raise
        self._tally = _Tally(shards)
        self._key = collection_key(self.manifest)
        poolings = self.manifest.get("poolings")  # None: undecided until the first add
        self._poolings = None if poolings is None else tuple(poolings)
        own = [shard.index for shard in shards if shard.part == self.part]
        self._next_index = max(own) + 1 if own else 0

    # -- opening / closing ----------------------------------------------------------------------
    def _open_part(self, new: dict, allow_other_weights: bool = False) -> tuple[dict, list[_Shard]]:
        """Check a part writer's (normalised) manifest against the stored one, delete this part's
        orphans and load the committed shards of every part. Returns (stored manifest, shards)."""
        stored = _load_manifest(self.path)
        if (stored.get("format_version") or 1) < FORMAT_VERSION:
            raise StoreError(
                f"{self.path / MANIFEST}: format_version {stored.get('format_version')} was not "
                "prepared for part writers: call prepare_store() in the main process first"
            )
        _check_compatible(self.path / MANIFEST, stored, new, allow_other_weights)
        stored.setdefault("poolings", list(_MEAN_ONLY))  # prepared by an acute that kept the mean only
        _check_poolings(self.path, stored["poolings"], new.get("poolings"), IncompatibleStoreError)
        _fill_shape(stored, new)
        _delete(self.path, _orphans(self.path, part=self.part))
        shards = _load_shards(self.path, stored)
        return _fill_shape(stored, _shape_of(shards)), shards

    def _write_manifest(self) -> None:
        _write_manifest(self.path, self._tally.stamp(self.manifest))

    def _release(self) -> None:
        """Release the part lock (deleting its file), then the store lock; idempotent."""
        part_fd, self._part_fd = self._part_fd, None
        store_fd, self._store_fd = self._store_fd, None
        try:
            if part_fd is not None:
                _unlock_part(self.path, self.part, part_fd)
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
    def num_buffered(self) -> int:
        return len(self._buffer)

    # Long because a commit is one ordered sequence (validate, write temporaries, fsync, rename the
    # .jsonl, rename the .safetensors = commit point, update the manifest); splitting it would hide the order.
    def add(self, records: Sequence[dict], layer_means: np.ndarray, token_logprobs: Sequence[np.ndarray],
            *, last_prompt: np.ndarray | None = None, last_answer: np.ndarray | None = None) -> None:
        """Buffer a batch of ``b`` records and commit every full shard.

        ``layer_means`` is [b, L+1, d] (finite; must fit float16 when storing float16),
        ``token_logprobs`` is a list of ``b`` 1-D arrays of finite log-probs. ``last_prompt`` and
        ``last_answer`` (both or neither) are the states at the prompt's last token and at the
        answer's last pooled position, shaped and checked like ``layer_means``. A store keeps them
        for all of its records or for none: the first add with records decides (the manifest's
        ``poolings``), a later add that differs (also after a resume) is an InputError naming the
        store and both choices. Records are copied; ``n_tokens`` and ``raw_confidence`` are filled
        in when absent (``n_tokens`` must equal the number of log-probs when present). ValueError
        for a duplicate id (committed, buffered or within the batch), wrong shapes, non-finite
        values or non-JSON-serialisable records.
        """
        if self._closed:
            raise InputError("StoreWriter is closed")
        if (last_prompt is None) != (last_answer is None):
            raise InputError("give both last_prompt and last_answer, or neither")
        given = _MEAN_ONLY if last_prompt is None else POOLINGS
        _check_poolings(self.path, self._poolings, given)
        records = list(records)
        b = len(records)
        ids = [rec.get("id") if isinstance(rec, dict) else None for rec in records]
        L, d = self.manifest.get("num_layers"), self.manifest.get("hidden_size")
        lm = _checked_states("layer_means", layer_means, ids, L, d, self.dtype)
        states = [lm] + [_checked_states(_TENSORS[p], x, ids, lm.shape[1] - 1, lm.shape[2], self.dtype)
                         for p, x in zip(given[1:], (last_prompt, last_answer))]
        if len(token_logprobs) != b:
            raise InputError(f"token_logprobs has {len(token_logprobs)} entries but {b} records were given")

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
            line = _dumps(rec, f"records[{k}] (id {rid!r})")
            prepared.append((rec, line, tuple(x[k] for x in states), lp.astype(np.float32)))

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

    def _flush(self, count: int) -> None:
        """Commit the first ``count`` buffered records as the next shard."""
        from safetensors.numpy import save_file

        batch = self._buffer[:count]
        if not batch:
            return
        lengths = [len(lp) for _, _, _, lp in batch]
        tensors = {
            **{_TENSORS[p]: np.ascontiguousarray(np.stack([rows[j] for _, _, rows, _ in batch]))
               for j, p in enumerate(self._poolings)},
            "token_logprobs": (np.concatenate([lp for _, _, _, lp in batch]).astype(np.float32)
                               if sum(lengths) else np.zeros(0, np.float32)),
            "token_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        }
        st_path = self.path / _shard_name(self.part, self._next_index, "safetensors")
        jl_path = self.path / _shard_name(self.part, self._next_index, "jsonl")
        tmp_jl, tmp_st = tmp_path(jl_path), tmp_path(st_path)
        text = "".join(line + "\n" for _, line, _, _ in batch).encode("utf-8")
        try:
            with open(tmp_jl, "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            save_file(tensors, str(tmp_st), metadata={
                "format": FORMAT, "num_records": str(len(batch)), "collection_key": self._key,
                "records_sha256": hashlib.sha256(text).hexdigest(),
                "tensors_sha256": _array_bytes_sha256(tensors)})
            default_mode(tmp_st)  # safetensors replaces the file with a 0600 one
            with open(tmp_st, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp_jl, jl_path)
            os.replace(tmp_st, st_path)  # commit point
            fsync_dir(self.path)
        finally:
            for tmp in (tmp_jl, tmp_st):
                if tmp.exists():
                    tmp.unlink()
        del self._buffer[:count]
        for rec, _, _, _ in batch:
            self._pending.discard(rec["id"])
        self._tally.add_shard(rec for rec, _, _, _ in batch)
        self._next_index += 1

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

"""What a store is made of: format versions, manifest keys, the shard tensor of each pooling,
storage dtypes, and the collection key that ties a shard to its manifest.

The layout they describe is in :mod:`acute.store`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from ..fileio import json_ready
from ..errors import InputError
from .pooling import POOLINGS  # a store holds "mean" only, or all three

__all__ = ["CHECKPOINT_TENSORS", "COMPAT_KEYS", "DEFAULT_STORE_DTYPE", "FORMAT", "FORMAT_VERSION", "MANIFEST",
           "MEAN_ONLY", "REMEDY", "RUN_KEYS", "SINGLE_WRITER_VERSION", "STATUSES", "STORAGE_DTYPES",
           "TENSORS", "WEIGHTS_KEY", "collection_key", "dumps", "expected_shape", "parse_poolings",
           "storage_dtype"]

FORMAT = "acute-store"
#: Newest store layout this acute reads and writes (1: unpartitioned shards; 2: also part shards).
FORMAT_VERSION = 2
#: Layout version of a store written by a single writer (readable by every acute release).
SINGLE_WRITER_VERSION = 1
#: Version of the shard files themselves (unchanged by layout version 2); hashed into the keys.
SHARD_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Manifest keys that must agree when a writer resumes an existing store.
COMPAT_KEYS = ("model_fingerprint", "task", "dtype", "num_layers", "hidden_size")
#: Manifest key of the weights digest (:func:`acute.models.weights_digest`): compared on resume
#: when both manifests have it (not hashed into shards, so older stores stay readable).
WEIGHTS_KEY = "model_weights"
#: Manifest keys that must also agree on resume, when the stored manifest records them.
RUN_KEYS = ("generation", "task_settings")
#: Manifest keys hashed into each shard's ``collection_key`` (see :func:`collection_key`).
COLLECTION_KEY_FIELDS = ("format_version", "model_fingerprint", "task", "dtype", "generation",
                         "task_settings")
STATUSES = ("collecting", "complete", "interrupted")
#: Shard tensor of each pooling.
TENSORS = {"mean": "layer_means", "last-prompt": "last_prompt", "last-answer": "last_answer"}
MEAN_ONLY = ("mean",)
#: Shard tensors of a store that keeps prefix checkpoints (:mod:`acute.store.checkpoints`).
CHECKPOINT_TENSORS = ("checkpoint_means", "checkpoint_tokens", "checkpoint_offsets")
#: what re-recording an old store adds (named by the errors about a pooling a store lacks)
REMEDY = "re-record it with `acute rerecord STORE --out NEW` to add them"
#: Storage dtypes of the pooled states (the manifest's ``dtype``).
STORAGE_DTYPES = {"float16": np.float16, "float32": np.float32}
#: The storage dtype of a store unless its writer is given another (:data:`STORAGE_DTYPES`).
DEFAULT_STORE_DTYPE = "float16"


def storage_dtype(dtype: Any, name: str = "dtype") -> str:
    """Normalise a storage dtype spec to one of :data:`STORAGE_DTYPES` (``"float16"`` or
    ``"float32"``); InputError naming ``name`` and the allowed values otherwise."""
    try:
        normal = np.dtype(dtype).name
    except TypeError:
        normal = str(dtype)
    if isinstance(dtype, bool) or normal not in STORAGE_DTYPES:
        raise InputError(f"{name} must be one of {', '.join(map(repr, STORAGE_DTYPES))} (the storage dtype of "
                         f"the pooled states), got {dtype!r}")
    return normal


def expected_shape(manifest: dict) -> tuple[int | None, int | None]:
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


def parse_poolings(value: Any, where: str, error: type = InputError) -> tuple[str, ...]:
    """A manifest's ``poolings`` as a tuple, ``("mean",)`` or :data:`POOLINGS`; ``error`` naming
    ``where`` for anything else."""
    if isinstance(value, (list, tuple)) and tuple(value) in (MEAN_ONLY, POOLINGS):
        return tuple(value)
    raise error(f"{where}: 'poolings' must be {list(MEAN_ONLY)} or {list(POOLINGS)}, got {value!r}")


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


def dumps(obj: Any, what: str) -> str:
    """``obj`` as one line of JSON (a record or a manifest); InputError naming ``what`` for a
    non-finite number or a value JSON cannot hold."""
    return json.dumps(json_ready(obj, where=what, nonfinite="error"), allow_nan=False, ensure_ascii=False)

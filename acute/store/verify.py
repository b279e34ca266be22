"""Checking a store without loading its hidden states: :func:`verify_store`."""

from __future__ import annotations

import os
from pathlib import Path

from .commit import ShardDirectory
from .files import SHARD_FILES
from .format import MEAN_ONLY
from .labels import check_labels, read_labels
from .manifest import load_manifest
from .shard import load_shards

__all__ = ["verify_store"]


def verify_store(path: str | os.PathLike) -> dict:
    """Check a store's consistency without loading its hidden states.

    Checks that the manifest is readable; for every committed shard, that the safetensors header
    parses and fits the file (each tensor spans exactly its shape times its dtype's size, inside
    the file), the tensors have the right dtypes/shapes (``layer_means`` matches the manifest's
    ``dtype``, ``num_layers + 1`` and ``hidden_size`` when known; ``last_prompt`` and
    ``last_answer`` are present exactly when the manifest's ``poolings`` has them, and shaped like
    ``layer_means``; the prefix checkpoints' tensors exactly when the manifest names a schedule,
    each record's checkpoints increasing to its length), the ``.jsonl`` line count equals the number of rows, ``token_offsets`` start
    at 0, are non-decreasing and end at the number of log-probs, ``n_tokens`` agrees with the
    offsets, the shard's ``collection_key`` (when it has one) matches the manifest, and its sha256
    (of its records and of its tensors, recorded when it was committed) matches; and that ids are
    unique.
    Orphan ``.jsonl`` and temporary files are listed, not deleted.

    The labels added later (``labels.jsonl``, :mod:`acute.store.labels`) must each name a
    record the store holds without a label of its own.

    Returns ``{"num_records", "num_shards", "shards": [{"file", "num_records", "checksummed"}],
    "orphans": [...], "status", "poolings": [...], "checkpoints", "samples", "num_labels",
    "problems": [...]}`` (``checkpoints``: the schedule or None; ``samples``: the sampling settings
    or None)
    (``num_labels``: the lines of ``labels.jsonl``); ``problems`` names what
    makes the store unfit for use as is without being corrupt: an unfinished collection (status other than
    "complete"), a manifest count that disagrees with the shards, orphans, shards without
    checksums (written by an older acute). Raises ``FileNotFoundError`` (missing directory or
    manifest), :class:`CorruptStoreError` or :class:`IncompatibleStoreError` naming the
    offending file.
    """
    path = Path(path)
    manifest = load_manifest(path)
    shards = load_shards(path, manifest)
    n = sum(s.n for s in shards)
    leftovers = ShardDirectory(path, SHARD_FILES).orphans()
    problems = []
    if manifest.get("status") != "complete":
        problems.append(f"status is {manifest.get('status')!r}: the collection did not finish")
    if manifest.get("num_records") is not None and manifest["num_records"] != n:
        problems.append(f"the manifest counts {manifest['num_records']} records, the shards hold {n}")
    if leftovers:
        problems.append(f"{len(leftovers)} uncommitted file(s), removed by the next resume: {', '.join(leftovers)}")
    labels = read_labels(path)
    check_labels(path, labels, [r for s in shards for r in s.records])
    unchecked = [s.path.name for s in shards if not s.has_checksums]
    if unchecked:
        problems.append(f"{len(unchecked)} shard(s) without checksums (written by an older acute)")
    return {
        "num_records": n,
        "num_shards": len(shards),
        "shards": [{"file": s.path.name, "num_records": s.n, "checksummed": s.has_checksums} for s in shards],
        "orphans": leftovers,
        "status": manifest.get("status"),
        "poolings": list(manifest.get("poolings", MEAN_ONLY)),
        "checkpoints": manifest.get("checkpoints"),
        "samples": (manifest.get("generation") or {}).get("samples"),
        "num_labels": len(labels),
        "problems": problems,
    }

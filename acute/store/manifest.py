"""A store's manifest: loading and checking it, writing it atomically, a writer's normalised copy
of the caller's, the shape fields filled in from shards, and the counts and summary stamped into
it (:class:`Tally`). Which manifests may resume a store is :mod:`acute.store.compat`."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from ..fileio import json_ready, write_text_atomic
from ..errors import CorruptStoreError, InputError, StoreError
from .checkpoints import parse_schedule
from .format import (FORMAT, FORMAT_VERSION, MANIFEST, SINGLE_WRITER_VERSION, dumps, expected_shape,
                     parse_poolings)
from .shard import Shard
from .. import __version__

__all__ = ["Tally", "fill_shape", "load_manifest", "normalised_manifest", "now", "shape_of", "write_manifest"]


def now() -> str:
    """The UTC time to the second, ISO 8601: a manifest's ``created`` and ``updated``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load_manifest(path: Path) -> dict:
    """The manifest of the store directory ``path``, checked. FileNotFoundError for a missing
    directory or manifest; CorruptStoreError naming the file when it is not a JSON object or its
    ``format_version`` or ``poolings`` is malformed; StoreError when this acute is too old for it."""
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
        parse_poolings(manifest["poolings"], str(mpath), CorruptStoreError)
    if manifest.get("checkpoints") is not None:
        try:
            parse_schedule(manifest["checkpoints"], f"{mpath}: checkpoints")
        except InputError as err:
            raise CorruptStoreError(str(err)) from None
    return manifest


def write_manifest(path: Path, manifest: dict) -> None:
    """Replace the store's manifest atomically (indented JSON, finite numbers only)."""
    write_text_atomic(path / MANIFEST, json.dumps(
        json_ready(manifest, where="manifest", nonfinite="error"), indent=2, ensure_ascii=False) + "\n")


def normalised_manifest(manifest: dict, dtype: str) -> dict:
    """A JSON-normalised copy of a caller's manifest with the store's own fields set."""
    new = dict(manifest)
    given = new.get("dtype")
    if given is not None and given != dtype:
        raise InputError(
            f"manifest['dtype']={given!r} but dtype={dtype!r}: the manifest's 'dtype' is the "
            "storage dtype of layer_means; put the model's dtype under 'model_dtype'"
        )

    new["dtype"] = dtype
    if "poolings" in new:
        new["poolings"] = list(parse_poolings(new["poolings"], "manifest"))
    if new.get("checkpoints") is not None:
        new["checkpoints"] = parse_schedule(new["checkpoints"], "manifest['checkpoints']").to_json()
    else:
        new.pop("checkpoints", None)
    new["format"] = FORMAT
    new["format_version"] = SINGLE_WRITER_VERSION
    new.setdefault("acute_version", __version__)
    L, d = expected_shape(new)
    if L is not None:
        new["num_layers"] = L
    if d is not None:
        new["hidden_size"] = d
    return json.loads(dumps(new, "manifest"))  # tuples -> lists, numpy -> python


def fill_shape(manifest: dict, *sources: dict) -> dict:
    """Fill an unknown ``num_layers``/``hidden_size`` from the first source that knows it."""
    for key in ("num_layers", "hidden_size"):
        for source in sources:
            if manifest.get(key) is None and source.get(key) is not None:
                manifest[key] = source[key]
    return manifest


def shape_of(shards: Sequence[Shard]) -> dict:
    """``num_layers``/``hidden_size`` of the first shard's ``layer_means`` ({} without shards)."""
    if not shards:
        return {}
    rows, hidden = shards[0].layer_shape
    return {"num_layers": int(rows) - 1, "hidden_size": int(hidden)}


class Tally:
    """Committed ids and label counts: a writer's ``done_ids`` and the manifest's summary."""

    def __init__(self, shards: Sequence[Shard] = ()):
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
        manifest["updated"] = now()
        manifest["num_records"] = len(self.ids)
        manifest["num_shards"] = self.num_shards
        manifest["summary"] = {
            "num_records": len(self.ids),
            "num_labelled": self.num_labelled,
            "num_correct": self.num_correct,
            "accuracy": self.num_correct / self.num_labelled if self.num_labelled else None,
        }
        return manifest

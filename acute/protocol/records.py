"""The protocol study's per-record results on disk: a manifest and atomically committed shards.

A protocol run writes, next to the store that holds its answers, a folder ``records/``:

* ``manifest.json``: the run's identity (:func:`protocol_key`: model, store, task, template and
  decoding settings) plus what the report needs (model name, fingerprint, settings, templates);
* ``shard-00000.jsonl``, ``shard-00001.jsonl``, ...: complete per-record results (verbalizations,
  teacher-forced log-probs under each context), one JSON object per line, each shard written to
  a temporary file and renamed (:func:`acute.fileio.write_text_atomic`).

A killed run leaves committed shards and at most a temporary file, which the next run removes;
it then continues with the records no shard holds. A run whose identity differs from the
manifest's is refused with the differing key named, so records of two settings never mix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import CorruptStoreError, IncompatibleStoreError
from ..fileio import TMP_SUFFIX, iter_jsonl, json_ready, read_json, write_text_atomic
from ..store.files import parse_shard_name, shard_name

MANIFEST = "manifest.json"
#: manifest keys that must agree before a run may add records (see :func:`protocol_key`)
KEY = "key"


def protocol_key(*, model_identity: Mapping | None, store_key: str, task: str, task_settings: Any,
                 settings: Mapping) -> dict:
    """What decides a record's values: the model (fingerprint and weights digest), the store the
    answers come from (its collection key), the task and its settings, and the study's own
    settings that change a record (template variant and scale, verbalization length, chat)."""
    keep = ("chat", "variant", "scale", "max_new_tokens", "verbal_max_new_tokens", "decoding")
    return json_ready({"model": model_identity, "store": store_key, "task": task,
                       "task_settings": task_settings, **{k: settings.get(k) for k in keep}})


class RecordShards:
    """The ``records/`` folder of a protocol run (see the module docstring).

    ``RecordShards(path, manifest)`` opens or creates it: a new folder gets ``manifest``; an
    existing one must carry the same :data:`KEY` (``IncompatibleStoreError`` names the first
    differing entry). ``done`` maps record id -> record for every committed record, ``records``
    lists them in commit order; :meth:`commit` writes one more shard.
    """

    def __init__(self, path: str | Path, manifest: Mapping | None = None):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if mpath.is_file():
            stored = read_json(mpath, "the manifest of a protocol run", CorruptStoreError)
            if manifest is not None:
                _check_same_key(mpath, stored.get(KEY), manifest[KEY])
            self.manifest = stored
        elif manifest is None:
            raise FileNotFoundError(f"{mpath} does not exist: {self.path} holds no protocol records "
                                    "(run `acute protocol` first)")
        else:
            self.manifest = json_ready(dict(manifest))
            write_text_atomic(mpath, json.dumps(self.manifest, indent=1, ensure_ascii=False))
        for stale in self.path.glob(f".*{TMP_SUFFIX}"):  # a shard a killed run did not finish
            stale.unlink()
        self.records: list[dict] = []
        self._n_shards = 0
        shards = sorted((parsed[1], p) for p in self.path.iterdir()
                        if (parsed := parse_shard_name(p.name)) and parsed[0] is None and parsed[2] == "jsonl")
        for _, shard in shards:  # the store's shard names, read by the one JSONL reader
            self.records += [r for _, r in iter_jsonl(shard, error=CorruptStoreError)]
            self._n_shards += 1
        self.done = {r["id"]: r for r in self.records}

    def commit(self, records: Iterable[Mapping]) -> None:
        """Write ``records`` as the next shard (atomically) and add them to ``done``."""
        records = [json_ready(dict(r), nonfinite="clip") for r in records]
        if not records:
            return
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        write_text_atomic(self.path / shard_name(None, self._n_shards, "jsonl"), text)
        self._n_shards += 1
        self.records += records
        self.done.update((r["id"], r) for r in records)


def _check_same_key(mpath: Path, stored: Any, given: Mapping) -> None:
    stored = stored or {}
    differ = [k for k in sorted(set(stored) | set(given)) if stored.get(k) != given.get(k)]
    if differ:
        detail = "; ".join(f"{k!r}: stored {stored.get(k)!r}, new {given.get(k)!r}" for k in differ)
        raise IncompatibleStoreError(f"{mpath}: cannot resume this protocol run with other settings "
                                     f"({detail}). Use another --out folder")

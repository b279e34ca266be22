"""The protocol study's per-record results on disk: a manifest and atomically committed shards.

A protocol run writes, next to the store that holds its answers, a folder ``records/``:

* ``manifest.json``: the run's identity (:func:`protocol_key`: model, store, task, template and
  decoding settings) plus what the report needs (model name, fingerprint, settings, templates);
* ``shard-00000.jsonl``, ``shard-00001.jsonl``, ...: complete per-record results (verbalizations,
  teacher-forced log-probs under each context), one JSON object per line, each shard committed
  by the store's commit protocol (:class:`acute.store.commit.ShardDirectory`, with one file per
  shard: written to a temporary file, fsync'ed and renamed).

A killed run leaves committed shards and at most a temporary file, which the next run removes;
it then continues with the records no shard holds. A run whose identity differs from the
manifest's is refused with the differing key named (:func:`acute.store.commit.check_identity`),
so records of two settings never mix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import CorruptStoreError
from ..fileio import iter_jsonl, json_ready, read_json, write_text_atomic
from ..store.commit import ShardDirectory, check_identity
from ..store.identity import ModelIdentity

__all__ = ["KEY", "RecordShards", "protocol_key"]

MANIFEST = "manifest.json"
#: the files of one record shard (:class:`~acute.store.commit.ShardDirectory`)
SHARD_FILES = ("jsonl",)
#: manifest keys that must agree before a run may add records (see :func:`protocol_key`)
KEY = "key"


def protocol_key(*, identity: ModelIdentity, store_key: str, task: str, task_settings: Any,
                 settings: Mapping) -> dict:
    """What decides a record's values: the model (``identity``'s fingerprint and weights digest,
    flat as a probe file records them: :meth:`ModelIdentity.to_probe_json`), the store the
    answers come from (its collection key), the task and its settings, and the study's own
    settings that change a record (template variant and scale, verbalization length, chat)."""
    keep = ("chat", "variant", "scale", "max_new_tokens", "verbal_max_new_tokens", "decoding")
    return json_ready({"model": identity.to_probe_json()["fingerprint"], "store": store_key, "task": task,
                       "task_settings": task_settings, **{k: settings.get(k) for k in keep}})


class RecordShards:
    """The ``records/`` folder of a protocol run (see the module docstring).

    ``RecordShards(path, manifest)`` opens or creates it: a new folder gets ``manifest``; an
    existing one must carry the same :data:`KEY` (``IncompatibleStoreError`` names every
    differing entry). ``done`` maps record id -> record for every committed record, ``records``
    lists them in commit order; :meth:`commit` writes one more shard.
    """

    def __init__(self, path: str | Path, manifest: Mapping | None = None):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if mpath.is_file():
            stored = read_json(mpath, "the manifest of a protocol run", CorruptStoreError)
            if manifest is not None:
                check_identity(mpath, stored.get(KEY), manifest[KEY],
                               what="this protocol run with other settings", remedy="use another --out folder")
            self.manifest = stored
        elif manifest is None:
            raise FileNotFoundError(f"{mpath} does not exist: {self.path} holds no protocol records "
                                    "(run `acute protocol` first)")
        else:
            self.manifest = json_ready(dict(manifest))
            write_text_atomic(mpath, json.dumps(self.manifest, indent=1, ensure_ascii=False))
        self._dir = ShardDirectory(self.path, SHARD_FILES)
        self._dir.remove_temporaries()  # a shard a killed run did not finish
        self.records: list[dict] = []
        for part, _, shard in self._dir.committed():
            if part is None:  # read by the one JSONL reader
                self.records += [r for _, r in iter_jsonl(shard, error=CorruptStoreError)]
        self._next_index = self._dir.next_index()
        self.done = {r["id"]: r for r in self.records}

    def commit(self, records: Iterable[Mapping]) -> None:
        """Write ``records`` as the next shard (atomically) and add them to ``done``."""
        records = [json_ready(dict(r), nonfinite="clip") for r in records]
        if not records:
            return
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        self._dir.commit(self._next_index, {"jsonl": text.encode("utf-8")})
        self._next_index += 1
        self.records += records
        self.done.update((r["id"], r) for r in records)


"""One committed shard checked against its manifest (tensors, offsets, records, collection key,
checksums), and every committed shard of a store in store order (:func:`load_shards`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..fileio import iter_jsonl
from ..errors import CorruptStoreError, IncompatibleStoreError
from .commit import ShardDirectory
from .files import SHARD_FILES, parse_shard_name
from .format import CHECKPOINT_TENSORS, MANIFEST, MEAN_ONLY, STORAGE_DTYPES, TENSORS, collection_key, expected_shape
from .pooling import POOLINGS
from .header import read_safetensors_header, read_small, tensors_sha256

__all__ = ["Shard", "load_shards"]


def _check_checksums(st_path: Path, jsonl_path: Path, tensors: dict, metadata: dict) -> None:
    """CorruptStoreError naming the file whose bytes differ from the sha256 its shard recorded at
    commit time (``records_sha256`` of the ``.jsonl``, ``tensors_sha256`` of the tensors).
    Shards written before checksums existed have none and are accepted."""
    want = metadata.get("records_sha256")
    if want is not None and hashlib.sha256(jsonl_path.read_bytes()).hexdigest() != want:
        raise CorruptStoreError(f"{jsonl_path}: the records differ from what was committed (sha256 "
                                f"mismatch); restore the file or move shard {st_path.name} out of the store")
    want = metadata.get("tensors_sha256")
    if want is not None and tensors_sha256(st_path, tensors) != want:
        raise CorruptStoreError(f"{st_path}: the hidden states or log-probs differ from what was committed "
                                "(sha256 mismatch); restore the file or move the shard out of the store")


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
    (when known; never 0), or, given ``like`` (``layer_means``' header entry), not of its dtype and shape."""
    dtype, shape = info["dtype"], info["shape"]
    want_dtype = manifest.get("dtype")
    if want_dtype is not None and dtype != np.dtype(STORAGE_DTYPES.get(want_dtype, dtype)):
        raise CorruptStoreError(f"{st_path}: {name} dtype {dtype.name} != manifest dtype {want_dtype}")
    if dtype.name not in STORAGE_DTYPES:
        raise CorruptStoreError(f"{st_path}: {name} dtype {dtype.name} not supported")
    if len(shape) != 3:
        raise CorruptStoreError(f"{st_path}: {name} must be 3-D, has shape {list(shape)}")
    num_layers, hidden = expected_shape(manifest)
    if num_layers is not None and shape[1] != num_layers + 1:
        raise CorruptStoreError(
            f"{st_path}: {name} has {shape[1]} layers, manifest num_layers+1 = {num_layers + 1}")
    if hidden is not None and shape[2] != hidden:
        raise CorruptStoreError(f"{st_path}: {name} hidden size {shape[2]} != manifest hidden_size {hidden}")
    if shape[1] < 1 or shape[2] < 1:  # spans 0 bytes whatever the other sizes: the writer never makes one
        raise CorruptStoreError(f"{st_path}: {name} has an empty dimension: {list(shape)}")
    if like is not None and (dtype, shape) != (like["dtype"], like["shape"]):
        raise CorruptStoreError(f"{st_path}: {name} is {dtype.name} {list(shape)} but layer_means is "
                                f"{like['dtype'].name} {list(like['shape'])}")


class Shard:
    """One committed, verified shard: records, log-probs (in memory) and memmaps of the pooled
    states (``layer_means``, and ``last_prompt``/``last_answer`` when the store keeps them).

    ``part`` (None for an unpartitioned shard) and ``index`` come from the file name; ``key`` is
    the manifest's :func:`collection_key`, which the shard's own key (if any) must equal.
    """

    def __init__(self, st_path: Path, manifest: dict, key: str, verify: bool = True):
        self.path = st_path
        self.jsonl_path = st_path.with_suffix(".jsonl")
        self.part, self.index, _ = parse_shard_name(st_path.name)
        tensors, _ = read_safetensors_header(st_path)
        metadata = tensors.get("__metadata__") or {}
        _check_collection_key(st_path, metadata, key)
        self.has_checksums = "tensors_sha256" in metadata and "records_sha256" in metadata
        self.poolings = tuple(manifest.get("poolings", MEAN_ONLY))
        extras = [TENSORS[p] for p in self.poolings[1:]]
        for name in ("layer_means", "token_logprobs", "token_offsets", *extras):
            if name not in tensors:
                raise CorruptStoreError(f"{st_path}: tensor {name!r} is missing")
        for name in (TENSORS[p] for p in POOLINGS if p not in self.poolings):
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
        offsets = read_small(st_path, off)  # checked by comparison: int64 differences of crafted offsets wrap
        if offsets[0] != 0 or offsets[-1] != lp["shape"][0] or np.any(offsets[1:] < offsets[:-1]):
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
        self.logprobs = read_small(st_path, lp)
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
        self._infos = {p: tensors[TENSORS[p]] for p in self.poolings}
        self._memmaps: dict[str, np.memmap] = {}
        self.checkpoint_tokens = self.checkpoint_offsets = None
        if manifest.get("checkpoints") is not None:
            self._load_checkpoints(tensors, lm, offsets)
        elif any(name in tensors for name in CHECKPOINT_TENSORS):
            raise CorruptStoreError(f"{st_path}: has checkpoint tensors but the store's {MANIFEST} "
                                    "records no checkpoint schedule")

    def _load_checkpoints(self, tensors: dict, lm: dict, token_offsets: np.ndarray) -> None:
        """Check and read the ragged checkpoint tensors (the means stay on disk)."""
        st_path = self.path
        for name in CHECKPOINT_TENSORS:
            if name not in tensors:
                raise CorruptStoreError(f"{st_path}: tensor {name!r} is missing (the store keeps checkpoints)")
        means, toks, offs = (tensors[name] for name in CHECKPOINT_TENSORS)
        if means["dtype"] != lm["dtype"] or len(means["shape"]) != 3 or means["shape"][1:] != lm["shape"][1:]:
            raise CorruptStoreError(f"{st_path}: checkpoint_means must be {lm['dtype'].name} [C, "
                                    f"{', '.join(map(str, lm['shape'][1:]))}], got {means['dtype'].name} "
                                    f"{list(means['shape'])}")
        for name, info, shape in (("checkpoint_tokens", toks, (means["shape"][0],)),
                                  ("checkpoint_offsets", offs, (self.n + 1,))):
            if info["dtype"] != np.dtype("<i8") or info["shape"] != shape:
                raise CorruptStoreError(f"{st_path}: {name} must be int64 of shape {list(shape)}, got "
                                        f"{info['dtype'].name} {list(info['shape'])}")
        tokens, offsets = read_small(st_path, toks), read_small(st_path, offs)
        if offsets[0] != 0 or offsets[-1] != means["shape"][0] or np.any(offsets[1:] <= offsets[:-1]):
            raise CorruptStoreError(f"{st_path}: checkpoint_offsets must start at 0, increase and end at "
                                    f"len(checkpoint_tokens) = {means['shape'][0]}")
        for i, rec in enumerate(self.records):
            own = tokens[offsets[i]:offsets[i + 1]]
            n_tokens = token_offsets[i + 1] - token_offsets[i]
            if own[-1] != n_tokens or np.any(own[1:] <= own[:-1]) or own[0] < 1:
                raise CorruptStoreError(f"{self.jsonl_path}: record {rec['id']!r} has checkpoints at "
                                        f"{own.tolist()} tokens; they must increase and end at its "
                                        f"{n_tokens} tokens")
        self.checkpoint_tokens, self.checkpoint_offsets = tokens, offsets
        self._infos["checkpoints"] = means

    def states(self, pooling: str = "mean") -> np.ndarray:
        """Read-only memmap [n, L+1, d] of one of this shard's poolings (created on first use);
        ``"checkpoints"``: the [C, L+1, d] checkpoint means of a store that keeps them."""
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


def load_shards(path: Path, manifest: dict, verify: bool = True) -> list[Shard]:
    """Every committed shard, verified (with its checksums unless ``verify`` is False), in store
    order; ids must be unique across the store."""
    key = collection_key(manifest)
    shards = [Shard(p, manifest, key, verify) for _, _, p in ShardDirectory(path, SHARD_FILES).committed()]
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

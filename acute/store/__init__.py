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
    labels.jsonl                     labels added after their records were written (optional;
                                     :mod:`~acute.store.labels`: ``acute serve --record-to``)

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

Commit protocol (one shard at a time, :class:`~acute.store.commit.ShardDirectory`, which the
protocol study's record shards use too): both files are written to hidden temporary names in the
store directory and fsync'ed, then the ``.jsonl`` is renamed into place, then the ``.safetensors``,
then the directory is fsync'ed. The ``.safetensors`` file is the commit marker: a shard exists
once it exists. A ``.jsonl`` without its ``.safetensors`` (crash between the two renames) and
leftover temporary files are orphans; readers ignore them and a resuming writer deletes them (a
part writer only its own part's). A resumed writer numbers its next shard one past its part's
highest committed index.

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
``"interrupted"``), ``num_records``, ``num_shards`` and ``summary`` (a single writer updates
them after every committed shard and at close; part writers leave them to
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

The package keeps one concept per module: :mod:`~acute.store.format` (versions, manifest keys,
tensor names, the collection key), :mod:`~acute.store.files` (shard, lock and temporary file
names), :mod:`~acute.store.commit` (the commit protocol: committed shards, the next index,
orphans, the atomic commit, the identity check on resume), :mod:`~acute.store.header` (the
safetensors header and tensor bytes), :mod:`~acute.store.shard` (one shard checked against its
manifest), :mod:`~acute.store.manifest` (loading, writing and counting),
:mod:`~acute.store.compat` (what a resume must agree on), :mod:`~acute.store.identity` (the
one identity of a store, a probe and a running model, and the one ``diff`` every "same model
and settings?" check uses), :mod:`~acute.store.locks`,
:mod:`~acute.store.writer` (:class:`StoreWriter`, :func:`prepare_store`, :func:`finalize_store`),
:mod:`~acute.store.reader` (:class:`Store`, :func:`open_store`) and :mod:`~acute.store.verify`
(:func:`verify_store`) and :mod:`~acute.store.labels` (labels added later, merged by the
reader). The names below are the package's public API (docs/api.md): reading, writing
(one writer or part writers), verifying and labelling a store, and the identity of the model
behind it (:class:`ModelIdentity`) and how its answers were generated (:class:`GenerationSettings`,
the manifest's ``generation`` block); the format's constants and
the commit protocol are imported from their modules. Its errors live in :mod:`acute.errors`
(:class:`~acute.errors.StoreError`, :class:`~acute.errors.CorruptStoreError`,
:class:`~acute.errors.IncompatibleStoreError`).
"""

from __future__ import annotations

from .format import DEFAULT_STORE_DTYPE, STORAGE_DTYPES
from .generation import GenerationSettings
from .identity import ModelIdentity
from .labels import LabelFile, read_labels
from .pooling import POOLINGS
from .reader import Store, open_store
from .verify import verify_store
from .writer import StoreWriter, finalize_store, prepare_store

__all__ = [
    "DEFAULT_STORE_DTYPE",
    "POOLINGS",
    "STORAGE_DTYPES",
    "GenerationSettings",
    "LabelFile",
    "ModelIdentity",
    "Store",
    "StoreWriter",
    "finalize_store",
    "open_store",
    "prepare_store",
    "read_labels",
    "verify_store",
]

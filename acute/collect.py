"""Collection: run a model over a task's examples, record activations, label, and write a store.

This is the glue between the model (``acute.models``), the recorder (``acute.extraction``),
the task layer (``acute.tasks``) and the store (``acute.store``). It is resumable: records
already committed to ``out_dir`` are skipped, so an interrupted collection (Ctrl-C, a crash)
is continued by running the same command again.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__
from .errors import InputError
from .validation import check_count

__all__ = ["CollectSummary", "build_manifest", "collect", "collection_settings", "example_record",
           "store_identity"]

@dataclass
class CollectSummary:
    """What :func:`collect` did: counts, accuracy and speed.

    ``records`` counts every record in the store after the run (old and new); ``accuracy`` and
    ``mean_raw_confidence`` are over all of them (NaN for an empty store); ``seconds_per_record``
    is this run's wall time divided by the records it generated (NaN when it generated none).
    """

    out_dir: str
    records: int = 0  #: records in the store after this run (old + new)
    new_records: int = 0  #: records generated in this run
    resumed: int = 0  #: examples found already committed and skipped
    skipped_too_long: int = 0  #: prompts longer than the context window (skipped)
    unparseable: int = 0  #: new generations the task could not parse (labelled wrong)
    accuracy: float = math.nan  #: over all records in the store
    mean_raw_confidence: float = math.nan  #: over all records in the store
    seconds_per_record: float = math.nan  #: wall time of this run / new records
    extra: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Human-readable summary lines (what ``acute collect`` prints)."""
        return [
            f"records:             {self.records} ({self.new_records} new, {self.resumed} resumed)",
            f"accuracy:            {self.accuracy:.3f}",
            f"mean raw confidence: {self.mean_raw_confidence:.3f}",
            f"seconds per record:  {self.seconds_per_record:.2f}",
            f"skipped (too long):  {self.skipped_too_long}",
            f"unparseable answers: {self.unparseable}",
            f"store:               {self.out_dir}",
        ]


def build_manifest(model, tokenizer, task, *, model_name: str, max_new_tokens: int,
                   stop_strings: Sequence[str], pool: str, chat: bool | None) -> dict:
    """The store manifest: model (fingerprint and weights digest), tokenizer, task and generation
    settings, acute version.

    ``chat`` is resolved (``None`` -> whether the tokenizer has a chat template) so that the
    manifest says how the prompts were actually built; a scorer reads it back from the probe.
    """
    from .models import model_fingerprint, weights_digest
    from .tasks.base import use_chat

    fp = model_fingerprint(model)
    dtype = getattr(model, "dtype", None)
    return {
        "model": str(model_name),
        "model_fingerprint": fp,
        "model_weights": weights_digest(model),
        "model_dtype": None if dtype is None else str(dtype).replace("torch.", ""),
        "tokenizer": getattr(tokenizer, "name_or_path", None),
        "num_layers": fp["num_layers"],
        "hidden_size": fp["hidden_size"],
        "task": task.name,
        "task_settings": task.settings(),
        "generation": {
            "do_sample": False,
            "max_new_tokens": int(max_new_tokens),
            "stop_strings": list(stop_strings),
            "pool": pool,
            "chat": use_chat(tokenizer, chat),
        },
        "acute_version": __version__,
    }


def store_identity(manifest: dict) -> dict | None:
    """The model identity a probe trained on a store records: the manifest's fingerprint plus its
    weights digest (``weights_sha256``, ``gguf_sha256``) when the store has one (see
    :func:`acute.models.model_identity`)."""
    fp = manifest.get("model_fingerprint")
    if fp is None:
        return None
    weights = manifest.get("model_weights") or {}
    extra = {"weights_sha256": weights.get("sha256"), "gguf_sha256": weights.get("gguf_sha256")}
    return {**fp, **{k: v for k, v in extra.items() if v}}


def collection_settings(manifest: dict) -> dict:
    """``{"task", "task_settings", "generation"}`` of a store manifest: what a probe trained on
    the store should carry in its ``training_summary`` so that :class:`acute.scoring.Scorer`
    generates live answers the same way (prompt, max new tokens, stop strings, pooling)."""
    return {key: manifest.get(key) for key in ("task", "task_settings", "generation")}


def example_record(task, ex, prompt: str, generation) -> dict:
    """The store record of one example and its :class:`~acute.extraction.Generation`.

    Keys: ``id, task, prompt, generation, answer, gold, correct, parse_error, n_tokens,
    raw_confidence, finish_reason, meta``; ``meta`` is the example's meta plus any task-specific
    labelling details (e.g. ROUGE scores).
    """
    details = dict(task.label_details(ex, generation.text))
    answer = details.pop("answer", None)
    correct = bool(details.pop("correct"))
    parse_error = bool(details.pop("parse_error", answer is None))
    return {
        "id": ex.id,
        "task": task.name,
        "prompt": prompt,
        "generation": generation.text,
        "answer": answer,
        "gold": list(ex.answers),
        "correct": correct,
        "parse_error": parse_error,
        "n_tokens": int(len(generation.token_ids)),
        "raw_confidence": float(generation.raw_confidence),
        "finish_reason": generation.finish_reason,
        "meta": {**(ex.meta or {}), **details},
    }


# Long because most of it is the docstring and the resume/commit bookkeeping of one loop; the
# work itself is generate_and_record and StoreWriter.
def collect(model, tokenizer, task, examples, out_dir: str | Path, *, model_name: str,
            batch_size: int = 8, max_new_tokens: int | None = None, dtype: str = "float16",
            pool: str = "decoding", chat: bool | None = None, on_too_long: str = "skip",
            shard_size: int = 256, progress: bool = True, state=None,
            allow_other_weights: bool = False) -> CollectSummary:
    """Generate an answer for every example, label it with ``task`` and write a store.

    ``examples`` come from ``task.load(...)``; each is prompted with ``task.prompt`` (chat
    template when ``chat`` is None and the tokenizer has one), generated greedily with the
    hidden-state recorder (``max_new_tokens`` and stop strings default to the task's), labelled
    with ``task.label_details`` and written to the store ``out_dir`` in shards of
    ``shard_size`` records (``dtype`` is the storage dtype of ``layer_means``).

    Resumes an existing store in ``out_dir``: committed records are skipped, so an interrupted
    collection loses or duplicates nothing (records not yet committed to a shard are generated
    again). Prompts longer than the context window are skipped and counted
    (``on_too_long="skip"``) or raise ``ValueError`` before anything is generated for their chunk
    (``"error"``). Raises ``ValueError`` for an empty ``examples``, and when ``out_dir`` holds a
    store of another model (architecture, or weights: :func:`acute.models.weights_digest`, unless
    ``allow_other_weights``), task or generation settings. Returns a :class:`CollectSummary`.

    Data parallel: ``state`` is an ``accelerate.PartialState`` (anything with ``process_index``,
    ``num_processes``, ``is_main_process`` and ``wait_for_everyone()``); every process calls
    ``collect`` with the same arguments (``accelerate launch -m acute collect ...``). The main
    process prepares the store, each process then takes every ``num_processes``-th of the
    examples not yet committed and commits its
    own part shards (:class:`acute.store.StoreWriter` with ``part``), and the main process
    finalises the manifest once all are done. The store reads as one, in a deterministic order;
    a rerun, with any number of processes, generates only the missing records. The summary's
    ``new_records`` and speed are this process's; ``records`` and accuracy the whole store's.
    """
    import warnings

    from tqdm.auto import tqdm

    from .extraction import generate_and_record
    from .store import StoreWriter, finalize_store, open_store, prepare_store

    examples = list(examples)
    if not examples:
        raise InputError(f"task {task.name!r}: the dataset is empty (no examples to collect)")
    if on_too_long not in ("skip", "error"):
        raise InputError(f"on_too_long must be 'skip' or 'error', got {on_too_long!r}")
    rank, world = (0, 1) if state is None else (int(state.process_index), int(state.num_processes))
    parallel = world > 1
    out_dir = Path(out_dir)
    # every setting is checked before anything is written (a bad one must not leave a manifest
    # that then refuses the corrected command)
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens", default=task.max_new_tokens)
    batch_size = check_count(batch_size, "batch_size")
    shard_size = check_count(shard_size, "shard_size")
    task.prompt(tokenizer, examples[0], chat=chat)  # task options and templates fail here, not mid-run
    stop_strings = tuple(getattr(task, "stop_strings", ()) or ())
    manifest = build_manifest(model, tokenizer, task, model_name=model_name,
                              max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                              pool=pool, chat=chat)
    if parallel:
        if rank == 0:
            prepare_store(out_dir, manifest, dtype=dtype, shard_size=shard_size,
                          allow_other_weights=allow_other_weights)
        state.wait_for_everyone()  # the manifest exists before any part writer opens
    summary = CollectSummary(out_dir=str(out_dir))
    if parallel:
        summary.extra.update(process=rank, num_processes=world)
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=dtype, shard_size=shard_size,
                     part=rank if parallel else None, allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        if parallel:
            state.wait_for_everyone()  # every process has read the same done set before writing
        todo = [ex for ex in examples if ex.id not in done]
        summary.resumed = len(examples) - len(todo)
        mine = todo[rank::world]
        bar = tqdm(total=len(mine), desc=f"collect {Path(task.name).name}"
                   + (f" [{rank + 1}/{world}]" if parallel else ""), unit="rec",
                   disable=not progress, file=sys.stderr, position=rank)
        # Chunks bound memory (~L*d*4 bytes per record) and let the progress bar move; inside a
        # chunk generate_and_record groups prompts that share a prefix (large chunks give it
        # more to group) and sorts them by length. A chunk never runs past the shard being
        # filled, so every shard is committed as soon as its records exist and a kill loses at
        # most the records of one uncommitted shard.
        chunk = max(batch_size * 32, 64)
        i = 0
        while i < len(mine):
            n = min(chunk, writer.shard_size - writer.num_buffered)
            part = mine[i:i + n]
            i += n
            prompts = [task.prompt(tokenizer, ex, chat=chat) for ex in part]
            with warnings.catch_warnings():
                # skipped prompts are counted in the summary instead of one warning each
                warnings.filterwarnings("ignore", message=r"prompts\[\d+\] has \d+ tokens")
                gens = generate_and_record(
                    model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                    batch_size=batch_size, stop_strings=stop_strings, pool=pool,
                    on_too_long=on_too_long, on_batch=bar.update,
                )
            bar.update(sum(g is None for g in gens))  # skipped prompts were in no batch
            records, means, logprobs = [], [], []
            for ex, prompt, gen in zip(part, prompts, gens):
                if gen is None:
                    summary.skipped_too_long += 1
                    continue
                rec = example_record(task, ex, prompt, gen)
                summary.unparseable += rec["parse_error"]
                records.append(rec)
                means.append(gen.layer_means)
                logprobs.append(gen.token_logprobs)
            if records:
                writer.add(records, np.stack(means), logprobs)
            summary.new_records += len(records)
        bar.close()
    if parallel:
        state.wait_for_everyone()  # every part committed
        if rank == 0:
            finalize_store(out_dir)
        state.wait_for_everyone()  # the manifest is final before anyone reads the store
    elapsed = time.perf_counter() - start
    store = open_store(out_dir)
    summary.records = len(store)
    if len(store):
        summary.accuracy = float(np.mean(store.correct))
        summary.mean_raw_confidence = float(np.mean(store.raw_confidence))
    if summary.new_records:
        summary.seconds_per_record = elapsed / summary.new_records
    return summary

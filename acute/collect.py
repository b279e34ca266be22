"""Collection: run a model over a task's examples, record activations, label, and write a store.

This is the glue between the model (``acute.models``), the recorder (``acute.extraction``),
the task layer (``acute.tasks``) and the store (``acute.store``). It is resumable: records
already committed to ``out_dir`` are skipped.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__


@dataclass
class CollectSummary:
    """What ``collect`` did: counts, accuracy and speed of the records written in this run."""

    out_dir: str
    records: int = 0  #: records in the store after this run (old + new)
    new_records: int = 0  #: records generated in this run
    resumed: int = 0  #: records found already committed and skipped
    skipped_too_long: int = 0  #: prompts longer than the context window (skipped)
    unparseable: int = 0  #: generations the task could not parse (labelled wrong)
    accuracy: float = math.nan  #: over all records in the store
    mean_raw_confidence: float = math.nan  #: over all records in the store
    seconds_per_record: float = math.nan  #: wall time of this run / new records
    extra: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
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
    """The store manifest: model, tokenizer, task and generation settings, acute version."""
    from .models import model_fingerprint

    fp = model_fingerprint(model)
    return {
        "model": model_name,
        "model_fingerprint": fp,
        "tokenizer": getattr(tokenizer, "name_or_path", None),
        "num_layers": fp["num_layers"],
        "hidden_size": fp["hidden_size"],
        "task": task.name,
        "task_settings": task.settings(),
        "generation": {
            "do_sample": False,
            "max_new_tokens": max_new_tokens,
            "stop_strings": list(stop_strings),
            "pool": pool,
            "chat": chat,
        },
        "acute_version": __version__,
    }


def collect(model, tokenizer, task, examples, out_dir: str | Path, *, model_name: str,
            batch_size: int = 8, max_new_tokens: int | None = None, dtype: str = "float16",
            pool: str = "decoding", chat: bool | None = None, on_too_long: str = "skip",
            shard_size: int = 256, progress: bool = True) -> CollectSummary:
    """Generate an answer for every example, label it with ``task`` and write a store.

    Resumes an existing store in ``out_dir`` (same model, task and settings): committed
    records are skipped, so an interrupted collection loses or duplicates nothing.
    Returns a :class:`CollectSummary`.
    """
    from tqdm.auto import tqdm

    from .extraction import generate_and_record
    from .store import StoreWriter, open_store

    if not examples:
        raise ValueError(f"task {task.name!r}: the dataset is empty (no examples to collect)")
    max_new_tokens = max_new_tokens or task.max_new_tokens
    stop_strings = tuple(getattr(task, "stop_strings", ()) or ())
    manifest = build_manifest(model, tokenizer, task, model_name=model_name,
                              max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                              pool=pool, chat=chat)
    summary = CollectSummary(out_dir=str(out_dir))
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=dtype, shard_size=shard_size) as writer:
        done = set(writer.done_ids)
        todo = [ex for ex in examples if ex.id not in done]
        summary.resumed = len(examples) - len(todo)
        bar = tqdm(total=len(todo), desc=f"collect {task.name}", unit="rec",
                   disable=not progress, file=sys.stderr)
        chunk = max(batch_size * 4, shard_size // 2)
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            prompts = [task.prompt(tokenizer, ex, chat=chat) for ex in part]
            gens = generate_and_record(
                model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                batch_size=batch_size, stop_strings=stop_strings, pool=pool,
                on_too_long=on_too_long,
            )
            records, means, logprobs = [], [], []
            for ex, prompt, gen in zip(part, prompts, gens):
                if gen is None:
                    summary.skipped_too_long += 1
                    continue
                answer = task.extract(ex, gen.text)
                if answer is None:
                    summary.unparseable += 1
                records.append({
                    "id": ex.id,
                    "task": task.name,
                    "prompt": prompt,
                    "generation": gen.text,
                    "answer": answer,
                    "gold": list(ex.answers),
                    "correct": bool(task.is_correct(ex, gen.text)),
                    "n_tokens": int(len(gen.token_ids)),
                    "raw_confidence": float(gen.raw_confidence),
                    "finish_reason": gen.finish_reason,
                    "meta": ex.meta or {},
                })
                means.append(gen.layer_means)
                logprobs.append(gen.token_logprobs)
            if records:
                writer.add(records, np.stack(means), logprobs)
            summary.new_records += len(records)
            bar.update(len(part))
        bar.close()
    elapsed = time.perf_counter() - start
    store = open_store(out_dir)
    summary.records = len(store)
    if len(store):
        summary.accuracy = float(np.mean(store.correct))
        summary.mean_raw_confidence = float(np.mean(store.raw_confidence))
    if summary.new_records:
        summary.seconds_per_record = elapsed / summary.new_records
    return summary

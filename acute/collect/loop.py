"""The commit loop every collection shares: chunks of records generated (or teacher-forced),
written shard by shard, and the store-wide counts of a run's summary."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..store import open_store
from ..validation import check_count
from .records import CollectSummary

__all__ = ["length_windows"]


def _chunk_size(batch_size: int) -> int:
    """Records the recorder gets at once: enough to group shared prefixes and sort by length."""
    return max(batch_size * 32, 64)


def length_windows(lengths: Sequence[int], window: int) -> list[int]:
    """An order of the indices of ``lengths``: consecutive windows of ``window`` indices, each
    sorted longest first (ties keep input order).

    A collection generates in this order, so that every batch of its recorder holds prompts of
    similar length (little padding) even when shards are smaller than the recorder's chunk.
    Windows keep the input order between them, so the records of any whole windows committed
    are the same set as those of an unsorted run that got as far.
    """
    window = check_count(window, "window")
    order: list[int] = []
    for start in range(0, len(lengths), window):
        order += sorted(range(start, min(start + window, len(lengths))), key=lambda i: -lengths[i])
    return order


def _fill(writer, todo: Sequence, run_chunk, *, batch_size: int, summary: CollectSummary) -> None:
    """Commit the records of ``todo`` chunk by chunk: ``run_chunk(part)`` returns
    ``(records, generations)`` for a chunk (lists; skipped items left out).

    Every pooling is kept (:mod:`acute.store.pooling`), except when resuming a store an older acute
    began with the mean only: it stays mean-only (``acute rerecord`` adds the others later).
    Prefix checkpoints are written when the store keeps them (``writer.checkpoints``).

    Chunks bound memory (~L*d*4 bytes per record) and let a progress bar move; inside a chunk
    the recorder groups prompts that share a prefix (large chunks give it more to group) and
    sorts them by length. A chunk never runs past the shard being filled, so every shard is
    committed as soon as its records exist and a kill loses at most the records of one
    uncommitted shard.
    """
    chunk = _chunk_size(batch_size)
    i = 0
    while i < len(todo):
        n = min(chunk, writer.shard_size - writer.num_buffered)
        part = todo[i:i + n]
        i += n
        records, gens = run_chunk(part)
        if records:
            extra = {}
            if writer.poolings != ("mean",):
                extra = {"last_prompt": np.stack([g.last_prompt for g in gens]),
                         "last_answer": np.stack([g.last_answer for g in gens])}
            if writer.checkpoints is not None:
                extra["checkpoints"] = ([g.checkpoint_tokens for g in gens], [g.checkpoint_means for g in gens])
            writer.add(records, np.stack([g.layer_means for g in gens]), [g.token_logprobs for g in gens],
                       **extra)
        summary.new_records += len(records)


def _summarize(summary: CollectSummary, out_dir: Path, elapsed: float) -> CollectSummary:
    """Fill the store-wide counts of ``summary`` from the store on disk."""

    store = open_store(out_dir)
    summary.records = len(store)
    if len(store):
        summary.accuracy = float(np.mean(store.correct))
        summary.mean_raw_confidence = float(np.mean(store.raw_confidence))
    if summary.new_records:
        summary.seconds_per_record = elapsed / summary.new_records
    return summary

"""Re-recording a store: :func:`rerecord_store` teacher-forces its generations again (another
pooling, or the poolings an older store lacks) without regenerating."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError, ModelMismatchError
from ..store.generation import BATCH_SIZE
from ..fileio import progress_bar
from ..store import POOLINGS, StoreWriter, open_store
from ..store.format import DEFAULT_STORE_DTYPE
from ..store.identity import ModelIdentity
from ..validation import check_count
from .loop import _fill, _summarize
from .records import CollectSummary
from ..engines import transformers_version

__all__ = ["rerecord_store"]

logger = logging.getLogger(__name__)


#: manifest fields a store sets itself (not carried into a re-recorded store)
_STORE_OWN_FIELDS = ("format", "format_version", "dtype", "created", "updated", "shard_size",
                     "status", "num_records", "num_shards", "summary", "model_weights_also")


def _check_same_model(manifest: dict, model, store_dir: Path, allow_other_weights: bool) -> ModelIdentity:
    """The model's identity (:meth:`ModelIdentity.from_model`), after checking its fingerprint
    and weights against ``manifest``'s (:class:`ModelMismatchError` naming both)."""
    stored = ModelIdentity.from_manifest(manifest)
    here = ModelIdentity.from_model(model, engine_version=transformers_version())
    # a store without a fingerprint is checked on the weights only, as before it recorded one
    fields = ("model_fingerprint", "model_weights") if stored.model_fingerprint else ("model_weights",)
    found = stored.diff(here, (str(store_dir), "this model"), fields=fields, optional=("model_weights",),
                        allow_other_weights=allow_other_weights)
    if found:
        hint = (", or allow_other_weights=True (--allow-other-weights)"
                if "model_weights" in found and "model_fingerprint" not in found else "")
        raise ModelMismatchError(f"{store_dir} was collected with another model: {found}; load the "
                                 f"store's model ({manifest.get('model')!r}){hint}")
    return here


def _rerecord_input(record: dict, stop_strings: Sequence[str]) -> tuple[Any, bool]:
    """``(response, append_eos)`` that re-creates a stored generation: its ``token_ids`` when the
    record has them; else its text (plus the first stop string when it stopped at one), with
    the most likely EOS appended when it ended with EOS."""
    ids = record.get("token_ids")
    if ids is not None:
        return np.asarray(ids, dtype=np.int64), False
    text = record.get("generation") or ""
    reason = record.get("finish_reason")
    if reason == "stop" and stop_strings:
        return text + stop_strings[0], False
    return text, reason == "eos"


def _retokenized(record: dict, logprobs: np.ndarray, stored: np.ndarray) -> bool:
    """Whether a record without token ids came back as other tokens than it was generated as
    (another count, or log-probs that differ beyond float rounding)."""
    if record.get("token_ids") is not None:
        return False
    return len(logprobs) != len(stored) or not np.allclose(logprobs, stored, atol=1e-3)


# Long because of its docstring; the pass is record_responses and the loop _fill, shared with
# collect.
def rerecord_store(model, tokenizer, store_dir: str | Path, out_dir: str | Path, *,
                   pool: str | None = None, batch_size: int = BATCH_SIZE, dtype: str | None = None,
                   shard_size: int = 256, progress: bool = True,
                   allow_other_weights: bool = False) -> CollectSummary:
    """Teacher-force the generations of the store ``store_dir`` again and write a new store.

    Every record's prompt (as sent) and generated tokens run through
    :func:`acute.extraction.record_responses` with ``pool`` (default: the store's), so the new
    store holds the same ids, generations and labels with the layer means of that pooling (and
    log-probs and raw confidence recomputed: equal up to float rounding). Records carry their
    ``token_ids`` (stores written by acute >= this release); for older records the text is
    re-tokenized (the first stop string re-appended when the generation stopped at one, the most
    likely EOS when it ended with EOS) and records whose tokens came back different are counted
    in ``summary.retokenized`` (with a warning). The manifest is the source's with
    ``generation.pool`` set, ``"rerecorded_from": {"store", "pool"}`` and every pooling kept
    (``"poolings"``: an older store gains its last-prompt and last-answer states). The model must be the
    store's (fingerprint, and weights unless ``allow_other_weights``): else
    :class:`ModelMismatchError` naming both. Resumable like :func:`collect`.
    """
    from ..extraction import record_responses  # heavy: torch

    store_dir, out_dir = Path(store_dir), Path(out_dir)
    batch_size = check_count(batch_size, "batch_size")
    shard_size = check_count(shard_size, "shard_size")
    if out_dir.resolve() == store_dir.resolve():
        raise InputError(f"--out {out_dir} is the store being re-recorded; choose another folder")
    source = open_store(store_dir)
    old = dict(source.manifest)
    generation = dict(old.get("generation") or {})
    old_pool = generation.get("pool") or "decoding"
    pool = pool or old_pool
    if pool not in ("decoding", "generated"):
        raise InputError(f"pool must be 'decoding' or 'generated', got {pool!r}")
    manifest = {k: v for k, v in old.items() if k not in _STORE_OWN_FIELDS}
    here = _check_same_model(old, model, store_dir, allow_other_weights)
    # the states are this model's under transformers now, whatever ran the source
    manifest.update({key: getattr(here, key) for key in ("model_fingerprint", "model_weights", "engine",
                                                           "engine_version", "model_dtype", "quantization")})
    manifest["generation"] = {**generation, "pool": pool}
    manifest["rerecorded_from"] = {"store": str(store_dir.resolve()), "pool": old_pool}
    manifest["poolings"] = list(POOLINGS)  # re-recording adds what an older store lacks
    manifest.pop("checkpoints", None)  # teacher forcing keeps no prefix checkpoints
    stop_strings = tuple(generation.get("stop_strings") or ())
    records = source.records
    stored_lp = source.token_logprobs
    summary = CollectSummary(out_dir=str(out_dir))
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=dtype or old.get("dtype") or DEFAULT_STORE_DTYPE,
                     shard_size=shard_size, allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        todo = [i for i, rec in enumerate(records) if rec["id"] not in done]
        summary.resumed = len(records) - len(todo)
        bar = progress_bar(len(todo), f"rerecord {store_dir.name}", progress)

        def run_chunk(part):
            inputs = [_rerecord_input(records[i], stop_strings) for i in part]
            gens = record_responses(model, tokenizer, [records[i]["prompt"] for i in part],
                                    [r for r, _ in inputs], append_eos=[a for _, a in inputs],
                                    pool=pool, batch_size=batch_size, stop_strings=stop_strings,
                                    on_batch=bar.update)
            out, kept = [], []
            for i, gen in zip(part, gens):
                if gen is None:
                    summary.skipped_too_long += 1
                    continue
                summary.retokenized += _retokenized(records[i], gen.token_logprobs, stored_lp[i])
                out.append({**records[i], "n_tokens": int(len(gen.token_ids)),
                            "raw_confidence": float(gen.raw_confidence),
                            "token_ids": [int(t) for t in gen.token_ids]})
                kept.append(gen)
            return out, kept

        _fill(writer, todo, run_chunk, batch_size=batch_size, summary=summary)
        bar.close()
    if summary.retokenized:
        logger.warning("%d of %d records of %s have no token ids and their text re-tokenized to other "
                       "tokens: their layer means and raw confidence are those of the re-tokenized "
                       "text", summary.retokenized, summary.new_records, store_dir)
    return _summarize(summary, out_dir, time.perf_counter() - start)

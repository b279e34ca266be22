"""What every collection writes: a store's manifest, its records (one per answer) and what a
collection says it did (:class:`CollectSummary`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..store.generation import GenerationSettings
from ..store.identity import DEFAULT_ENGINE, ModelIdentity
from ..engines import transformers_version
from ..tasks.base import use_chat

__all__ = ["CollectSummary", "build_manifest", "collection_settings", "example_record"]


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
    skipped_empty: int = 0  #: empty responses (collect_responses; skipped)
    retokenized: int = 0  #: rerecord_store: records whose text re-tokenized to other tokens
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
        ] + [f"{name + ':':<21}{value}" for name, value in (
            ("skipped (empty)", self.skipped_empty), ("re-tokenized", self.retokenized)) if value]


def build_manifest(model, tokenizer, task, generation: GenerationSettings, *, engine: str = DEFAULT_ENGINE,
                   engine_version: str | None = None) -> dict:
    """The store manifest: the model's identity (:meth:`ModelIdentity.from_model`: its name,
    fingerprint and weights digest, dtype and quantisation, the tokenizer, the engine that ran it
    and its version, default for transformers :func:`acute.engines.transformers_version`; with
    the pooling and the prompt format the validity domain of a probe trained on the store,
    :mod:`acute.store.identity`), task, the ``generation`` block (``generation``'s JSON,
    :meth:`GenerationSettings.to_json`) and the acute version.

    The chat flag is resolved (``None`` -> whether the tokenizer has a chat template) so that the
    manifest says how the prompts were actually built; a scorer reads it back from the probe.
    ``task`` is None (``task`` and ``task_settings`` None) for responses labelled by their
    ``label`` field, and ``max_new_tokens`` None for responses that were not generated here.
    """
    if engine_version is None and engine == "transformers":
        engine_version = transformers_version()
    identity = ModelIdentity.from_model(model, tokenizer, engine=engine, engine_version=engine_version)
    return {
        **identity.to_json(),
        "task": None if task is None else task.name,
        "task_settings": None if task is None else task.settings(),
        "generation": dataclasses.replace(generation, chat=use_chat(tokenizer, generation.chat)).to_json(),
        "acute_version": __version__,
    }


def collection_settings(manifest: dict) -> dict:
    """``{"task", "task_settings", "generation", "engine"}`` (and ``"responses"`` for a store of
    given responses) of a store manifest: what a probe trained on the store should carry in its
    ``training_summary`` so that :class:`acute.scoring.scorer.Scorer` generates live answers, or
    formats the prompts of given responses, the same way (prompt, max new tokens, stop strings,
    pooling), and its identity (:meth:`acute.store.identity.ModelIdentity.from_probe`) names the engine."""
    keys = ("task", "task_settings", "generation") + (("responses",) if "responses" in manifest else ())
    return {**{key: manifest.get(key) for key in keys}, "engine": ModelIdentity.from_manifest(manifest).engine}


def example_record(task, ex, prompt: str, generation) -> dict:
    """The store record of one example and its :class:`~acute.extraction.Generation`.

    Keys: ``id, task, prompt, generation, answer, gold, correct, parse_error, n_tokens,
    raw_confidence, finish_reason, token_ids, meta``; ``meta`` is the example's meta plus any
    task-specific labelling details (e.g. ROUGE scores); ``token_ids`` are the generated tokens
    (what :func:`rerecord_store` feeds back).
    """
    return _record(ex.id, task.name, prompt, generation, **_task_label(task, ex, generation.text))


def _task_label(task, ex, text: str) -> dict:
    """``answer, gold, correct, parse_error, meta`` of ``text`` as ``task`` labels ``ex``."""
    details = dict(task.label_details(ex, text))
    answer = details.pop("answer", None)
    correct = bool(details.pop("correct"))
    parse_error = bool(details.pop("parse_error", answer is None))
    return {"answer": answer, "gold": list(ex.answers), "correct": correct,
            "parse_error": parse_error, "meta": {**(ex.meta or {}), **details}}


def _record(record_id, task_name: str | None, prompt: str, generation, *, answer, gold: list,
            correct: bool, parse_error: bool, meta: dict, text: str | None = None) -> dict:
    """One store record (see :func:`example_record`); ``text`` replaces ``generation.text``
    (a given response is stored as given)."""
    return {
        "id": record_id,
        "task": task_name,
        "prompt": prompt,
        "generation": generation.text if text is None else text,
        "answer": answer,
        "gold": gold,
        "correct": bool(correct),
        "parse_error": bool(parse_error),
        "n_tokens": int(len(generation.token_ids)),
        "raw_confidence": float(generation.raw_confidence),
        "finish_reason": generation.finish_reason,
        "token_ids": [int(t) for t in generation.token_ids],
        "meta": meta,
    }

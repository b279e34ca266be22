"""What a store can feed an evaluation: the controls whose inputs every record has (metadata,
prompt texts, replies, token log-probs, last-prompt states, sampled answers, enough records for
a stack), the sources the stacks leave out, the metadata fields, and what the sampled answers
cost."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import InputError
from ..estimators.agreement import AGREEMENT_CONTROLS, sampling_cost
from ..estimators.controls import CONTROLS, metadata_matrix
from ..estimators.registry import estimator_sources
from ..estimators.stacks import STACK_MEMBERS, STACKS
from ..estimators.visible import reply_texts, visible_inputs
from ..tasks import TASKS

__all__ = ["STACK_MIN_CLASS", "metadata_fields", "sampling_params", "stack_sources_left_out", "usable_controls",
           "wanted_controls"]


#: the fewest records of each class a store needs for the stack rows (5 outer x 5 inner folds)
STACK_MIN_CLASS = 25


def metadata_fields(store, given: Sequence[str] | None) -> tuple[str, ...]:
    """``given``, else the metadata fields the store's task declares (none when unknown)."""
    if given is not None:
        if isinstance(given, str):
            raise InputError(f"metadata_fields must be a list of field names, got the string {given!r}")
        return tuple(given)
    task = (getattr(store, "manifest", None) or {}).get("task")
    cls = TASKS.get(task) if isinstance(task, str) else None
    return tuple(getattr(cls, "metadata_fields", ())) if cls is not None else ()


def wanted_controls(controls: bool | Sequence[str] | None, names: Sequence[str]) -> list[str]:
    """The controls an evaluation asks for (True: all of :data:`CONTROLS`; False / None: none),
    checked, less those already among ``names``."""
    if controls is True:
        wanted = list(CONTROLS)
    elif controls is False or controls is None:
        wanted = []
    else:
        wanted = list(controls)
        unknown = [c for c in wanted if c not in CONTROLS]
        if unknown:
            raise InputError(f"unknown control(s) {unknown}; choose from {', '.join(CONTROLS)}")
    return [c for c in wanted if c not in names]


def sampling_params(store, usable: Sequence[str]) -> dict:
    """What the sampling controls cost, when they are rows: the samples per record and the tokens
    generated per record relative to the greedy answer alone."""
    if not any(c in AGREEMENT_CONTROLS for c in usable):
        return {}
    settings = (store.manifest.get("generation") or {}).get("samples") or {}
    return {"samples": settings, "sampling_cost_tokens": round(sampling_cost(store.records), 3)}


def stack_sources_left_out(store, test_store, names: Sequence[str],
                           fields: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The sources a stack among ``names`` would read but the store (or the test store) cannot
    feed, and ``{first-level estimator: why}`` for the stacks' first-level controls so dropped (a
    stack fits without them: :class:`acute.estimators.stacks.StackEstimator`). A source another
    row reads is never left out."""
    members = list(dict.fromkeys(m for n in names if n in STACKS for m in STACK_MEMBERS[n] if m in CONTROLS))
    if not members:
        return [], {}
    _, left = usable_controls(store, members, fields)
    if test_store is not None:
        _, more = usable_controls(test_store, [m for m in members if m not in left], fields, "the test store")
        left.update(more)
    kept = {s for n in names if n not in STACKS for s in estimator_sources(n)}
    kept |= {s for n in names if n in STACKS for m in STACK_MEMBERS[n] if m not in left
             for s in estimator_sources(m)}
    out = sorted({s for m in left for s in estimator_sources(m)} - kept)
    return out, left


def usable_controls(store, wanted: Sequence[str], fields: Sequence[str],
                    label: str = "the store") -> tuple[list[str], dict[str, str]]:
    """The controls of ``wanted`` that ``store`` can feed, and ``{control: reason}`` for the
    others: ``platt+meta`` needs the metadata ``fields`` on every record, ``tfidf+platt`` the
    records' prompts, ``answer-text`` their prompts and replies, ``visible`` and
    ``answer-surface`` those and the per-token log-probs
    (:func:`acute.estimators.visible.visible_inputs`), ``question-only`` and
    ``question+confidence`` the last-prompt states, ``consistency`` and ``semantic-entropy``
    sampled answers on every record, the stacks ``acute-all`` and ``visible-all`` 25 records of
    each class (their first-level controls the store cannot feed are dropped from them instead:
    :func:`stack_sources_left_out`)."""
    usable, skipped = [], {}
    for name in wanted:
        why = _why_unusable(store, name, fields, label)
        if why is None:
            usable.append(name)
        else:
            skipped[name] = why
    return usable, skipped


def _why_unusable(store, name: str, fields: Sequence[str], label: str) -> str | None:
    """Why ``store`` cannot feed the control ``name`` (None: it can)."""
    records = getattr(store, "records", None)
    if name == "platt+meta":
        if not fields:
            return f"{label}'s task declares no metadata fields (name them with metadata_fields / --meta-fields)"
        if records is None:
            return f"{label} has no records to read metadata from"
        try:
            metadata_matrix(records, fields, where=label)
        except InputError as e:
            return str(e)
    elif name == "tfidf+platt":
        if records is None:
            return f"{label} has no records to read prompts from"
        bad = next((r.get("id") for r in records if not isinstance(r.get("prompt"), str)), None)
        if bad is not None or not records:
            return f"{label}: record {bad!r} has no prompt text"
    elif name in ("answer-text", "visible", "answer-surface"):
        try:
            if records is None:
                raise InputError(f"{label} has no records to read replies from")
            if name == "answer-text":
                reply_texts(records, where=label)
            else:
                visible_inputs(records, getattr(store, "token_logprobs", None), where=label)
        except InputError as e:
            return str(e)
    elif name in AGREEMENT_CONTROLS:
        bad = None if records is None else next((r.get("id") for r in records if not r.get("samples")), None)
        if records is None or bad is not None or not records:
            return (f"{label} has no sampled answers (record {bad!r}); collect with "
                    "`acute collect --samples K` to have them")
    elif name in STACKS:
        correct = np.asarray(getattr(store, "correct", ()), dtype=np.int64)
        fewest = int(min(correct.sum(), correct.size - correct.sum())) if correct.size else 0
        if fewest < STACK_MIN_CLASS:
            return (f"{label} has {fewest} records of its smaller class; a stack's {STACK_MIN_CLASS // 5} inner "
                    f"folds inside each training fold need at least {STACK_MIN_CLASS}")
    elif name in ("question-only", "question+confidence"):
        if "last-prompt" not in tuple(getattr(store, "poolings", ("mean",))):
            return (f"{label} has no last-prompt states (collected before acute kept them): "
                    "`acute rerecord STORE --out NEW_STORE` adds them")
    return None

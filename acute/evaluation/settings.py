"""How an evaluation scores a store: :class:`EvaluationSettings` (folds, repeats, seed, split,
estimators, bootstrap, controls, grouping), built once where the user's values enter (a
command's flags, a run's config) and passed to :func:`acute.evaluation.evaluate.evaluate_store`;
and the checks of its estimator names and reliability diagrams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..estimators.registry import ESTIMATORS, TABLE_ESTIMATORS, is_estimator
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP

__all__ = ["DEFAULT_FOLDS", "DEFAULT_REPEATS", "EvaluationSettings", "check_reliability", "estimator_names"]


#: the default cross-validation of an evaluation: 5-fold stratified ...
DEFAULT_FOLDS = 5
#: ... repeated twice
DEFAULT_REPEATS = 2


@dataclass(frozen=True)
class EvaluationSettings:
    """What an evaluation fits and how it scores (the meaning of each field:
    :func:`acute.evaluation.evaluate.evaluate_store`).

    ``estimators``: names, ``"all"`` or None (the table's default); ``cv`` folds repeated
    ``repeats`` times, or a single split (``test_fraction`` given, or ``cv`` None / 0);
    ``seed``; ``n_bootstrap`` resamples of every interval; ``n_jobs`` and ``probe_params`` for
    every probe; ``reliability``: ``"all"``, ``"best"`` or a list of names; ``allow_overlap``:
    record ids in both a store and a test store; ``controls``: True (all), False or a list;
    ``group_by``: a metadata field the folds keep apart (None: the task's, ``"id"``: records);
    ``metadata_fields``: the record ``meta`` keys of ``platt+meta`` (None: the task's). The
    values are checked when an evaluation starts, before any fitting."""

    estimators: Sequence[str] | str | None = None
    cv: int | None = DEFAULT_FOLDS
    repeats: int = DEFAULT_REPEATS
    test_fraction: float | None = None
    seed: int = 0
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP
    n_jobs: int | None = None
    probe_params: Mapping[str, Any] | None = None
    reliability: str | Sequence[str] = "all"
    allow_overlap: bool = False
    controls: bool | Sequence[str] = True
    group_by: str | None = None
    metadata_fields: Sequence[str] | None = None


def estimator_names(estimators: Sequence[str] | str | None) -> list[str]:
    """The estimator names of an evaluation: :data:`TABLE_ESTIMATORS` for None, every one of
    :data:`ESTIMATORS` for ``"all"`` (or ``["all"]``), else the names given, checked."""
    if estimators is None:
        return list(TABLE_ESTIMATORS)
    if estimators == "all" or list(estimators) == ["all"]:
        return list(ESTIMATORS)
    names = list(estimators)
    if not names:
        raise InputError("estimators is empty: nothing to evaluate")
    unknown = [n for n in names if not is_estimator(n)]
    if unknown:
        raise InputError(f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)} "
                         "(a probe name may end in @POOLING, e.g. acute-cosine-stacked@last-answer)")
    if len(set(names)) != len(names):
        raise InputError(f"estimators contains duplicates: {names}")
    return names


def check_reliability(reliability: str | Sequence[str], names: Sequence[str]) -> str | list[str]:
    """``"all"``, ``"best"`` or the list of evaluated estimators ``reliability`` names."""
    if isinstance(reliability, str):
        if reliability not in ("all", "best"):
            raise InputError(f"reliability must be 'all', 'best' or a list of estimator names, got {reliability!r}")
        return reliability
    reliability = list(reliability)
    missing = [n for n in reliability if n not in names]
    if missing:
        raise InputError(f"reliability names {missing} are not among the evaluated estimators {names}")
    return reliability

"""The probe names of the estimator registry (:mod:`acute.estimators.registry`): the paper's six
views, their stacked twins, the question-only probes over the prompt's last-token states, a
name's ``@POOLING`` suffix, and the :class:`~acute.estimators.probes.ActivationProbe` a probe name
makes.

A probe name may end in ``@POOLING`` (:mod:`acute.store.pooling`): ``acute-cosine-stacked@last-answer``
reads the hidden state at the answer's last position instead of the mean over the answer,
``acute-pca10@mean+last-answer`` both, concatenated. Without a suffix a probe reads the mean.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError, UnknownEstimatorError
from ..store.pooling import parse_pooling
from .probes import ActivationProbe

__all__ = [
    "ACUTE_VARIANTS",
    "AUTO_CANDIDATES",
    "PLAIN_PROBES",
    "PROBES",
    "PROBE_ESTIMATORS",
    "PROMPT_PROBES",
    "QUESTION_ONLY",
    "QUESTION_ONLY_ESTIMATORS",
    "QUESTION_PROBES",
    "QUESTION_STACKED",
    "STACKED_PROBES",
    "STACKED_VARIANTS",
    "STACK_CV",
    "STACK_OOF",
    "make_probe",
    "split_pooling",
]

#: name -> ActivationProbe keyword arguments (the paper's rows)
PLAIN_PROBES: dict[str, dict[str, Any]] = {
    "acute-early": {"view": "mean", "layer": "early"},
    "acute-mid": {"view": "mean", "layer": "mid"},
    "acute-late": {"view": "mean", "layer": "late"},
    "acute-cosine": {"view": "cosine"},
    "acute-pca10": {"view": "pca10"},
    "acute-pca20": {"view": "pca20"},
}
#: 5 folds for a stacked probe's layer search (early / mid / late) and, with oof="cv", its
#: out-of-fold forests (each sees 80% of the records)
STACK_CV = 5
#: The stacked probes and the question-only control calibrate on their forest's out-of-bag
#: probabilities (one forest per fit); probe_params = {"oof": "cv"} calibrates them on
#: STACK_CV out-of-fold forests instead.
STACK_OOF = "oob"
#: name -> ActivationProbe keyword arguments of the stacked twins ``acute-<view>-stacked``
STACKED_PROBES: dict[str, dict[str, Any]] = {
    f"{name}-stacked": {**kw, "calibration": "stacked", "cv": STACK_CV, "oof": STACK_OOF}
    for name, kw in PLAIN_PROBES.items()
}
#: every probe over the answer's states
PROBES: dict[str, dict[str, Any]] = {**PLAIN_PROBES, **STACKED_PROBES}
#: The question-only control (acute.estimators.controls): a probe over the prompt's last-token states, with no
#: raw confidence (none exists before the answer), Platt-calibrated on its forest's out-of-bag probabilities.
QUESTION_ONLY: dict[str, Any] = {"view": "pca10", "append_confidence": False, "calibration": "platt",
                                 "cv": STACK_CV, "oof": STACK_OOF, "pooling": "last-prompt"}
#: The question-only probe over every view (what ``acute export --with-precheck`` may ship): ``question-only`` is the
#: PCA-10 one (the control of every evaluation table), ``question-only-cosine``, ``question-only-mid``, ... the others.
QUESTION_PROBES: dict[str, dict[str, Any]] = {
    ("question-only" if kw["view"] == "pca10" else f"question-only-{name.removeprefix('acute-')}"):
        {**kw, **{k: v for k, v in QUESTION_ONLY.items() if k != "view"}} for name, kw in PLAIN_PROBES.items()
}
QUESTION_ONLY_ESTIMATORS: tuple[str, ...] = tuple(QUESTION_PROBES)
#: The question+confidence control: the question-only forest (the same trees) stacked with the raw confidence on its
#: out-of-bag probabilities, as acute-pca10-stacked stacks the answer's forest.
QUESTION_STACKED = "question+confidence"
#: name -> ActivationProbe keyword arguments of the probes over the prompt's last-token states
PROMPT_PROBES: dict[str, dict[str, Any]] = {
    **QUESTION_PROBES, QUESTION_STACKED: {**QUESTION_PROBES["question-only"], "calibration": "stacked"}}

ACUTE_VARIANTS: tuple[str, ...] = tuple(PLAIN_PROBES)
STACKED_VARIANTS: tuple[str, ...] = tuple(STACKED_PROBES)
PROBE_ESTIMATORS: tuple[str, ...] = ACUTE_VARIANTS + STACKED_VARIANTS
#: The candidates of ``auto``: the views without a per-fit layer search (each candidate costs
#: cv + 1 forest fits per fit; a searched mean view adds a 3-fold search over a third of the
#: layers to each), plain and stacked.
AUTO_CANDIDATES: tuple[str, ...] = (
    "acute-cosine", "acute-pca10", "acute-cosine-stacked", "acute-pca10-stacked",
)


def split_pooling(name: Any) -> tuple[Any, str | None]:
    """``(base name, pooling spec or None)`` of an estimator name such as
    ``acute-cosine-stacked@last-answer``; only probe names take a pooling."""
    if not isinstance(name, str) or "@" not in name:
        return name, None
    base, spec = name.split("@", 1)
    if base in PROMPT_PROBES:
        raise UnknownEstimatorError(f"{name!r}: {base} reads the last-prompt states by definition; "
                                    "it takes no '@POOLING'")
    if base not in PROBES:
        raise UnknownEstimatorError(f"{name!r}: only the probes read pooled states, so only they take "
                                    f"'@POOLING'; choose from {', '.join(PROBE_ESTIMATORS)}")
    parse_pooling(spec)
    return base, spec


def make_probe(name: str, settings: Mapping[str, Any], *, random_state: int = 0, n_jobs: int | None = None,
               probe_params: Mapping[str, Any] | None = None) -> ActivationProbe:
    """The unfitted probe ``name`` of the keyword arguments ``settings`` its name fixes (view,
    layer, calibration, cv, pooling), with ``random_state``, ``n_jobs`` and ``probe_params``
    (``ActivationProbe`` keywords such as ``n_estimators``; ``None`` values mean "probe
    default"); :class:`InputError` for a ``probe_params`` key the name fixes."""
    kw = dict(settings)
    kw["random_state"] = random_state
    if n_jobs is not None:
        kw["n_jobs"] = n_jobs
    for k, v in (probe_params or {}).items():
        if k in ("view", "layer", "calibration", "pooling") or (k == "append_confidence" and name in PROMPT_PROBES):
            raise InputError(f"probe_params may not set {k!r}: it is fixed by the estimator name {name!r}")
        if v is not None:
            kw[k] = v
    return ActivationProbe(**kw)

"""Every estimator of the evaluation table by name, with one interface, and the default.

``make_estimator(name)`` returns an unfitted scikit-learn estimator with ``fit(X, y)`` and
``predict_proba(X)`` (``[:, 1]`` is P(correct)) over one :class:`acute.estimators.inputs.Inputs`,
whose ``sources`` names what it reads (:func:`estimator_sources`), for every name in
:data:`ESTIMATORS`:

* the six baselines (``raw``, ``hre``, ``nwkr``, ``platt``, ``isotonic``, ``beta``), which read
  the raw confidence only (:class:`acute.estimators.baselines.ConfidenceEstimator`);
* the paper's six ACUTE probes ``acute-early`` ... ``acute-pca20`` (a random forest whose
  P(correct) is the confidence);
* their stacked variants ``acute-<view>-stacked``: the forest's out-of-bag P(correct) (``oof="oob"``) and the
  raw confidence combined by a two-feature logistic regression (``calibration="stacked"``);
* ``auto`` (:class:`acute.estimators.auto.AutoEstimator`): picks among the probes by
  cross-validation on its training records only, then refits the winner on all of them.
* the controls of :data:`acute.estimators.controls.CONTROLS` (they read metadata, texts, the
  visible array, or the prompt's last-token states of ``question-only`` and
  ``question+confidence``, the same forest, platt-calibrated and stacked with the raw confidence;
  the stacks ``acute-all`` and ``visible-all`` of :mod:`acute.estimators.stacks`, whose first
  level is made here with the same ``random_state``, ``n_jobs`` and ``probe_params``, so that its
  refits are the planner's fits of the same rows).

The probe names, their ``@POOLING`` suffix and the probe each makes are
:mod:`acute.estimators.probe_names`' (importable from here too).

:data:`DEFAULT_ESTIMATOR` (``acute-pca10-stacked``, today :data:`STATES_PROBE`) is what
``acute train`` / ``acute export`` fit when no ``--view`` or ``--estimator`` is given; they also
run ``auto``'s cross-validated comparison on the training records and record it
(``refit=DEFAULT_ESTIMATOR``); the evidence behind it is ``benchmarks/default_choice.md``, and the
rule that replaces it ``benchmarks/every_signal.md``. Fits are deterministic given ``random_state``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError, UnknownEstimatorError
from ..store.pooling import DEFAULT_POOLING
from .agreement import AgreementPlatt
from .auto import AutoEstimator  # noqa: F401 (importable here)
from .baselines import BASELINES, ConfidenceEstimator
from .controls import CONTROLS, ConstantEstimator, MetadataPlatt, TextPlatt
from .inputs import PROMPT_REPLY, QUESTION
from .probe_names import (ACUTE_VARIANTS, AUTO_CANDIDATES, PLAIN_PROBES, PROBE_ESTIMATORS,  # noqa: F401
                          PROBES, PROMPT_PROBES, QUESTION_ONLY, QUESTION_ONLY_ESTIMATORS, QUESTION_PROBES,
                          QUESTION_STACKED, STACKED_PROBES, STACKED_VARIANTS, make_probe, split_pooling)
from .stacks import STACK_MEMBERS, StackEstimator
from .visible import SurfacePlatt, VisibleControl

__all__ = [
    "AUTO",
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "STATES_PROBE",
    "TABLE_ESTIMATORS",
    "estimator_group",
    "estimator_pooling",
    "estimator_sources",
    "is_estimator",
    "make_estimator",
    "probe_kwargs",
]

#: The hidden states' own probe: the forest on per-layer PCA-10 of the answer's mean states,
#: stacked with the raw confidence. What the prefix checkpoints and stopping early fit at each
#: checkpoint, and candidate D of the default's rule (benchmarks/every_signal.md).
STATES_PROBE = "acute-pca10-stacked"
#: What ``acute train`` / ``acute export`` ship when no estimator is named: today the states' own
#: probe; benchmarks/every_signal.md's rule chooses among ``acute-all``, ``visible-all`` and it once
#: every evaluation of docs/results has the stacks' rows.
DEFAULT_ESTIMATOR = STATES_PROBE
AUTO = "auto"
ESTIMATORS: tuple[str, ...] = BASELINES + ACUTE_VARIANTS + STACKED_VARIANTS + (AUTO,)
#: What ``acute evaluate`` and ``acute run`` fit when no estimators are named: the six baselines, the
#: paper's two forests without a layer search (PCA-10 and cosine), their stacked twins (the default
#: among them) and ``auto`` (whose candidates these four are, so it costs one refit). The views left
#: out (``--estimators all`` or naming them includes them): early / mid / late search a layer by their
#: own cross-validation, the slowest fits of the table; pca20 costs as much as pca10 again.
TABLE_ESTIMATORS: tuple[str, ...] = BASELINES + (
    "acute-pca10", "acute-cosine", "acute-pca10-stacked", "acute-cosine-stacked", AUTO,
)


def estimator_pooling(name: str) -> str | None:
    """The pooling spec an estimator reads: None for the baselines, ``"mean"`` for ``auto``
    and probes without a suffix."""
    base, spec = split_pooling(name)
    if base in PROMPT_PROBES:
        return QUESTION_ONLY["pooling"]
    if estimator_group(base) in ("baseline", "control"):
        return None
    return spec or DEFAULT_POOLING


def estimator_sources(name: str) -> tuple[str, ...]:
    """The sources (:mod:`acute.estimators.inputs`) the estimator ``name`` reads: its ``sources``."""
    return tuple(make_estimator(name).sources)


def is_estimator(name: Any) -> bool:
    """Whether ``name`` is an estimator :func:`make_estimator` knows (suffixes included)."""
    try:
        estimator_group(name)
    except (UnknownEstimatorError, InputError):
        return False
    return True


def estimator_group(name: str) -> str:
    """``"baseline"``, ``"acute"`` (the paper's plain probes), ``"stacked"``, ``"auto"``,
    ``"control"`` (:mod:`acute.estimators.controls`; a ``@POOLING`` suffix does not change the group)
    or ``"question"`` (the question-only probes of the other views, :data:`QUESTION_ONLY_ESTIMATORS`)."""
    name = split_pooling(name)[0]
    if name in BASELINES:
        return "baseline"
    if name in CONTROLS:
        return "control"
    if name in QUESTION_PROBES:
        return "question"
    if name in PLAIN_PROBES:
        return "acute"
    if name in STACKED_PROBES:
        return "stacked"
    if name == AUTO:
        return "auto"
    raise _unknown(name)


def _unknown(name: Any) -> UnknownEstimatorError:
    return UnknownEstimatorError(f"unknown estimator {name!r}; choose from "
                                 f"{', '.join(ESTIMATORS + CONTROLS + tuple(q for q in QUESTION_ONLY_ESTIMATORS if q not in CONTROLS))} "
                                 "(a probe name may end in @POOLING, e.g. @last-answer)")


def probe_kwargs(name: str) -> dict[str, Any]:
    """The ``ActivationProbe`` keyword arguments (view, layer, calibration, cv and, with a
    ``@POOLING`` suffix, pooling) of a probe name."""
    base, spec = split_pooling(name)
    if base not in PROBES:
        raise _unknown(name)
    return {**PROBES[base], **({"pooling": spec} if spec else {})}


def make_estimator(name: str, *, random_state: int = 0, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None):
    """An unfitted estimator by name (one of :data:`ESTIMATORS` or :data:`CONTROLS`).

    Probes (and ``auto``'s candidates) get ``random_state``, ``n_jobs`` and ``probe_params``
    (``ActivationProbe`` keywords such as ``n_estimators``; ``None`` values mean "probe
    default"; the view, layer and calibration are fixed by the name). Baselines ignore them.
    Raises :class:`UnknownEstimatorError` listing the known names.
    """
    if not isinstance(name, str):
        raise _unknown(name)
    split_pooling(name)  # a bad suffix is named as such
    if name in BASELINES:
        return ConfidenceEstimator(name)
    if name == "constant":
        return ConstantEstimator()
    if name == "platt+meta":
        return MetadataPlatt(random_state=random_state)
    if name in ("tfidf+platt", "answer-text"):
        return TextPlatt(random_state=random_state, source=QUESTION if name == "tfidf+platt" else PROMPT_REPLY)
    if name in ("consistency", "semantic-entropy"):
        return AgreementPlatt(signal=name)
    if name == "visible":
        return VisibleControl(random_state=random_state)
    if name == "answer-surface":
        return SurfacePlatt(random_state=random_state)
    if name in STACK_MEMBERS:
        return StackEstimator([(m, ConfidenceEstimator(m) if m in BASELINES else
                                make_estimator(m, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params))
                               for m in STACK_MEMBERS[name]], random_state=random_state)
    if name == AUTO:
        return AutoEstimator(random_state=random_state, n_jobs=n_jobs,
                             probe_params=dict(probe_params or {}) or None)
    settings = PROMPT_PROBES[name] if name in PROMPT_PROBES else probe_kwargs(name)
    return make_probe(name, settings, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params)

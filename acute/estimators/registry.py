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
* ``auto`` (:class:`AutoEstimator`): picks among the probes by cross-validation on its training
  records only, then refits the winner on all of them.
* the controls of :data:`acute.estimators.controls.CONTROLS` (they read metadata, texts, the
  visible array, or the prompt's last-token states of ``question-only`` and
  ``question+confidence``, the same forest, platt-calibrated and stacked with the raw confidence;
  the stacks ``acute-all`` and ``visible-all`` of :mod:`acute.estimators.stacks`, whose first
  level is made here with the same ``random_state``, ``n_jobs`` and ``probe_params``, so that its
  refits are the planner's fits of the same rows).

A probe name may end in ``@POOLING`` (:mod:`acute.store.pooling`): ``acute-cosine-stacked@last-answer``
reads the hidden state at the answer's last position instead of the mean over the answer,
``acute-pca10@mean+last-answer`` both, concatenated. Without a suffix a probe reads the mean.

:data:`DEFAULT_ESTIMATOR` (``acute-pca10-stacked``) is what ``acute train`` / ``acute export``
fit when no ``--view`` or ``--estimator`` is given; they also run ``auto``'s cross-validated
comparison on the training records and record it (``refit=DEFAULT_ESTIMATOR``). It was chosen
by the rule written down in ``benchmarks/default_choice.md`` before the Qwen2.5-Coder-1.5B pairs
were evaluated: against the earlier default ``acute-cosine-stacked`` its paired auc-euro interval
lay above zero on 6 of the evidence run's 11 pairs and below on none. Why a fixed default rather
than ``auto``'s pick: on the 600 built-in questions letting inner cross-validation choose among
four probes gave +0.004 [-0.002, +0.010] over Platt on SmolLM2 where a fixed stacked probe gave
+0.006: with a few hundred records the choice among close candidates adds more noise than it
gains (``benchmarks/probe_vs_baselines.py``).
Fits are deterministic given ``random_state``.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from .baselines import BASELINES, ConfidenceEstimator
from .calibration import StackedCalibration, calibration_scores
from .folds import Folds, check_splits, out_of_fold, stratified_folds
from .inputs import CONFIDENCE, PROMPT_REPLY, QUESTION, check_inputs, check_no_weights, states_source
from .plan import Piece, Pieces, needs, shared_pieces
from .controls import CONTROLS, ConstantEstimator, MetadataPlatt, TextPlatt
from .stacks import STACK_MEMBERS, StackEstimator
from ..errors import InputError, UnknownEstimatorError
from ..validation import check_correct
from ..metrics.specs import ranked
from ..store.pooling import DEFAULT_POOLING, parse_pooling

__all__ = [
    "QUESTION_ONLY_ESTIMATORS",
    "QUESTION_STACKED",
    "ACUTE_VARIANTS",
    "AUTO_CANDIDATES",
    "AutoEstimator",
    "AUTO",
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "PROBE_ESTIMATORS",
    "STACKED_VARIANTS",
    "TABLE_ESTIMATORS",
    "estimator_group",
    "estimator_pooling",
    "estimator_sources",
    "is_estimator",
    "make_estimator",
    "probe_kwargs",
    "split_pooling",
]




# name -> ActivationProbe keyword arguments (the paper's rows)
_VIEWS: dict[str, dict[str, Any]] = {
    "acute-early": {"view": "mean", "layer": "early"},
    "acute-mid": {"view": "mean", "layer": "mid"},
    "acute-late": {"view": "mean", "layer": "late"},
    "acute-cosine": {"view": "cosine"},
    "acute-pca10": {"view": "pca10"},
    "acute-pca20": {"view": "pca20"},
}
# 5 folds for a stacked probe's layer search (early / mid / late) and, with oof="cv", its out-of-fold
# forests (each sees 80% of the records)
STACK_CV = 5
# The stacked probes and the question-only control calibrate on their forest's out-of-bag
# probabilities: one forest per fit instead of six, tying the 5-fold stacking on every store measured
# (the rule and the numbers: benchmarks/oob_stacking.md); probe_params = {"oof": "cv"} restores it.
STACK_OOF = "oob"
_STACKED: dict[str, dict[str, Any]] = {
    f"{name}-stacked": {**kw, "calibration": "stacked", "cv": STACK_CV, "oof": STACK_OOF}
    for name, kw in _VIEWS.items()
}
_PROBES: dict[str, dict[str, Any]] = {**_VIEWS, **_STACKED}
# The question-only control (acute.estimators.controls): a probe over the prompt's last-token states, with no
# raw confidence (none exists before the answer), Platt-calibrated on its forest's out-of-bag probabilities.
_QUESTION_ONLY: dict[str, Any] = {"view": "pca10", "append_confidence": False, "calibration": "platt",
                                  "cv": STACK_CV, "oof": STACK_OOF, "pooling": "last-prompt"}
# The question-only probe over every view (what ``acute export --with-precheck`` may ship): ``question-only`` is the
# PCA-10 one (the control of every evaluation table), ``question-only-cosine``, ``question-only-mid``, ... the others.
_QUESTION_VIEWS: dict[str, dict[str, Any]] = {
    ("question-only" if kw["view"] == "pca10" else f"question-only-{name.removeprefix('acute-')}"):
        {**kw, **{k: v for k, v in _QUESTION_ONLY.items() if k != "view"}} for name, kw in _VIEWS.items()
}
QUESTION_ONLY_ESTIMATORS: tuple[str, ...] = tuple(_QUESTION_VIEWS)
# The question+confidence control: the question-only forest (the same trees) stacked with the raw confidence on its
# out-of-bag probabilities, as acute-pca10-stacked stacks the answer's forest.
QUESTION_STACKED = "question+confidence"
_QUESTION_STACKED: dict[str, Any] = {**_QUESTION_VIEWS["question-only"], "calibration": "stacked"}
# name -> ActivationProbe keyword arguments of the probes over the prompt's last-token states
_PROMPT_PROBES: dict[str, dict[str, Any]] = {**_QUESTION_VIEWS, QUESTION_STACKED: _QUESTION_STACKED}

ACUTE_VARIANTS: tuple[str, ...] = tuple(_VIEWS)
STACKED_VARIANTS: tuple[str, ...] = tuple(_STACKED)
PROBE_ESTIMATORS: tuple[str, ...] = ACUTE_VARIANTS + STACKED_VARIANTS
DEFAULT_ESTIMATOR = "acute-pca10-stacked"
AUTO = "auto"
ESTIMATORS: tuple[str, ...] = BASELINES + ACUTE_VARIANTS + STACKED_VARIANTS + (AUTO,)
# What ``acute evaluate`` and ``acute run`` fit when no estimators are named: the six baselines, the
# paper's two forests without a layer search (PCA-10 and cosine), their stacked twins (the default
# among them) and ``auto`` (whose candidates these four are, so it costs one refit). The views left
# out (``--estimators all`` or naming them includes them): early / mid / late search a layer by their
# own cross-validation; on a 2,041-record store the full table (5-fold stacking then) had not finished
# its fits after 14 minutes where this one took 7 (benchmarks/evaluate_speed.md), and they did not beat
# the cosine view on the built-in questions (docs/probes); pca20 costs as much as pca10 again.
TABLE_ESTIMATORS: tuple[str, ...] = BASELINES + (
    "acute-pca10", "acute-cosine", "acute-pca10-stacked", "acute-cosine-stacked", AUTO,
)
# The candidates of ``auto``: the views without a per-fit layer search (each candidate costs
# cv + 1 forest fits per fit; a searched mean view adds a 3-fold search over a third of the
# layers to each), plain and stacked.
AUTO_CANDIDATES: tuple[str, ...] = (
    "acute-cosine", "acute-pca10", "acute-cosine-stacked", "acute-pca10-stacked",
)


def split_pooling(name: Any) -> tuple[Any, str | None]:
    """``(base name, pooling spec or None)`` of an estimator name such as
    ``acute-cosine-stacked@last-answer``; only probe names take a pooling."""
    if not isinstance(name, str) or "@" not in name:
        return name, None
    base, spec = name.split("@", 1)
    if base in _PROMPT_PROBES:
        raise UnknownEstimatorError(f"{name!r}: {base} reads the last-prompt states by definition; "
                                    "it takes no '@POOLING'")
    if base not in _PROBES:
        raise UnknownEstimatorError(f"{name!r}: only the probes read pooled states, so only they take "
                                    f"'@POOLING'; choose from {', '.join(PROBE_ESTIMATORS)}")
    parse_pooling(spec)
    return base, spec


def estimator_pooling(name: str) -> str | None:
    """The pooling spec an estimator reads: None for the baselines, ``"mean"`` for ``auto``
    and probes without a suffix."""
    base, spec = split_pooling(name)
    if base in _PROMPT_PROBES:
        return _QUESTION_ONLY["pooling"]
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
    if name in _QUESTION_VIEWS:
        return "question"
    if name in _VIEWS:
        return "acute"
    if name in _STACKED:
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
    if base not in _PROBES:
        raise _unknown(name)
    return {**_PROBES[base], **({"pooling": spec} if spec else {})}


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
        from .agreement import AgreementPlatt

        return AgreementPlatt(signal=name)
    if name == "visible":
        from .visible import VisibleControl

        return VisibleControl(random_state=random_state)
    if name == "answer-surface":
        from .visible import SurfacePlatt

        return SurfacePlatt(random_state=random_state)
    if name in STACK_MEMBERS:
        return StackEstimator([(m, ConfidenceEstimator(m) if m in BASELINES else
                                make_estimator(m, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params))
                               for m in STACK_MEMBERS[name]], random_state=random_state)
    if name == AUTO:
        return AutoEstimator(random_state=random_state, n_jobs=n_jobs,
                             probe_params=dict(probe_params or {}) or None)
    from .probes import ActivationProbe

    kw = dict(_PROMPT_PROBES[name]) if name in _PROMPT_PROBES else probe_kwargs(name)
    kw["random_state"] = random_state
    if n_jobs is not None:
        kw["n_jobs"] = n_jobs
    for k, v in (probe_params or {}).items():
        if k in ("view", "layer", "calibration", "pooling") or (k == "append_confidence" and name in _PROMPT_PROBES):
            raise InputError(f"probe_params may not set {k!r}: it is fixed by the estimator name {name!r}")
        if v is not None:
            kw[k] = v
    return ActivationProbe(**kw)


# --------------------------------------------------------------------------------- auto
def _score(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from .. import metrics

    return {"auc_euro_all": float(metrics.auc_euro(p, y)), "smece": float(metrics.smece(p, y)),
            "auroc": float(metrics.auroc(p, y)) if 0 < y.sum() < y.size else math.nan}


class AutoEstimator(ClassifierMixin, BaseEstimator):
    """Choose a probe by cross-validation on the training records only, then refit it on all.

    For each ``candidates`` probe the records get held-out predictions: the view's forest
    probabilities out of fold over ``StratifiedKFold(cv, shuffle=True, random_state)``, or, when
    the view's stacked probe calibrates out of bag (``oof="oob"``, the default), that probe's
    out-of-bag probabilities (one forest on all records, which the refit then reuses); a stacked
    candidate is scored by cross-fitting its two-feature logistic on them over the folds.
    ``cv`` may also be the folds themselves (scikit-learn's iterable of ``(train_index,
    test_index)`` pairs, e.g. folds that keep each tool set on one side,
    :func:`acute.estimators.folds.stratified_folds` with ``groups``): every held-out prediction
    is then out of fold over them, never out of bag, because a tree leaves records out one by one
    and would score a record with trees that saw its group. The
    baselines (``references``) are scored on the same folds. The probe with the highest
    out-of-fold auc-euro (all) wins (ties: lower smECE) and is refitted on every record; the
    baselines are references only, because what ``auto`` picks must be exportable as a probe.
    With ``refit=NAME`` (one of the candidates) that probe is refitted whatever won: the
    comparison is then recorded but does not choose (how ``acute train`` ships the default).
    ``warning_`` says so when a baseline scored above the refitted probe.

    Fitted: ``best_`` (the best candidate by cross-validation), ``chosen_`` (the refitted one:
    ``best_``, or ``refit``), ``estimator_`` (the refitted probe), ``scores_`` (name ->
    ``auc_euro_all``, ``smece``, ``auroc`` out of fold, every candidate and reference),
    ``ranking_`` (names, best first), ``best_baseline_``, ``warning_`` (str or None),
    ``oof_`` (name -> the out-of-fold P(correct) of every training record, in input order, over
    the folds ``folds_``: what a certified threshold of the refitted probe is calibrated on,
    :mod:`acute.evaluation.certification`), ``classes_``.
    """

    def __init__(self, candidates: Sequence[str] = AUTO_CANDIDATES,
                 references: Sequence[str] = BASELINES, cv: int | Sequence[tuple] = 5,
                 random_state: int | None = 0, n_jobs: int | None = None,
                 probe_params: Mapping[str, Any] | None = None, refit: str = "best"):
        self.candidates = candidates
        self.references = references
        self.cv = cv
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.probe_params = probe_params
        self.refit = refit

    def _make(self, name: str):
        return make_estimator(name, random_state=0 if self.random_state is None else self.random_state,
                              n_jobs=self.n_jobs, probe_params=self.probe_params)

    def _check_names(self) -> tuple[list[str], list[str]]:
        cands, refs = list(self.candidates), list(self.references)
        if not cands:
            raise InputError("AutoEstimator needs at least one candidate probe")
        for n in cands:
            if n not in _PROBES:
                raise UnknownEstimatorError(f"auto candidate {n!r} is not a probe; choose from "
                                            f"{', '.join(PROBE_ESTIMATORS)}")
        for n in refs:
            if n not in BASELINES:
                raise UnknownEstimatorError(f"auto reference {n!r} is not a baseline; choose from "
                                            f"{', '.join(BASELINES)}")
        if self.refit != "best" and self.refit not in cands:
            raise InputError(f"refit must be 'best' or one of the candidates {cands}, got {self.refit!r}")
        return cands, refs

    def needs(self) -> tuple[Piece, ...]:
        """What the comparison and the refit compute (:mod:`acute.estimators.plan`): every
        candidate's pieces (the refit takes the chosen one's) and, where a view's stacked probe
        calibrates out of bag, that probe's pieces (its forest's out-of-bag probabilities are the
        view's held-out ones)."""
        cands, _ = self._check_names()
        views = dict.fromkeys(n.removesuffix("-stacked") for n in cands)
        out = [p for n in cands for p in needs(self._make(n))]
        for view in views:
            stacked = self._make(f"{view}-stacked")
            if self._out_of_bag(stacked):
                out += needs(stacked)
        return tuple(out)

    def _out_of_bag(self, stacked) -> bool:
        """Whether a view's held-out probabilities are its stacked probe's out-of-bag ones: folds
        drawn here (``cv`` a number), seeded, and the stacked probe calibrating out of bag."""
        return isinstance(self.cv, Integral) and self.random_state is not None and stacked.oof == "oob"

    def _folds(self, y: np.ndarray) -> Folds:
        """``cv`` stratified folds drawn with ``random_state``, or the folds ``cv`` gives."""
        from .features import check_cv

        if isinstance(self.cv, bool) or not isinstance(self.cv, (Integral, Sequence)) or isinstance(self.cv, str):
            raise InputError(f"cv must be a number of folds or (train_index, test_index) pairs, got {self.cv!r}")
        if isinstance(self.cv, Integral):
            check_cv(self.cv, y)
            return stratified_folds(y, self.cv, self.random_state)
        return check_splits(self.cv, y.size)

    #: the mean states its candidate probes read, and the raw confidence
    sources = (states_source(DEFAULT_POOLING), CONFIDENCE)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> AutoEstimator:
        """Compare the candidates by cross-validation on the records of ``X`` (labels ``y``) and
        refit the chosen one, taking what it shares with other estimators of these records from
        the pieces ``X`` keeps for ``y`` (:func:`acute.estimators.plan.shared_pieces`): a view's
        held-out forest probabilities
        are its stacked probe's out-of-bag ones when that probe calibrates out of bag (the stacked
        probe is fitted once, on all records, and serves the refit too), else the view's forests
        out of fold over this estimator's folds (those a stacked probe calibrating on the same
        folds fits); the refit is the fitted candidate (the named probe of an evaluation fold).
        The scores and the refit equal a fit alone."""
        check_no_weights(self, sample_weight)
        cands, refs = self._check_names()
        X = check_inputs(X, self)
        y = check_correct(y, len(X), both_classes=True)
        conf = X[CONFIDENCE]
        pieces = shared_pieces(X, y)
        pieces.declare(self.needs())
        folds = self._folds(y)
        oof: dict[str, np.ndarray] = {}
        confidence = X.select((CONFIDENCE,))
        for name in refs:
            def reference(tr, te, name=name):
                return ConfidenceEstimator(name).fit(confidence.take(tr), y[tr]).predict_proba(confidence.take(te))[:, 1]

            oof[name] = out_of_fold(reference, folds, y.size)
        forest_oof: dict[str, np.ndarray] = {}  # plain view -> held-out forest P(correct)
        for name in cands:
            view = name.removesuffix("-stacked")
            if view not in forest_oof:
                forest_oof[view] = self._held_out(pieces, view, folds)
            if name == view:
                oof[name] = forest_oof[view]
            else:  # cross-fitted stacker on the held-out forest probabilities
                def stacker(tr, te, p=forest_oof[view]):
                    fitted = StackedCalibration().fit(calibration_scores("stacked", p[tr], conf[tr]), y[tr])
                    return fitted.predict_proba(calibration_scores("stacked", p[te], conf[te]))[:, 1]

                oof[name] = out_of_fold(stacker, folds, y.size)
        self.scores_ = {name: _score(p, y) for name, p in oof.items()}
        self.oof_, self.folds_ = oof, folds
        # acute.metrics.specs.RANKING: higher auc-euro first, ties (to 1e-9) broken by lower smECE
        self.ranking_ = ranked(list(self.scores_), self.scores_.__getitem__, digits=9)
        self.best_ = next(n for n in self.ranking_ if n in cands)
        self.chosen_ = self.best_ if self.refit == "best" else self.refit
        self.best_baseline_ = next((n for n in self.ranking_ if n in refs), None)
        self.warning_ = None
        if self.best_baseline_ is not None and self.ranking_.index(self.best_baseline_) < self.ranking_.index(self.chosen_):
            b, p = self.scores_[self.best_baseline_], self.scores_[self.chosen_]
            self.warning_ = (f"the baseline {self.best_baseline_} scored above {self.chosen_} in {len(folds)}-fold "
                             f"cross-validation on the training records (auc-euro {b['auc_euro_all']:.4f} vs "
                             f"{p['auc_euro_all']:.4f}); on this data the hidden states add nothing "
                             "measurable over the raw confidence")
        self.estimator_ = pieces.fitted(self._make(self.chosen_))
        self.classes_ = np.array([0, 1])
        return self

    def _held_out(self, pieces: Pieces, view: str, folds) -> np.ndarray:
        """The held-out forest P(correct) of ``view`` on every record: its stacked probe's out-of-bag
        ones (out-of-bag stacking, seeded, folds drawn here, every record out of bag for some
        tree), else its forests out of fold over ``folds``."""
        stacked = self._make(f"{view}-stacked")
        if self._out_of_bag(stacked):
            twin = pieces.fitted(stacked)
            if np.isfinite(twin.oof_proba_).all():
                return np.asarray(twin.oof_proba_, dtype=np.float64)
        return self._make(view).fold_proba(pieces.X, pieces.y, folds, self.random_state)

    def selection(self) -> dict[str, Any]:
        """What was chosen and why, JSON-ready: ``chosen``, ``criterion``, ``cv``, ``scores``
        (every candidate and reference, best first), ``best_baseline``, ``warning``."""
        if not hasattr(self, "best_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("AutoEstimator is not fitted yet; call fit first")
        return {
            "chosen": self.chosen_,
            "best_by_cv": self.best_,
            "refit": self.refit,
            "criterion": "out-of-fold auc-euro (all), ties by smECE",
            "cv": ({"n_splits": int(self.cv), "random_state": self.random_state} if isinstance(self.cv, Integral)
                   else {"n_splits": len(self.folds_), "given": True}),
            "candidates": list(self.candidates),
            "scores": [{"estimator": n, **self.scores_[n]} for n in self.ranking_],
            "best_baseline": self.best_baseline_,
            "warning": self.warning_,
        }

    def predict_proba(self, X: Any) -> np.ndarray:
        if not hasattr(self, "estimator_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("AutoEstimator is not fitted yet; call fit first")
        return self.estimator_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)

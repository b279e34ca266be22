"""``auto``: choose a probe by cross-validation on the training records only, then refit it on all
(:class:`AutoEstimator`)."""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from ..errors import InputError, UnknownEstimatorError
from ..metrics import auc_euro, auroc, smece
from ..metrics.specs import ranked
from ..store.pooling import DEFAULT_POOLING
from ..validation import check_correct
from .baselines import BASELINES, ConfidenceEstimator
from .calibration import StackedCalibration, calibration_scores
from .features import check_cv
from .folds import Folds, check_splits, out_of_fold, stratified_folds
from .inputs import CONFIDENCE, check_inputs, check_no_weights, states_source
from .plan import Piece, Pieces, needs, shared_pieces
from .probe_names import AUTO_CANDIDATES, PROBE_ESTIMATORS, PROBES, make_probe

__all__ = ["AutoEstimator"]


def _score(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The out-of-fold scores ``auto`` ranks by: auc-euro (all), smECE and AUROC (NaN for one class)."""
    return {"auc_euro_all": float(auc_euro(p, y)), "smece": float(smece(p, y)),
            "auroc": float(auroc(p, y)) if 0 < y.sum() < y.size else math.nan}


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
        """The unfitted probe ``name`` (a probe of :data:`PROBES`) with this estimator's settings."""
        return make_probe(name, PROBES[name], random_state=0 if self.random_state is None else self.random_state,
                          n_jobs=self.n_jobs, probe_params=self.probe_params)

    def _check_names(self) -> tuple[list[str], list[str]]:
        cands, refs = list(self.candidates), list(self.references)
        if not cands:
            raise InputError("AutoEstimator needs at least one candidate probe")
        for n in cands:
            if n not in PROBES:
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
            raise NotFittedError("AutoEstimator is not fitted yet; call fit first")
        return self.estimator_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)

"""ACUTE activation probes: a random forest over hidden-state features whose P(correct) is the
confidence, optionally stacked with the raw confidence.

* :class:`ActivationProbe` - scikit-learn classifier over the inputs
  (:class:`acute.estimators.inputs.Inputs`) holding pooled states ``[n, L+1, d]`` (+ the raw
  confidence): ``fit(X, y)``, ``predict_proba(X)[:, 1]`` is P(correct).
* :meth:`ActivationProbe.save` / :func:`load_probe` - a probe directory (``probe.safetensors`` +
  ``probe.json``), read and scored in pure numpy by :class:`ExportedProbe`; the file format
  lives in :mod:`acute.estimators.probe_file`.
* the calibrators fitted on the held-out forest probabilities are those of
  :mod:`acute.estimators.calibration` (:func:`~acute.estimators.calibration.probe_calibrator`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import Any, Hashable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import NotFittedError

from ..fileio import json_ready
from ..errors import InputError
from ..store.identity import ModelIdentity
from ..store.pooling import DEFAULT_POOLING, pooling_blocks
from ..validation import check_correct
from .features import (
    CONFIDENCE_FEATURE,
    NAMED_LAYERS,
    LayerPCA,
    MeanPool,
    append_confidence,
    check_cv,
    make_featurizer,
)
from .calibration import CALIBRATIONS, calibration_scores, calibrator_arrays, probe_calibrator
from .folds import Folds, folds_digest, out_of_fold, stratified_folds
from .inputs import CONFIDENCE, Inputs, check_inputs, states_source
from .plan import Piece, shared_pieces
from .exported_probe import ExportedProbe, forest_arrays, model_block
from .probe_format import FORMAT, view_kind
from .. import __version__

__all__ = ["ActivationProbe", "OOF_SOURCES"]

#: where a calibrated probe's held-out forest probabilities come from (ActivationProbe's ``oof``)
OOF_SOURCES = ("cv", "oob")


def _oob_of(forest) -> np.ndarray | None:
    """A fitted forest's out-of-bag P(correct) per training record, NaN for a record no tree left
    out (scikit-learn gives those rows zeros); None for a forest fitted without ``oob_score``."""
    oob = getattr(forest, "oob_decision_function_", None)
    if oob is None:
        return None
    oob = np.asarray(oob, dtype=np.float64)
    return np.where(oob.sum(axis=1) > 0, oob[:, 1], np.nan)


# ------------------------------------------------------------------------------ probe


class ActivationProbe(ClassifierMixin, BaseEstimator):
    """Random-forest probe over pooled hidden states: ``predict_proba(...)[:, 1]`` = P(correct).

    Parameters
    ----------
    view : {"pca10", "pca20", "cosine", "mean", "early", "mid", "late"}
        Featurizer (see :mod:`acute.estimators.features`): per-layer PCA with 10/20 components, cosine to
        the last layer, one layer's mean-pooled vector (``"mean"`` needs ``layer``), or the
        best layer of a third picked by cross-validation on the training split.
    layer : int, "early", "mid", "late" or None
        Only for ``view="mean"``.
    append_confidence : bool
        Append the raw confidence as one more feature (default True; the inputs then need the
        ``confidence`` source).
    n_estimators : int, default 500
        The reference reproduction used 1000 trees. Averaging 500 trees already leaves a
        Monte-Carlo noise of at most ``0.5 / sqrt(500) ~ 0.02`` on each probability (and much
        less in practice); doubling it would double fit and scoring time on the 2-core
        machines we target for a negligible change, so 500 is the default.
    max_depth : int or None, default 20
        As in the reference reproduction: deep trees, limited so the export stays small.
    max_features : int, float, "sqrt", "log2" or None, default 10
        Features tried per split, as in the reference reproduction. 10 of ~600 PCA features
        keeps each split cheap and decorrelates the trees. An int larger than the number of
        features is clipped to it (small models have few cosine features).
    min_samples_leaf : int, default 1
        Fully grown leaves (the forest average smooths them).
    calibration : None, "platt", "isotonic" or "stacked"
        None (default): the forest's P(correct) is the confidence, no recalibration (as in
        ACUTE). Otherwise a calibration map is fitted on held-out forest probabilities (see
        ``oof``: out-of-fold ones over ``StratifiedKFold(cv)``, the featurizer refitted in each
        fold except that a searched layer is kept fixed to avoid a nested search, or the final
        forest's out-of-bag ones) and applied to the final forest, which is fitted on all
        training records. ``"stacked"`` combines the forest with the
        raw confidence: a logistic regression on ``[logit(forest P(correct)), logit(raw
        confidence)]`` (:class:`~acute.estimators.calibration.StackedCalibration`), so the probe can never do much worse than Platt
        scaling of the raw confidence and adds what the hidden states know beyond it.
    cv : int, default 3
        Folds of the layer search and of the calibration (5 is a good choice for
        ``"stacked"``: the out-of-fold forests then see 80% of the records).
    oof : {"cv", "oob"}, default "cv"
        Where a calibration's held-out forest probabilities come from: ``"cv"`` the ``cv`` fold
        forests above (each refits the featurizer: ``cv + 1`` forests per fit), ``"oob"`` the
        final forest's own out-of-bag probabilities (each record's mean over the trees whose
        bootstrap sample left it out, scikit-learn's ``oob_decision_function_``): one forest per
        fit, the same trees. A record no tree left out (likely only with a few dozen trees) is
        left out of the calibration fit (``oof_proba_`` is NaN there); the featurizer is fitted on
        all records, which for PCA and cosine uses no label, and a searched layer is the one chosen
        on all records, as the ``"cv"`` folds keep it (``benchmarks/oob_stacking.md`` measures
        the difference).
    search_stride : int, default 1
        Search every ``search_stride``-th layer of a third (named layers only).
    search_n_estimators : int, default 100
        Trees of the (cheaper, depth-8) forests of the layer search (named layers only).
    n_jobs : int or None, default -1
        Threads fitting the forests (those of the layer search and of the calibration folds
        too): -1 (default) all cores, 1 one thread (what ``acute run`` stages running side by
        side ask for), None scikit-learn's default (one). The trees of a forest do not depend
        on it (each tree's seed is drawn from ``random_state`` before the threads start) and
        every prediction sums the trees on one thread in their order, so the probabilities are
        bit-for-bit the same whatever ``n_jobs``.
    random_state : int or None, default 0
        Seeds the forests and folds: same data and seed give identical probabilities.
    pooling : str, default "mean"
        Which pooled states the probe reads (:mod:`acute.store.pooling`): ``"mean"``,
        ``"last-prompt"``, ``"last-answer"`` or several joined by ``+``, whose states are
        concatenated along the hidden axis (``states`` is then ``[n, L+1, k*d]``). The
        probe only records it (and splits the cosine view per state); its caller passes those
        states. It is written to the export, so ``Scorer`` feeds the same states.

    Fitted attributes: ``featurizer_``, ``forest_``, ``feature_names_`` (list, e.g.
    ``"L12.pc3"``, ``"cos.L5"``, ``"L20.d17"``, ``"raw_confidence"``), ``classes_``
    (``[0, 1]``), ``layer_`` (int for mean views, else None), ``layers_`` (layer outputs read),
    ``cv_scores_`` (layer search), ``calibrator_`` (the fitted calibrator of
    :mod:`acute.estimators.calibration`, None without a calibration), ``oof_proba_`` (out-of-fold forest
    probabilities, calibration only), ``n_layer_outputs_``, ``hidden_size_``,
    ``training_summary_``.
    """

    def __init__(self, view: str = "pca10", layer: int | str | None = None, append_confidence: bool = True,
                 n_estimators: int = 500, max_depth: int | None = 20, max_features: Any = 10,
                 min_samples_leaf: int = 1, calibration: str | None = None, cv: int = 3, oof: str = "cv",
                 search_stride: int = 1, search_n_estimators: int = 100, n_jobs: int | None = -1, random_state: int | None = 0,
                 pooling: str = "mean"):
        self.view = view
        self.layer = layer
        self.append_confidence = append_confidence
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.calibration = calibration
        self.cv = cv
        self.oof = oof
        self.search_stride = search_stride
        self.search_n_estimators = search_n_estimators
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.pooling = pooling

    # -- internals ---------------------------------------------------------------------

    def _featurizer(self):
        return make_featurizer(
            self.view, self.layer, blocks=pooling_blocks(self.pooling), source=self._source(), cv=self.cv,
            max_features=self.max_features, stride=self.search_stride, n_estimators=self.search_n_estimators,
            n_jobs=self.n_jobs, random_state=self.random_state, with_confidence=self._needs_confidence(),
        )

    def _forest(self, n_features: int, oob: bool = False):
        from sklearn.ensemble import RandomForestClassifier  # heavy: sklearn

        max_features = self.max_features
        if isinstance(max_features, Integral) and not isinstance(max_features, bool):
            max_features = min(int(max_features), n_features)
        # out-of-bag probabilities change nothing in the trees (each tree's bootstrap sample is
        # drawn from its own seed either way), so a forest with them serves a plain probe too
        return RandomForestClassifier(
            n_estimators=self.n_estimators, max_depth=self.max_depth, max_features=max_features,
            min_samples_leaf=self.min_samples_leaf, n_jobs=self.n_jobs, random_state=self.random_state,
            oob_score=oob,
        )

    #: the settings that decide a probe's forest, given its features (a forest piece's key)
    _FOREST_SETTINGS = ("append_confidence", "n_estimators", "max_depth", "max_features", "min_samples_leaf",
                        "random_state")

    def _forest_key(self) -> tuple:
        if self.random_state is None:  # the forests are not reproducible: never shared
            return ("unseeded", object())
        return tuple((k, getattr(self, k)) for k in self._FOREST_SETTINGS)

    def _searched(self) -> bool:
        return view_kind(self.view) == "mean" and (self.view in NAMED_LAYERS or isinstance(self.layer, str))

    def _uses_oob(self) -> bool:
        return self.calibration is not None and self.oof == "oob"

    def _features(self, featurizer, X: Inputs) -> np.ndarray:
        f = featurizer.transform(X)
        return append_confidence(f, X[CONFIDENCE]) if self.append_confidence else f

    def _needs_confidence(self) -> bool:
        return bool(self.append_confidence) or self.calibration == "stacked"

    def _source(self) -> str:
        return states_source(self.pooling)

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources this probe reads: its pooling's states (``states@POOLING``) and, when it
        appends or stacks it, the raw ``confidence``."""
        return (self._source(), CONFIDENCE) if self._needs_confidence() else (self._source(),)

    # -- API ---------------------------------------------------------------------------


    def needs(self) -> tuple[Piece, ...]:
        """What :meth:`fit` computes that another estimator fitted on the same records may share
        (:mod:`acute.estimators.plan`): the final forest on this probe's view (grown with its
        out-of-bag probabilities when the calibration reads them, ``oof="oob"``) and, for an
        out-of-fold calibration (``oof="cv"``), the forests of its ``cv`` folds."""
        out: list[Piece] = [_ForestPiece(self, None, self._uses_oob())]
        if self.calibration is not None and self.oof == "cv":
            out.append(_FoldForestsPiece(self, None, None, self.random_state))
        return tuple(out)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ActivationProbe:
        """Fit the featurizer and forest (and optional calibration) on the training records'
        inputs ``X`` (:class:`acute.estimators.inputs.Inputs` holding :attr:`sources`) and labels
        ``y``.

        Its featurizer, its forest and its calibration's fold forests are taken from the pieces
        that ``X`` keeps for ``y`` (:func:`acute.estimators.plan.shared_pieces`), each computed
        once for every estimator fitted on them: a plain probe and its stacked variant take one
        forest (a searched layer is searched by each probe's own folds, and the forest is one
        when both pick the same layer), and every probe whose calibration folds are another's
        takes those fold forests. Each piece is what this probe would fit alone, so the
        probabilities equal a fit alone (tests/estimators/test_shared_fits.py).

        Raises :class:`InputError` (a ``ValueError``) for a source ``X`` lacks, ``sample_weight``
        (the forests are unweighted), a single class in ``y``, fewer records than ``cv`` folds,
        an unknown view or calibration, or a layer the model does not have.
        """
        if sample_weight is not None:
            raise InputError("ActivationProbe takes no sample_weight: its forests and calibration are unweighted")
        if self.calibration not in CALIBRATIONS:
            raise InputError(f"calibration must be one of {CALIBRATIONS}; got {self.calibration!r}")
        if self.oof not in OOF_SOURCES:
            raise InputError(f"oof must be one of {OOF_SOURCES}; got {self.oof!r}")
        kind = view_kind(self.view)
        blocks = pooling_blocks(self.pooling)
        X = check_inputs(X, self)
        states, conf = X[self._source()], X.get(CONFIDENCE) if self._needs_confidence() else None
        if states.shape[2] % blocks:
            raise InputError(f"pooling {self.pooling!r} concatenates {blocks} states but states has "
                             f"hidden size {states.shape[2]}, not a multiple of {blocks}")
        y = check_correct(y, states.shape[0], both_classes=True)
        searched = self._searched()
        if self.calibration is not None or searched:
            check_cv(self.cv, y)
        elif isinstance(self.cv, Integral) and states.shape[0] < self.cv:
            raise InputError(f"{states.shape[0]} records are fewer than the cv={self.cv} folds")

        pieces = shared_pieces(X, y)
        pieces.declare(self.needs())
        featurizer = pieces.get(_FeaturizerPiece(self, searched and conf is not None))
        forest = pieces.get(_ForestPiece(self, featurizer, self._uses_oob()))
        self.oof_proba_ = None
        if self.calibration is not None and self._uses_oob():
            self.oof_proba_ = _oob_of(forest)
        elif self.calibration is not None:
            # the folds refit the featurizer but keep a searched layer fixed (no nested search)
            template = (MeanPool(int(featurizer.layer_), source=self._source()) if isinstance(featurizer, MeanPool)
                        else clone(featurizer))
            folds = stratified_folds(y, self.cv, self.random_state)
            self.oof_proba_ = pieces.get(_FoldForestsPiece(self, template, folds, self.random_state))
        self.calibrator_ = self._fit_calibration(self.oof_proba_, y, conf)

        self.featurizer_ = featurizer
        self.forest_ = forest
        self.classes_ = np.array([0, 1])
        self.n_layer_outputs_ = int(states.shape[1])
        self.hidden_size_ = int(states.shape[2])
        self.feature_names_ = [str(s) for s in featurizer.get_feature_names_out()]
        if self.append_confidence:
            self.feature_names_.append(CONFIDENCE_FEATURE)
        self.n_features_in_ = len(self.feature_names_)
        if kind == "mean":
            self.layer_ = int(featurizer.layer_)
            self.layers_ = [self.layer_]
            self.cv_scores_ = dict(featurizer.cv_scores_)
        else:
            self.layer_ = None
            self.layers_ = list(range(self.n_layer_outputs_))
            self.cv_scores_ = {}
        self.training_summary_ = {
            "n_records": int(states.shape[0]),
            "n_correct": int(y.sum()),
            "accuracy": float(y.mean()),
            "mean_raw_confidence": None if conf is None else float(conf.mean()),
        }
        return self

    def fold_proba(self, X: Inputs, y: np.ndarray, folds: Folds, seed: int | None) -> np.ndarray:
        """The forest P(correct) of every record of ``X`` (labels ``y``) out of fold over ``folds``
        (drawn with ``seed``; None: shared with no one), this probe's featurizer and forest fitted
        on each training part as :meth:`fit` would fit them there (a searched layer searched
        there), from the pieces ``X`` keeps for ``y`` (what ``auto`` compares its candidates on; a
        stacked probe whose calibration folds these are fitted the same forests)."""
        X = check_inputs(X, self)
        y = check_correct(y, len(X), both_classes=True)
        piece = _FoldForestsPiece(self, self._featurizer(), folds, seed, self._searched() and self._needs_confidence())
        return shared_pieces(X, y).get(piece)

    def _fit_calibration(self, oof: np.ndarray | None, y: np.ndarray, conf: np.ndarray | None):
        """The calibrator fitted on the records with a held-out forest probability (all of them
        but those no tree left out of its bootstrap sample, under ``oof="oob"``); None without a
        calibration."""
        calibrator = probe_calibrator(self.calibration)
        if calibrator is None:
            return None
        held = np.isfinite(oof)
        if held.all():
            return calibrator.fit(calibration_scores(self.calibration, oof, conf), y)
        y_held = y[held]
        if y_held.size == 0 or y_held.min() == y_held.max():
            raise InputError(f"only {int(held.sum())} of {y.size} records are out of bag for some tree of the "
                             f"{self.n_estimators}-tree forest, not both classes: too few trees for oof='oob'")
        return calibrator.fit(calibration_scores(self.calibration, oof[held], None if conf is None else conf[held]),
                              y_held)

    def _check_fitted(self) -> None:
        if not hasattr(self, "forest_"):
            raise NotFittedError("ActivationProbe is not fitted yet; call fit first")

    def predict_proba(self, X: Any, *, calibrated: bool = True) -> np.ndarray:
        """``[n, 2]`` probabilities of the records of ``X`` (:class:`acute.estimators.inputs.Inputs`
        holding :attr:`sources`); column 1 is P(correct) (calibrated when ``calibration``).

        ``calibrated=False`` returns the final forest's own P(correct), before any calibration:
        for a stacked probe that is what the plain probe of the same view and seed predicts."""
        self._check_fitted()
        X = check_inputs(X, self)
        features = self._features(self.featurizer_, X)
        p = self.forest_.predict_proba(features)[:, list(self.forest_.classes_).index(1)]
        if calibrated and self.calibrator_ is not None:
            p = self.calibrator_.predict_proba(calibration_scores(self.calibration, p, X.get(CONFIDENCE)))[:, 1]
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """1 where P(correct) > 0.5, else 0."""
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def export(self, identity: ModelIdentity | None = None, training_summary: dict | None = None,
               metrics: dict | None = None, selection: dict | None = None, certificates: list | None = None,
               confidence_reference: dict | None = None) -> ExportedProbe:
        """The numpy-only :class:`ExportedProbe` of this fitted probe (in memory).

        ``identity`` (:class:`~acute.store.identity.ModelIdentity`: the model's,
        ``ModelIdentity.from_model(model)``, or its training store's,
        ``ModelIdentity.from_manifest(store.manifest)``) is the model ``probe.json`` records and
        a scorer checks; its fingerprint must agree with the fitted input shape (``num_layers +
        1`` layer outputs, ``hidden_size``). None: the probe names no model.

        ``selection`` (e.g. :meth:`acute.estimators.registry.AutoEstimator.selection`) records how this
        probe was chosen: the winner, its cross-validated scores and the runners-up.
        ``certificates``: its certified trust thresholds (:mod:`acute.estimators.certificates`
        entries, from :func:`acute.evaluation.certification.certify_probe`).
        ``confidence_reference``: the distribution of its calibration records' confidences that
        the service's drift signal compares live confidences with
        (:func:`acute.metrics.drift.confidence_reference`)."""
        self._check_fitted()
        d = self.hidden_size_ // pooling_blocks(self.pooling)
        model = model_block(identity, self.n_layer_outputs_, d)
        arrays = forest_arrays(self.forest_)
        arrays["layers"] = np.asarray(self.layers_, dtype=np.int64)
        if isinstance(self.featurizer_, LayerPCA):
            arrays["pca.means"] = np.ascontiguousarray(self.featurizer_.means_)
            arrays["pca.components"] = np.ascontiguousarray(self.featurizer_.components_)
        arrays.update(calibrator_arrays(self.calibration, self.calibrator_))

        summary = dict(self.training_summary_)
        summary.update(training_summary or {})
        manifest = {
            "format": FORMAT,
            "format_version": 3 if self.pooling != DEFAULT_POOLING else 2 if self.calibration == "stacked" else 1,
            "acute_version": __version__,
            "model": model,
            "input": {"n_layer_outputs": self.n_layer_outputs_, "hidden_size": d,
                      **({"pooling": self.pooling} if self.pooling != DEFAULT_POOLING else {})},
            "view": self.view,
            "layer": self.layer,
            "layers": list(self.layers_),
            "layer_search_cv_scores": {str(k): v for k, v in self.cv_scores_.items()},
            "feature_names": list(self.feature_names_),
            "append_confidence": bool(self.append_confidence),
            "classes": [0, 1],
            "forest": {
                "n_estimators": self.n_estimators,
                "max_depth": self.max_depth,
                "max_features": self.max_features,
                "min_samples_leaf": self.min_samples_leaf,
                "random_state": self.random_state,
                "n_trees": len(self.forest_.estimators_),
                "n_nodes": int(arrays["trees.offsets"][-1]),
            },
            "calibration": None if self.calibration is None else {"method": self.calibration, "cv": self.cv,
                                                                  "oof": self.oof},
            "training_summary": summary,
            "metrics": metrics or {},
        }
        if selection is not None:
            manifest["selection"] = selection
        if certificates:
            manifest["certificates"] = list(certificates)
        if confidence_reference is not None:
            manifest["confidence_reference"] = dict(confidence_reference)
        return ExportedProbe(json_ready(manifest, where="manifest"), arrays)

    def save(self, path: str | os.PathLike, identity: ModelIdentity | None = None,
             training_summary: dict | None = None, metrics: dict | None = None,
             selection: dict | None = None, certificates: list | None = None,
             confidence_reference: dict | None = None) -> Path:
        """Write the probe directory ``path`` (``probe.safetensors`` + ``probe.json``) atomically:
        :meth:`export` (``identity``: the model it records) saved. An existing probe directory is
        replaced; any other non-empty directory is refused. Returns the path.
        """
        return self.export(identity, training_summary, metrics, selection,
                           certificates, confidence_reference).save(path)


# ------------------------------------------------------------------------------ pieces
# What a probe's fit computes that another estimator fitted on the same records may share
# (acute.estimators.plan). A key holds what decides the result; the probe whose request computes
# a piece lends it its code (its forest settings, its n_jobs, which change no number).


def _features_key(featurizer) -> tuple:
    """What a featurizer's features are: a fitted or fixed layer, the PCA or cosine view, or a layer
    still to be searched (with every setting of its search; an unseeded search is never shared)."""
    if isinstance(featurizer, MeanPool):
        if hasattr(featurizer, "layer_"):
            return ("layer", featurizer.source, int(featurizer.layer_))
        if not isinstance(featurizer.layer, str):
            return ("layer", featurizer.source, featurizer.layer)
        params = featurizer.get_params()
        params.pop("n_jobs")
        return ("search", object()) if params["random_state"] is None else ("search",) + tuple(sorted(params.items()))
    return (type(featurizer).__name__,) + tuple(sorted(featurizer.get_params().items()))


@dataclass(frozen=True, eq=False)
class _FeaturizerPiece(Piece):
    """A probe's featurizer fitted on all records (a searched layer searched by the probe's folds,
    reading the confidence when ``with_confidence``)."""

    probe: ActivationProbe
    with_confidence: bool

    def key(self) -> Hashable:
        return ("featurizer", _features_key(self.probe._featurizer()), self.with_confidence)

    def compute(self, X, y):
        return self.probe._featurizer().fit(X, y)


@dataclass(frozen=True, eq=False)
class _ForestPiece(Piece):
    """A probe's final forest: its features (of ``featurizer``, fitted; None in a declaration) and
    forest settings, grown with out-of-bag probabilities when ``oob`` or when any declaration of
    the same view asks for them."""

    probe: ActivationProbe
    featurizer: Any
    oob: bool

    def key(self) -> Hashable:
        return ("forest", _features_key(self.featurizer), self.probe._forest_key())

    def family(self) -> Hashable:
        # the view as the probe names it: a plain and a stacked probe of a searched third meet
        # here before their searches pick a layer
        return ("forest", self.probe.pooling, self.probe.view, self.probe.layer, self.probe._forest_key())

    def merge(self, declared: Piece) -> Piece:
        return _ForestPiece(self.probe, self.featurizer, self.oob or bool(getattr(declared, "oob", False)))

    def satisfied_by(self, forest) -> bool:
        return not self.oob or _oob_of(forest) is not None

    def compute(self, X, y):
        features = self.probe._features(self.featurizer, X)
        with warnings.catch_warnings():  # records in every bootstrap sample: handled by _oob_of
            warnings.filterwarnings("ignore", message="Some inputs do not have OOB scores")
            forest = self.probe._forest(features.shape[1], oob=self.oob).fit(features, y)
        forest.set_params(n_jobs=1)  # sequential prediction: a fixed summation order
        return forest


@dataclass(frozen=True, eq=False)
class _FoldForestsPiece(Piece):
    """Out-of-fold forest P(correct) over ``folds`` (``StratifiedKFold`` folds drawn with ``seed``,
    :func:`acute.estimators.folds.stratified_folds`, or folds ``auto`` was given; shared by
    content): in each fold a copy of the unfitted
    featurizer ``template`` and a forest of the probe's settings fitted on the training part
    (``template`` and ``folds`` are None in a declaration). Not ``CalibratedClassifierCV(ensemble=False)``:
    the folds refit the featurizer on the states while the raw confidence is another source,
    which the stacked calibration reads too and scikit-learn's calibrators cannot take."""

    probe: ActivationProbe
    template: Any
    folds: Folds | None
    seed: int | None
    with_confidence: bool = False  # a searched template's per-fold search reads the confidence

    def key(self) -> Hashable:
        # by content: folds drawn with a seed and folds given (auto's grouped ones) share only if equal
        folds = ("folds", folds_digest(self.folds)) if self.seed is not None else ("unseeded", object())
        return ("fold forests", _features_key(self.template), self.with_confidence, self.probe._forest_key(), folds)

    def family(self) -> Hashable:
        return ("fold forests", self.probe.pooling, self.probe.view, self.probe.layer, self.probe._forest_key(),
                self.seed)

    def compute(self, X, y):
        probe = self.probe
        own = X.select(probe.sources)  # a fold's rows of this probe's sources only

        def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
            f = clone(self.template)
            if isinstance(f, LayerPCA) and f.n_components > len(train):
                f.set_params(n_components=len(train))
            x_tr, x_te = own.take(train), own.take(test)
            f.fit(x_tr, y[train])
            features = probe._features(f, x_tr)
            forest = probe._forest(features.shape[1]).fit(features, y[train])
            forest.set_params(n_jobs=1)  # sequential prediction: a fixed summation order
            return forest.predict_proba(probe._features(f, x_te))[:, 1]

        return out_of_fold(fit_predict, self.folds, y.size)

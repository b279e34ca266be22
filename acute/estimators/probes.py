"""ACUTE activation probes: a random forest over hidden-state features whose P(correct) is the
confidence, optionally stacked with the raw confidence.

* :class:`ActivationProbe` - scikit-learn classifier over ``states`` ``[n, L+1, d]``
  (+ the raw confidence). ``predict_proba(...)[:, 1]`` is P(correct).
* :meth:`ActivationProbe.save` / :func:`load_probe` - a probe directory (``probe.safetensors`` +
  ``probe.json``), read and scored in pure numpy by :class:`ExportedProbe`; the file format
  lives in :mod:`acute.estimators.probe_file`.
* the calibration maps fitted on the out-of-fold forest probabilities are those of
  :mod:`acute.estimators.calibration` (:func:`~acute.estimators.calibration.fit_calibration`).
"""

from __future__ import annotations

import os
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from ..fileio import json_ready
from ..errors import InputError, ModelMismatchError, ProbeFormatError
from ..store.pooling import DEFAULT_POOLING, pooling_blocks
from .features import (
    CONFIDENCE_FEATURE,
    NAMED_LAYERS,
    LayerPCA,
    MeanPool,
    append_confidence,
    check_confidence,
    check_correct,
    check_cv,
    check_states,
    make_featurizer,
)
from .calibration import CALIBRATIONS, apply_calibration, calibration_arrays, fit_calibration, fit_stacker, stack_features
from .probe_file import (
    ARRAYS_FILE,
    FORMAT,
    MANIFEST_FILE,
    ExportedProbe,
    check_fingerprint,
    view_kind,
    forest_arrays,
    forest_proba,
    load_probe,
)

__all__ = [
    "ARRAYS_FILE",
    "MANIFEST_FILE",
    "ActivationProbe",
    "ExportedProbe",
    "ModelMismatchError",
    "ProbeFormatError",
    "apply_calibration",
    "fit_stacker",
    "stack_features",
    "forest_arrays",
    "forest_proba",
    "load_probe",
    "OOF_SOURCES",
]

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
        Append the raw confidence as one more feature (default True; ``fit``/``predict_proba``
        then need ``confidence``).
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
        confidence)]`` (:func:`fit_stacker`), so the probe can never do much worse than Platt
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
    ``cv_scores_`` (layer search), ``calibration_params_``, ``oof_proba_`` (out-of-fold forest
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
            self.view, self.layer, blocks=pooling_blocks(self.pooling), cv=self.cv, max_features=self.max_features,
            stride=self.search_stride, n_estimators=self.search_n_estimators, n_jobs=self.n_jobs, random_state=self.random_state,
        )

    def _forest(self, n_features: int):
        from sklearn.ensemble import RandomForestClassifier

        max_features = self.max_features
        if isinstance(max_features, Integral) and not isinstance(max_features, bool):
            max_features = min(int(max_features), n_features)
        # out-of-bag probabilities change nothing in the trees (each tree's bootstrap sample is
        # drawn from its own seed either way), so a forest with them serves a plain twin too
        return RandomForestClassifier(
            n_estimators=self.n_estimators, max_depth=self.max_depth, max_features=max_features,
            min_samples_leaf=self.min_samples_leaf, n_jobs=self.n_jobs, random_state=self.random_state,
            oob_score=self._uses_oob(),
        )

    def _uses_oob(self) -> bool:
        return self.calibration is not None and self.oof == "oob"

    def _features(self, featurizer, states: np.ndarray, confidence: np.ndarray | None) -> np.ndarray:
        f = featurizer.transform(states)
        return append_confidence(f, confidence) if self.append_confidence else f

    def _needs_confidence(self) -> bool:
        return bool(self.append_confidence) or self.calibration == "stacked"

    def _inputs(self, states: Any, confidence: Any) -> tuple[np.ndarray, np.ndarray | None]:
        X = check_states(states)
        conf = check_confidence(confidence, X.shape[0]) if self._needs_confidence() else None
        return X, conf

    # -- API ---------------------------------------------------------------------------

    def fit(self, states: Any, correct: Any, confidence: Any = None, *,
            forest_from: ActivationProbe | None = None, oof_proba: Any = None) -> ActivationProbe:
        """Fit the featurizer and forest (and optional calibration) on the training split.

        Two keywords let a caller that has already fitted the same forests hand them over
        (the probabilities equal a fit without them; :func:`acute.evaluation.crossval.fit_predict`
        passes them between the estimators of one fold):

        * ``forest_from``: a probe fitted on these same records whose final forest this probe's
          would be, tree for tree (e.g. this plain probe's stacked variant: same view, layer,
          pooling, ``append_confidence``, forest settings and ``random_state``; its calibration,
          ``cv`` and ``n_jobs`` may differ). Its featurizer and forest are taken; a searched
          layer (early/mid/late) is still searched by this probe's own folds, and the forest is
          taken only when the search picks the layer ``forest_from`` reads.
        * ``oof_proba``: out-of-fold forest P(correct) of these records over this probe's
          calibration folds (``StratifiedKFold(cv, shuffle=True, random_state)``, each fold's
          featurizer and forest fitted on its training part, e.g. by a plain probe of the same
          view): used instead of fitting the ``cv`` fold forests (calibration only; not with a
          searched layer, whose folds keep the layer chosen on all records).

        Raises ``ValueError`` for NaN/inf inputs (naming the argument and first bad row), a
        single class in ``correct``, fewer records than ``cv`` folds, an unknown view or
        calibration, a layer the model does not have, or a ``forest_from`` / ``oof_proba``
        that cannot be this probe's.
        """
        if self.calibration not in CALIBRATIONS:
            raise InputError(f"calibration must be one of {CALIBRATIONS}; got {self.calibration!r}")
        if self.oof not in OOF_SOURCES:
            raise InputError(f"oof must be one of {OOF_SOURCES}; got {self.oof!r}")
        kind = view_kind(self.view)
        blocks = pooling_blocks(self.pooling)
        X, conf = self._inputs(states, confidence)
        if X.shape[2] % blocks:
            raise InputError(f"pooling {self.pooling!r} concatenates {blocks} states but states has "
                             f"hidden size {X.shape[2]}, not a multiple of {blocks}")
        y = check_correct(correct, X.shape[0], both_classes=True)
        searched = kind == "mean" and (self.view in NAMED_LAYERS or isinstance(self.layer, str))
        if self.calibration is not None or searched:
            check_cv(self.cv, y)
        elif isinstance(self.cv, Integral) and X.shape[0] < self.cv:
            raise InputError(f"{X.shape[0]} records are fewer than the cv={self.cv} folds")
        if forest_from is not None:
            self._check_twin(forest_from, X, y)

        forest = None
        # a twin's forest without out-of-bag probabilities cannot feed an out-of-bag calibration
        twin_ok = forest_from is not None and (not self._uses_oob() or _oob_of(forest_from.forest_) is not None)
        if forest_from is not None and not searched and twin_ok:
            featurizer, forest = forest_from.featurizer_, forest_from.forest_
        else:
            featurizer = (forest_from.featurizer_ if forest_from is not None and not searched
                          else self._featurizer().fit(X, y, confidence=conf))
            if twin_ok and int(featurizer.layer_) == forest_from.layer_:
                forest = forest_from.forest_
        if forest is None:
            import warnings

            features = self._features(featurizer, X, conf)
            with warnings.catch_warnings():  # records in every bootstrap sample: handled by _oob_of
                warnings.filterwarnings("ignore", message="Some inputs do not have OOB scores")
                forest = self._forest(features.shape[1]).fit(features, y)
            forest.set_params(n_jobs=1)  # sequential prediction: a fixed summation order

        self.oof_proba_ = None
        if self.calibration is not None:
            if oof_proba is not None:
                self.oof_proba_ = self._check_oof(oof_proba, X.shape[0], searched)
            elif self._uses_oob():
                self.oof_proba_ = _oob_of(forest)
            else:
                self.oof_proba_ = self._out_of_fold_proba(featurizer, X, y, conf)
        elif oof_proba is not None:
            raise InputError("oof_proba is for a probe with a calibration; this one has none")
        self.calibration_params_: dict[str, np.ndarray] = self._fit_calibration(self.oof_proba_, y, conf)

        self.featurizer_ = featurizer
        self.forest_ = forest
        self.classes_ = np.array([0, 1])
        self.n_layer_outputs_ = int(X.shape[1])
        self.hidden_size_ = int(X.shape[2])
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
            "n_records": int(X.shape[0]),
            "n_correct": int(y.sum()),
            "accuracy": float(y.mean()),
            "mean_raw_confidence": None if conf is None else float(conf.mean()),
        }
        return self

    #: the settings that decide a probe's final forest, given its featurizer (see fit's forest_from)
    _FOREST_SETTINGS = ("view", "layer", "append_confidence", "n_estimators", "max_depth", "max_features",
                        "min_samples_leaf", "random_state", "pooling")

    def _check_twin(self, twin: Any, X: np.ndarray, y: np.ndarray) -> None:
        if not isinstance(twin, ActivationProbe) or not hasattr(twin, "forest_"):
            raise InputError(f"forest_from must be a fitted ActivationProbe, got {type(twin).__name__}")
        mine, theirs = self.get_params(), twin.get_params()
        differ = [k for k in self._FOREST_SETTINGS if mine[k] != theirs[k]]
        if self.random_state is None:
            differ.append("random_state (None: the forests are not reproducible)")
        if differ:
            raise InputError(f"forest_from fits another forest than this probe would: {', '.join(differ)} "
                             f"differ ({ {k: theirs[k] for k in differ if k in theirs} } there)")
        summary = twin.training_summary_
        if (twin.n_layer_outputs_, twin.hidden_size_) != X.shape[1:] or summary["n_records"] != X.shape[0] \
                or summary["n_correct"] != int(y.sum()):
            raise InputError(f"forest_from was fitted on {summary['n_records']} records of shape "
                             f"[{twin.n_layer_outputs_}, {twin.hidden_size_}] ({summary['n_correct']} correct), "
                             f"not on these {X.shape[0]} of shape {list(X.shape[1:])} ({int(y.sum())} correct)")

    def _fit_calibration(self, oof: np.ndarray | None, y: np.ndarray, conf: np.ndarray | None) -> dict:
        """The calibration map on the records with a held-out forest probability (all of them
        but those no tree left out of its bootstrap sample, under ``oof="oob"``)."""
        if oof is None:
            return fit_calibration(self.calibration, None, y, conf)
        held = np.isfinite(oof)
        if held.all():
            return fit_calibration(self.calibration, oof, y, conf)
        y_held = y[held]
        if y_held.size == 0 or y_held.min() == y_held.max():
            raise InputError(f"only {int(held.sum())} of {y.size} records are out of bag for some tree of the "
                             f"{self.n_estimators}-tree forest, not both classes: too few trees for oof='oob'")
        return fit_calibration(self.calibration, oof[held], y_held, None if conf is None else conf[held])

    def _check_oof(self, oof_proba: Any, n: int, searched: bool) -> np.ndarray:
        if searched:
            raise InputError("oof_proba cannot stand in for a searched layer's folds (they keep the layer "
                             "chosen on all records); fit without it")
        oof = np.asarray(oof_proba, dtype=np.float64)
        if oof.shape != (n,) or not np.isfinite(oof).all() or oof.min() < 0 or oof.max() > 1:
            raise InputError(f"oof_proba must be {n} finite probabilities in [0, 1] (one per record), "
                             f"got shape {oof.shape}")
        return oof

    # A hand loop rather than CalibratedClassifierCV(ensemble=False): the folds refit the
    # featurizer on states while the raw confidence is a separate input, and the stacked
    # calibration needs that confidence too, which scikit-learn's calibrators cannot take.
    def _out_of_fold_proba(self, featurizer, X: np.ndarray, y: np.ndarray, conf: np.ndarray | None) -> np.ndarray:
        from sklearn.model_selection import StratifiedKFold

        template = MeanPool(int(featurizer.layer_)) if isinstance(featurizer, MeanPool) else clone(featurizer)
        oof = np.empty(X.shape[0], dtype=np.float64)
        folds = StratifiedKFold(self.cv, shuffle=True, random_state=self.random_state)
        for train, test in folds.split(np.zeros(X.shape[0]), y):
            f = clone(template)
            if isinstance(f, LayerPCA) and f.n_components > len(train):
                f.set_params(n_components=len(train))
            f.fit(X[train], y[train])
            c_tr = None if conf is None else conf[train]
            c_te = None if conf is None else conf[test]
            feats = self._features(f, X[train], c_tr)
            forest = self._forest(feats.shape[1]).fit(feats, y[train])
            forest.set_params(n_jobs=1)  # sequential prediction: a fixed summation order
            oof[test] = forest.predict_proba(self._features(f, X[test], c_te))[:, 1]
        return oof

    def _check_fitted(self) -> None:
        if not hasattr(self, "forest_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("ActivationProbe is not fitted yet; call fit first")

    def transform_features(self, states: Any, confidence: Any = None) -> np.ndarray:
        """The forest's input features ``[n, len(feature_names_)]`` (float64)."""
        self._check_fitted()
        X, conf = self._inputs(states, confidence)
        return self._features(self.featurizer_, X, conf)

    def predict_proba(self, states: Any, confidence: Any = None, *, calibrated: bool = True) -> np.ndarray:
        """``[n, 2]`` probabilities; column 1 is P(correct) (calibrated when ``calibration``).

        ``calibrated=False`` returns the final forest's own P(correct), before any calibration:
        for a stacked probe that is what the plain probe of the same view and seed predicts."""
        self._check_fitted()
        X, conf = self._inputs(states, confidence)
        features = self._features(self.featurizer_, X, conf)
        p = self.forest_.predict_proba(features)[:, list(self.forest_.classes_).index(1)]
        if calibrated:
            p = apply_calibration(p, self.calibration, self.calibration_params_, conf)
        return np.column_stack([1.0 - p, p])

    def predict(self, states: Any, confidence: Any = None) -> np.ndarray:
        """1 where P(correct) > 0.5, else 0."""
        return self.classes_[(self.predict_proba(states, confidence)[:, 1] > 0.5).astype(int)]

    def export(self, model_name: str | None = None, model_fingerprint: dict | None = None,
               training_summary: dict | None = None, metrics: dict | None = None,
               selection: dict | None = None, certificates: list | None = None) -> ExportedProbe:
        """The numpy-only :class:`ExportedProbe` of this fitted probe (in memory).

        ``selection`` (e.g. :meth:`acute.estimators.registry.AutoEstimator.selection`) records how this
        probe was chosen: the winner, its cross-validated scores and the runners-up.
        ``certificates``: its certified trust thresholds (:mod:`acute.estimators.certificates`
        entries, from :func:`acute.evaluation.certification.certify_probe`)."""
        self._check_fitted()
        d = self.hidden_size_ // pooling_blocks(self.pooling)
        fp = check_fingerprint(model_fingerprint, self.n_layer_outputs_, d)
        arrays = forest_arrays(self.forest_)
        arrays["layers"] = np.asarray(self.layers_, dtype=np.int64)
        if isinstance(self.featurizer_, LayerPCA):
            arrays["pca.means"] = np.ascontiguousarray(self.featurizer_.means_)
            arrays["pca.components"] = np.ascontiguousarray(self.featurizer_.components_)
        arrays.update(calibration_arrays(self.calibration, self.calibration_params_))
        from acute import __version__

        summary = dict(self.training_summary_)
        summary.update(training_summary or {})
        manifest = {
            "format": FORMAT,
            "format_version": 3 if self.pooling != DEFAULT_POOLING else 2 if self.calibration == "stacked" else 1,
            "acute_version": __version__,
            "model": {"name": model_name, "fingerprint": fp},
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
        return ExportedProbe(json_ready(manifest, where="manifest"), arrays)

    def save(self, path: str | os.PathLike, model_name: str | None = None, model_fingerprint: dict | None = None,
             training_summary: dict | None = None, metrics: dict | None = None,
             selection: dict | None = None, certificates: list | None = None) -> Path:
        """Write the probe directory ``path`` (``probe.safetensors`` + ``probe.json``) atomically.

        ``model_fingerprint`` (from ``acute.models.model_fingerprint``) must agree with the
        fitted input shape (``num_layers + 1`` layer outputs, ``hidden_size``). An existing
        probe directory is replaced; any other non-empty directory is refused. Returns the path.
        """
        return self.export(model_name, model_fingerprint, training_summary, metrics, selection,
                           certificates).save(path)

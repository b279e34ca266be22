"""Featurizers that turn pooled hidden states into probe features.

Every featurizer is a scikit-learn transformer over the estimators' inputs
(:class:`acute.estimators.inputs.Inputs`): ``fit(X, y=None)`` and ``transform(X)`` read the
hidden-states source ``source`` (default ``states@mean``), an array of shape ``[n, L+1, d]``
indexed like transformers' ``output_hidden_states``: index 0 is the embedding output, index
``i`` the output of decoder layer ``i`` and index ``L`` the final-norm output. ``sources`` names
what a featurizer reads. ``fit`` sees the training split only; ``transform`` returns float64
features ``[n, k]``.

* :class:`MeanPool` - one layer's pooled vector (``d`` features). The layer is an int
  (negative allowed) or one of ``"early"``, ``"mid"``, ``"late"``: the layer within that third
  (see :func:`layer_thirds`) whose small random-forest probe has the lowest mean stratified
  cross-validated Brier score on the training split.
* :class:`CosineToLast` - cosine similarity of each layer output ``0..L-1`` to the last one
  (``L`` features).
* :class:`LayerPCA` - per-layer PCA, ``m`` components per layer, concatenated
  (``(L+1) * m`` features). Named views ``pca10`` / ``pca20`` (see :func:`make_featurizer`).

The featurizers only look at the states (but a searched layer, which may score its candidates
with the raw confidence: ``MeanPool(with_confidence=True)``); the raw confidence is appended as
one more feature by :func:`append_confidence` (``ActivationProbe(append_confidence=True)`` does this).
The pure functions :func:`cosine_to_last` and :func:`pca_project` are what both the
featurizers and the exported numpy probe call, so fitted and exported features are identical.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.exceptions import NotFittedError
from threadpoolctl import threadpool_limits

from ..errors import InputError
from ..store.pooling import DEFAULT_POOLING
from ..validation import check_correct
from .inputs import CONFIDENCE, check_inputs, states_source
from .folds import out_of_fold, stratified_folds

NAMED_LAYERS = ("early", "mid", "late")
VIEWS = ("mean", "early", "mid", "late", "cosine", "pca10", "pca20")
CONFIDENCE_FEATURE = "raw_confidence"

__all__ = [
    "CONFIDENCE_FEATURE",
    "DEFAULT_SOURCE",
    "NAMED_LAYERS",
    "VIEWS",
    "CosineToLast",
    "LayerPCA",
    "MeanPool",
    "append_confidence",
    "check_cv",
    "cosine_to_last",
    "layer_thirds",
    "make_featurizer",
    "pca_project",
    "resolve_layer",
    "search_layer",
]


def append_confidence(features: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    """Return ``features`` ``[n, k]`` with ``confidence`` ``[n]`` as an extra last column (float64)."""
    features = np.asarray(features, dtype=np.float64)
    confidence = np.asarray(confidence, dtype=np.float64)
    return np.concatenate([features, confidence[:, None]], axis=1)


# ------------------------------------------------------------------------------- layers


def resolve_layer(layer: Any, n_layer_outputs: int, name: str = "layer") -> int:
    """Turn an int layer index (negative counts from the end) into ``0..n_layer_outputs-1``.

    Raises ``ValueError`` for a non-integer or an index outside ``-n..n-1``.
    """
    if isinstance(layer, bool) or not isinstance(layer, Integral):
        raise InputError(f"{name} must be an int or one of {NAMED_LAYERS}; got {layer!r}")
    layer = int(layer)
    if not -n_layer_outputs <= layer < n_layer_outputs:
        raise InputError(
            f"{name}={layer} is out of range: states has {n_layer_outputs} layer outputs "
            f"(valid {-n_layer_outputs}..{n_layer_outputs - 1})"
        )
    return layer % n_layer_outputs


def layer_thirds(n_layer_outputs: int) -> dict[str, np.ndarray]:
    """The layer indices of the ``early``, ``mid`` and ``late`` thirds.

    The decoder-layer outputs ``1..L`` (``L = n_layer_outputs - 1``; index ``L`` is the
    final-norm output) are split into three contiguous parts with ``np.array_split``, so the
    first parts get the remainder: for ``L = 30`` the thirds are 1-10, 11-20, 21-30; for
    ``L = 4`` they are 1-2, 3, 4. The embedding output (index 0) belongs to no third.
    A third is empty when ``L < 3``.
    """
    if n_layer_outputs < 2:
        raise InputError(f"need at least 2 layer outputs; got {n_layer_outputs}")
    parts = np.array_split(np.arange(1, n_layer_outputs, dtype=np.int64), 3)
    return dict(zip(NAMED_LAYERS, parts))


def _search_forest(n_features: int, *, n_estimators: int, max_depth: int | None,
                   max_features: Any, n_jobs: int | None, random_state: int | None):
    from sklearn.ensemble import RandomForestClassifier  # heavy: sklearn

    if isinstance(max_features, Integral) and not isinstance(max_features, bool):
        max_features = min(int(max_features), n_features)
    return RandomForestClassifier(
        n_estimators=n_estimators, max_depth=max_depth, max_features=max_features,
        n_jobs=n_jobs, random_state=random_state,
    )


def search_layer(
    states: np.ndarray,
    correct: np.ndarray,
    candidates: np.ndarray,
    confidence: np.ndarray | None = None,
    *,
    cv: int = 3,
    n_estimators: int = 100,
    max_depth: int | None = 8,
    max_features: Any = 10,
    n_jobs: int | None = None,
    random_state: int | None = 0,
) -> tuple[int, dict[int, float]]:
    """Pick the candidate layer whose probe scores best by stratified cross-validation.

    For each candidate layer ``l`` a random forest (``n_estimators`` trees, ``max_depth``,
    ``max_features``) is trained on ``states[:, l]`` (plus ``confidence`` as one more
    column when given) on ``cv - 1`` folds and scored on the held-out fold by the Brier score
    ``mean((P(correct) - correct)^2)``; the score of a layer is the mean over the ``cv`` folds
    of ``StratifiedKFold(cv, shuffle=True, random_state)`` (the same folds for every layer).
    Returns ``(best_layer, {layer: mean Brier score})``; the lowest score wins and ties go to
    the earliest layer. Call it on the training split only. The forests fit on ``n_jobs``
    threads and predict on one (scikit-learn adds threaded trees' probabilities in the order the
    threads finish), so the scores and the choice do not depend on ``n_jobs``.
    """
    from sklearn.metrics import brier_score_loss  # heavy: sklearn

    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.size == 0:
        raise InputError("no candidate layers to search")
    y = np.asarray(correct, dtype=np.int64)
    folds = stratified_folds(y, cv, random_state)
    scores: dict[int, float] = {}
    for layer in candidates:
        x = np.asarray(states[:, int(layer)], dtype=np.float64)
        if confidence is not None:
            x = append_confidence(x, confidence)
        forest = _search_forest(
            x.shape[1], n_estimators=n_estimators, max_depth=max_depth,
            max_features=max_features, n_jobs=n_jobs, random_state=random_state,
        )

        def fit_predict(tr, te, x=x, forest=forest):  # cross_val_score's fits, predicting on one thread
            f = clone(forest).fit(x[tr], y[tr])
            f.set_params(n_jobs=1)  # trees summed in their order: scores do not depend on n_jobs
            return f.predict_proba(x[te])[:, 1]

        oof = out_of_fold(fit_predict, folds, y.size)
        scores[int(layer)] = float(np.mean([brier_score_loss(y[te], oof[te]) for _, te in folds]))
    best = min(scores, key=lambda k: (scores[k], k))
    return best, scores


def check_cv(cv: Any, y: np.ndarray) -> int:
    """Validate a fold count against labels ``y``: >= 2 folds, enough records of each class."""
    if isinstance(cv, bool) or not isinstance(cv, Integral) or cv < 2:
        raise InputError(f"cv must be an int >= 2; got {cv!r}")
    if len(y) < cv:
        raise InputError(f"{len(y)} records are fewer than the cv={cv} folds")
    counts = np.bincount(y, minlength=2)
    if counts.min() < cv:
        raise InputError(
            f"stratified cv={cv} needs at least {cv} correct and {cv} wrong records; "
            f"got {counts[1]} correct and {counts[0]} wrong"
        )
    return int(cv)


DEFAULT_SOURCE = states_source(DEFAULT_POOLING)


class _LayerMeansTransformer(TransformerMixin, BaseEstimator):
    """Shared input checks: reads the states of ``source``, remembers ``[L+1, d]`` at fit and
    checks it at transform."""

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources :meth:`fit` and :meth:`transform` read: the states of ``source``."""
        return (self.source,)

    def _states(self, X: Any) -> np.ndarray:
        return check_inputs(X, self, (self.source,))[self.source]

    def _record_shape(self, X: np.ndarray) -> None:
        self.n_layer_outputs_ = int(X.shape[1])
        self.hidden_size_ = int(X.shape[2])

    def _check_transform_input(self, X: Any) -> np.ndarray:
        if not hasattr(self, "n_layer_outputs_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted yet; call fit first")
        X = self._states(X)
        if X.shape[1:] != (self.n_layer_outputs_, self.hidden_size_):
            raise InputError(
                f"states has shape [n, {X.shape[1]}, {X.shape[2]}] but {type(self).__name__} "
                f"was fitted on [n, {self.n_layer_outputs_}, {self.hidden_size_}]"
            )
        return X


class MeanPool(_LayerMeansTransformer):
    """One layer's pooled vector as ``d`` features named ``"L{layer}.d{j}"``.

    Parameters
    ----------
    layer : int or {"early", "mid", "late"}
        An int picks that layer output (negative counts from the end). A name picks, within
        that third of the decoder-layer outputs (:func:`layer_thirds`), the layer with the
        lowest mean stratified-CV Brier score of a small random forest on that layer (plus the
        raw confidence with ``with_confidence``) - see :func:`search_layer`. ``fit`` then needs
        ``y`` (correct) and must see the training split only.
    cv : int
        Folds of the layer search (default 3).
    n_estimators, max_depth, max_features : search-forest settings
        Deliberately small (100 trees, depth 8) so the search stays affordable: for SmolLM2-135M
        (30 layers, d = 576) one third is 10 layers x 3 folds.
    stride : int
        Search every ``stride``-th layer of the third (1 = all of them).
    n_jobs, random_state : passed to the search forests and the fold split.
    source : str
        The hidden-states source read (default ``states@mean``).
    with_confidence : bool
        A searched layer's forests also read the ``confidence`` source (default False).

    Fitted attributes: ``layer_`` (int, the chosen layer), ``cv_scores_`` (``{layer: mean
    Brier}``; empty for an int layer), ``n_layer_outputs_``, ``hidden_size_``.
    """

    def __init__(self, layer: int | str = -1, cv: int = 3, n_estimators: int = 100,
                 max_depth: int | None = 8, max_features: Any = 10, stride: int = 1,
                 n_jobs: int | None = None, random_state: int | None = 0, source: str = DEFAULT_SOURCE,
                 with_confidence: bool = False):
        self.layer = layer
        self.cv = cv
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.max_features = max_features
        self.stride = stride
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.source = source
        self.with_confidence = with_confidence

    @property
    def sources(self) -> tuple[str, ...]:
        """The states of ``source``, and the ``confidence`` source when a searched layer reads it."""
        searched = isinstance(self.layer, str) and self.with_confidence
        return (self.source, CONFIDENCE) if searched else (self.source,)

    def fit(self, X: Any, y: Any = None) -> MeanPool:
        """Fix (or search for) the layer. ``y`` (and the confidence) are used only by a named layer."""
        inputs = check_inputs(X, self)
        X = inputs[self.source]
        n_outputs = X.shape[1]
        if isinstance(self.layer, str):
            if self.layer not in NAMED_LAYERS:
                raise InputError(f"layer must be an int or one of {NAMED_LAYERS}; got {self.layer!r}")
            third = layer_thirds(n_outputs)[self.layer]
            if third.size == 0:
                raise InputError(
                    f"layer={self.layer!r} needs at least 3 decoder layers; states has "
                    f"{n_outputs} layer outputs ({n_outputs - 1} decoder layers)"
                )
            if y is None:
                raise InputError(
                    f"MeanPool(layer={self.layer!r}) picks its layer by cross-validation and needs y (correct)"
                )
            labels = check_correct(y, X.shape[0], name="y", both_classes=True)
            cv = check_cv(self.cv, labels)
            conf = inputs[CONFIDENCE] if self.with_confidence else None
            if isinstance(self.stride, bool) or not isinstance(self.stride, Integral) or self.stride < 1:
                raise InputError(f"stride must be an int >= 1; got {self.stride!r}")
            self.layer_, self.cv_scores_ = search_layer(
                X, labels, third[:: self.stride], conf, cv=cv, n_estimators=self.n_estimators,
                max_depth=self.max_depth, max_features=self.max_features, n_jobs=self.n_jobs,
                random_state=self.random_state,
            )
        else:
            self.layer_ = resolve_layer(self.layer, n_outputs)
            self.cv_scores_ = {}
        self._record_shape(X)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Return ``states[:, layer_]`` as float64 ``[n, d]``."""
        X = self._check_transform_input(X)
        return np.asarray(X[:, self.layer_], dtype=np.float64)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Feature names ``"L{layer_}.d{j}"`` for ``j = 0..d-1``."""
        return np.array([f"L{self.layer_}.d{j}" for j in range(self.hidden_size_)], dtype=object)


def cosine_to_last(states: np.ndarray, blocks: int = 1) -> np.ndarray:
    """Cosine similarity of each layer output ``0..L-1`` to the last one, float64 ``[n, blocks * L]``.

    With ``blocks`` > 1 the hidden axis holds that many concatenated pooled states
    (:mod:`acute.store.pooling`) and each block is compared with the same block of the last layer
    (block-major columns). Computed in float64 one layer at a time. A pair where either vector
    has zero norm has no defined angle; its similarity is set to 0.0 (documented convention).
    """
    n, n_out, width = states.shape
    if blocks < 1 or width % blocks:
        raise InputError(f"hidden size {width} does not split into {blocks} pooled states")
    d = width // blocks
    out = np.zeros((n, blocks * (n_out - 1)), dtype=np.float64)
    for b in range(blocks):
        cols = slice(b * d, (b + 1) * d)
        last = np.asarray(states[:, -1, cols], dtype=np.float64)
        last_norm = np.linalg.norm(last, axis=1)
        for i in range(n_out - 1):
            h = np.asarray(states[:, i, cols], dtype=np.float64)
            denom = np.linalg.norm(h, axis=1) * last_norm
            dot = np.einsum("nd,nd->n", h, last)
            ok = denom > 0
            out[ok, b * (n_out - 1) + i] = dot[ok] / denom[ok]
    return out


class CosineToLast(_LayerMeansTransformer):
    """Cosine similarity of each layer output to the last (``L`` features ``"cos.L{i}"`` per
    pooled state; with ``blocks`` > 1 concatenated states, ``"cos{b}.L{i}"``).

    ``fit`` only records the input shape; zero-norm vectors give similarity 0.0
    (see :func:`cosine_to_last`).
    """

    def __init__(self, blocks: int = 1, source: str = DEFAULT_SOURCE):
        self.blocks = blocks
        self.source = source

    def fit(self, X: Any, y: Any = None) -> CosineToLast:
        """Record ``[L+1, d]``; nothing is learned."""
        X = self._states(X)
        if X.shape[2] % self.blocks:
            raise InputError(f"hidden size {X.shape[2]} does not split into blocks={self.blocks} pooled states")
        self._record_shape(X)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Return float64 ``[n, blocks * L]`` cosine similarities."""
        return cosine_to_last(self._check_transform_input(X), self.blocks)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Feature names ``"cos.L{i}"`` for ``i = 0..L-1`` (``"cos{b}.L{i}"`` per block)."""
        layers = range(self.n_layer_outputs_ - 1)
        if self.blocks == 1:
            return np.array([f"cos.L{i}" for i in layers], dtype=object)
        return np.array([f"cos{b}.L{i}" for b in range(self.blocks) for i in layers], dtype=object)


def _single_thread_blas():
    """Context limiting BLAS to one thread.

    The per-layer matrices are small (d ~ 600); multi-threaded OpenBLAS gains little on them
    and, on a busy machine, spin-waiting threads made LayerPCA.fit 20x slower (measured).
    """
    return threadpool_limits(limits=1, user_api="blas")


def pca_project(states: np.ndarray, means: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Project every layer onto its principal components: float64 ``[n, (L+1) * m]``.

    ``means`` is ``[L+1, d]`` and ``components`` ``[L+1, m, d]`` (orthonormal rows); the
    columns are layer-major: layer 0's ``m`` scores, then layer 1's, ...
    """
    n_out, m = components.shape[0], components.shape[1]
    out = np.empty((states.shape[0], n_out * m), dtype=np.float64)
    with _single_thread_blas():
        for layer in range(n_out):
            x = np.asarray(states[:, layer], dtype=np.float64) - means[layer]
            out[:, layer * m : (layer + 1) * m] = x @ components[layer].T
    return out


def top_components(x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, components [m, d], explained-variance ratio [m])`` of the rows of ``x``: the top
    ``m`` eigenvectors of the covariance, largest first, each signed so that its entry of largest
    magnitude is positive (scikit-learn's ``PCA(svd_solver="covariance_eigh")`` convention).

    Only the ``m`` wanted eigenpairs are computed (LAPACK ``syevr`` through
    ``scipy.linalg.eigh(subset_by_index=...)``): for d = 1536 (Qwen2.5-1.5B) and n = 1633 that is
    0.69 s a layer against scikit-learn's 1.84 s for the full decomposition, equal to it within
    floating-point rounding (tests/estimators/test_features.py), which makes the PCA views affordable on
    29 layers x 6 fits per outer fold. With fewer records than dimensions (800 training records
    of 1536 dimensions, a learning curve's 50) the top eigenpairs of the n x n Gram matrix
    ``xc xc' / (n - 1)`` give the same eigenvalues and, through ``xc' u``, the same directions,
    for a problem of n instead of d; the covariance path stays for a (near-)degenerate layer
    whose top m eigenvalues are not all clearly positive."""
    from scipy.linalg import eigh  # heavy: scipy

    n, d = x.shape
    mean = x.mean(axis=0)
    xc = x - mean
    scale = max(n - 1, 1)
    v = None
    if n < d:  # the n x n Gram matrix has the same nonzero eigenvalues: a smaller problem
        gram = xc @ xc.T / scale
        w, u = eigh(gram, subset_by_index=[n - m, n - 1])
        total = float(np.trace(gram))
        if total > 0 and (w > 1e-10 * total).all():  # well-defined directions: v = xc' u / |xc' u|
            v = (xc.T @ u).T
            v /= np.linalg.norm(v, axis=1, keepdims=True)
    if v is None:
        cov = xc.T @ xc / scale
        w, v = eigh(cov, subset_by_index=[d - m, d - 1])
        v = v.T
        total = float(np.trace(cov))
    w, v = w[::-1], v[::-1].copy()
    v *= np.where(v[np.arange(m), np.abs(v).argmax(axis=1)] < 0, -1.0, 1.0)[:, None]
    ratio = np.nan_to_num(np.clip(w, 0.0, None) / total) if total > 0 else np.zeros(m)
    return mean, v, ratio


class LayerPCA(_LayerMeansTransformer):
    """Per-layer PCA: ``n_components`` scores of every layer output, concatenated.

    Each layer is centred on its training mean and projected on its top principal components:
    the covariance's top eigenvectors in float64 (:func:`top_components`, equal to scikit-learn's
    ``PCA`` with ``svd_solver="covariance_eigh"`` or ``"full"``), or scikit-learn's full SVD when
    as many components as records are asked for; the sign convention makes the largest-magnitude
    entry of each component positive.
    ``n_components`` must be ``<= min(n_train, d)``.

    Fitted attributes: ``means_`` float64 ``[L+1, d]``, ``components_`` float64
    ``[L+1, m, d]``, ``explained_variance_ratio_`` ``[L+1, m]``. Feature names
    ``"L{layer}.pc{j}"`` with ``j = 1..m`` (pc1 is the leading component).
    """

    def __init__(self, n_components: int = 10, source: str = DEFAULT_SOURCE):
        self.n_components = n_components
        self.source = source

    def fit(self, X: Any, y: Any = None) -> LayerPCA:
        """Fit one PCA per layer output on the training split."""
        X = self._states(X)
        n, n_out, d = X.shape
        m = self.n_components
        if isinstance(m, bool) or not isinstance(m, Integral) or m < 1:
            raise InputError(f"n_components must be an int >= 1; got {m!r}")
        if m > min(n, d):
            raise InputError(
                f"LayerPCA(n_components={m}) needs n_components <= min(n_train, d) = "
                f"min({n}, {d}) = {min(n, d)}"
            )
        from sklearn.decomposition import PCA  # heavy: sklearn

        means = np.empty((n_out, d), dtype=np.float64)
        components = np.empty((n_out, m, d), dtype=np.float64)
        ratio = np.zeros((n_out, m), dtype=np.float64)
        # a constant layer has no variance: its explained-variance ratio is 0, not a warning
        with _single_thread_blas(), np.errstate(invalid="ignore", divide="ignore"):
            for layer in range(n_out):
                x = np.asarray(X[:, layer], dtype=np.float64)
                if m < n:  # the top m eigenvectors of the d x d covariance
                    means[layer], components[layer], ratio[layer] = top_components(x, m)
                    continue
                pca = PCA(m, svd_solver="full").fit(x)  # as many components as records
                means[layer] = pca.mean_
                components[layer] = pca.components_
                ratio[layer] = np.nan_to_num(pca.explained_variance_ratio_)
        self.means_ = means
        self.components_ = components
        self.explained_variance_ratio_ = ratio
        self._record_shape(X)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Return float64 ``[n, (L+1) * m]`` PCA scores (see :func:`pca_project`)."""
        X = self._check_transform_input(X)
        return pca_project(X, self.means_, self.components_)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Feature names ``"L{layer}.pc{j}"``, layer-major, ``j = 1..m``."""
        m = self.components_.shape[1]
        return np.array(
            [f"L{layer}.pc{j + 1}" for layer in range(self.n_layer_outputs_) for j in range(m)],
            dtype=object,
        )


def make_featurizer(view: str, layer: int | str | None = None, blocks: int = 1, source: str = DEFAULT_SOURCE,
                    **search_params: Any):
    """Build the (unfitted) featurizer of a named view, reading the states of ``source``.

    ``"mean"`` needs ``layer`` (int or early/mid/late); ``"early"``/``"mid"``/``"late"`` are
    ``MeanPool(view)``; ``"cosine"`` is ``CosineToLast(blocks)`` (``blocks``: how many pooled
    states the hidden axis concatenates, :mod:`acute.store.pooling`); ``"pca10"``/``"pca20"`` are
    ``LayerPCA(10)``/``LayerPCA(20)``. ``search_params`` (cv, n_estimators, ...) go to
    ``MeanPool``. Raises ``ValueError`` for an unknown view or a ``layer`` the view cannot use.
    """
    if view not in VIEWS:
        raise InputError(f"unknown view {view!r}; choose one of {VIEWS}")
    if view == "mean":
        if layer is None:
            raise InputError("view='mean' needs layer (an int or one of 'early', 'mid', 'late')")
        if isinstance(layer, str) and layer not in NAMED_LAYERS:
            raise InputError(f"layer must be an int or one of {NAMED_LAYERS}; got {layer!r}")
        return MeanPool(layer, source=source, **search_params)
    if layer is not None:
        raise InputError(f"view={view!r} does not take a layer (got layer={layer!r}); use view='mean'")
    if view in NAMED_LAYERS:
        return MeanPool(view, source=source, **search_params)
    if view == "cosine":
        return CosineToLast(blocks, source)
    return LayerPCA(int(view[3:]), source)

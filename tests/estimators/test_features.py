from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import PCA
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import StratifiedKFold, cross_val_score

from acute.estimators.inputs import Inputs
from acute.validation import check_confidence, check_correct, check_states
from acute.estimators.features import (
    CosineToLast,
    LayerPCA,
    MeanPool,
    append_confidence,
    cosine_to_last,
    layer_thirds,
    make_featurizer,
    pca_project,
    resolve_layer,
)


def planted(n=300, n_out=10, d=8, layers=(2, 5, 8), strength=1.0, seed=0):
    """Gaussian noise; each layer in ``layers`` carries its own direction times (2*correct - 1)."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.5
    X = rng.normal(size=(n, n_out, d))
    for k in layers:
        u = rng.normal(size=d)
        X[:, k] += strength * np.outer(2.0 * y - 1.0, u / np.linalg.norm(u))
    return X.astype(np.float32), y, rng.random(n)


# ------------------------------------------------------------------------ validation


def test_check_states_names_argument_and_first_bad_row():
    X = np.zeros((10, 3, 4), dtype=np.float32)
    X[7, 1, 2] = np.nan
    X[9, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"states.*row 7"):
        check_states(X)
    X[7, 1, 2] = 0.0
    with pytest.raises(ValueError, match=r"states.*row 9"):
        check_states(X)
    with pytest.raises(ValueError, match=r"\[n, L\+1, d\]"):
        check_states(np.zeros((10, 4)))
    with pytest.raises(ValueError, match="no records"):
        check_states(np.zeros((0, 3, 4)))


def test_check_correct_and_confidence():
    assert check_correct([True, False, True], 3).tolist() == [1, 0, 1]
    assert check_correct(np.array([0.0, 1.0]), 2).dtype == np.int64
    with pytest.raises(ValueError, match="all records are correct.*needs both"):
        check_correct(np.ones(5, dtype=bool), 5, both_classes=True)
    with pytest.raises(ValueError, match="all records are wrong"):
        check_correct(np.zeros(5), 5, both_classes=True)
    with pytest.raises(ValueError, match=r"correct.*row 2"):
        check_correct([0, 1, 2], 3)
    with pytest.raises(ValueError, match="length 4"):
        check_correct([0, 1, 1], 4)
    with pytest.raises(ValueError, match=r"confidence.*row 1"):
        check_confidence([0.5, np.nan, 0.2], 3)
    with pytest.raises(ValueError, match=r"confidence.*row 2"):
        check_confidence([0.5, 0.1, 1.2], 3)
    with pytest.raises(ValueError, match="confidence is required"):
        check_confidence(None, 3)
    f = append_confidence(np.ones((2, 3)), np.array([0.25, 0.5]))
    assert f.shape == (2, 4) and f[:, -1].tolist() == [0.25, 0.5]


# ----------------------------------------------------------------------------- layers


def test_resolve_layer():
    assert resolve_layer(-1, 31) == 30
    assert resolve_layer(-31, 31) == 0
    assert resolve_layer(np.int64(4), 31) == 4
    with pytest.raises(ValueError, match=r"layer=40.*31 layer outputs"):
        resolve_layer(40, 31)
    with pytest.raises(ValueError, match="layer=-32"):
        resolve_layer(-32, 31)
    with pytest.raises(ValueError, match="must be an int"):
        resolve_layer(2.0, 31)
    with pytest.raises(ValueError, match="must be an int"):
        resolve_layer(True, 31)


def test_layer_thirds_are_contiguous_thirds_of_decoder_layers():
    t = layer_thirds(31)  # SmolLM2-135M: 30 decoder layers
    assert t["early"].tolist() == list(range(1, 11))
    assert t["mid"].tolist() == list(range(11, 21))
    assert t["late"].tolist() == list(range(21, 31))
    t = layer_thirds(5)  # 4 decoder layers: remainder goes to the first third
    assert [t[k].tolist() for k in ("early", "mid", "late")] == [[1, 2], [3], [4]]
    t = layer_thirds(3)
    assert t["late"].size == 0


# --------------------------------------------------------------------------- MeanPool


def test_meanpool_int_layer():
    X, y, _ = planted(n=20)
    mp = MeanPool(-2).fit(Inputs.of(X))
    assert mp.layer_ == 8 and mp.cv_scores_ == {}
    out = mp.transform(Inputs.of(X))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, X[:, 8].astype(np.float64))
    names = mp.get_feature_names_out()
    assert names[0] == "L8.d0" and names[-1] == "L8.d7" and len(names) == 8
    with pytest.raises(ValueError, match=r"states has shape \[n, 9, 8\].*\[n, 10, 8\]"):
        mp.transform(Inputs.of(X[:, :9]))
    with pytest.raises(ValueError, match="layer=40"):
        MeanPool(40).fit(Inputs.of(X))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        MeanPool(1).transform(Inputs.of(X))


@pytest.mark.parametrize("third,expected", [("early", 2), ("mid", 5), ("late", 8)])
def test_meanpool_named_layer_picks_planted_layer_in_its_third(third, expected):
    X, y, conf = planted()
    mp = MeanPool(third, n_estimators=20, with_confidence=True).fit(Inputs.of(X, conf), y)
    assert mp.layer_ == expected
    assert set(mp.cv_scores_) == set(layer_thirds(10)[third].tolist())
    assert min(mp.cv_scores_, key=mp.cv_scores_.get) == expected
    np.testing.assert_array_equal(mp.transform(Inputs.of(X)), X[:, expected].astype(np.float64))


def test_meanpool_search_score_is_mean_cv_brier_of_the_documented_forest():
    X, y, conf = planted(n=120)
    mp = MeanPool("mid", n_estimators=10, max_depth=8, max_features=10, random_state=3,
                  with_confidence=True).fit(Inputs.of(X, conf), y)
    # independent recomputation with scikit-learn's own cross-validation and Brier scorer
    for layer in (4, 5, 6):
        feats = np.column_stack([X[:, layer].astype(np.float64), conf])
        forest = RandomForestClassifier(n_estimators=10, max_depth=8, max_features=9, random_state=3)
        folds = StratifiedKFold(3, shuffle=True, random_state=3)
        ref = -cross_val_score(forest, feats, y.astype(int), cv=folds, scoring="neg_brier_score").mean()
        assert mp.cv_scores_[layer] == pytest.approx(ref, abs=1e-12)


def test_meanpool_search_stride_and_errors():
    X, y, conf = planted(n=60)
    mp = MeanPool("early", n_estimators=5, stride=2).fit(Inputs.of(X), y)
    assert set(mp.cv_scores_) == {1, 3}
    with pytest.raises(ValueError, match="needs y"):
        MeanPool("mid").fit(Inputs.of(X))
    with pytest.raises(ValueError, match="needs at least 3 decoder layers"):
        MeanPool("late").fit(Inputs.of(X[:, :3]), y)
    with pytest.raises(ValueError, match="one of"):
        MeanPool("middle").fit(Inputs.of(X), y)
    with pytest.raises(ValueError, match="cv=3"):
        MeanPool("mid").fit(Inputs.of(X[:2]), np.array([0, 1]))
    yy = np.zeros(60, dtype=int)
    yy[:2] = 1
    with pytest.raises(ValueError, match="at least 3 correct"):
        MeanPool("mid").fit(Inputs.of(X), yy)


# ----------------------------------------------------------------------- CosineToLast


def test_cosine_to_last_matches_explicit_loops_and_zero_norm_rule():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 5, 3))
    X[1, 2] = 0.0  # zero-norm layer vector
    X[3, -1] = 0.0  # zero-norm last layer: the whole row is 0
    expected = np.zeros((4, 4))
    for i in range(4):
        last = X[i, 4]
        for layer in range(4):
            h = X[i, layer]
            dot = sum(float(a) * float(b) for a, b in zip(h, last))
            nh = math.sqrt(sum(float(a) ** 2 for a in h))
            nl = math.sqrt(sum(float(b) ** 2 for b in last))
            expected[i, layer] = dot / (nh * nl) if nh > 0 and nl > 0 else 0.0
    ct = CosineToLast().fit(Inputs.of(X))
    got = ct.transform(Inputs.of(X))
    assert got.shape == (4, 4)
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)
    assert got[1, 2] == 0.0 and np.all(got[3] == 0.0)
    np.testing.assert_array_equal(got, cosine_to_last(X))
    # a layer parallel to the last one has cosine 1, antiparallel -1
    Y = np.stack([2.0 * X[0, 4], -X[0, 4], X[0, 4]])[None]
    np.testing.assert_allclose(CosineToLast().fit(Inputs.of(Y)).transform(Inputs.of(Y)), [[1.0, -1.0]], atol=1e-15)
    assert ct.get_feature_names_out().tolist() == ["cos.L0", "cos.L1", "cos.L2", "cos.L3"]


# --------------------------------------------------------------------------- LayerPCA


def test_layer_pca_matches_sklearn_pca_and_uses_training_statistics():
    rng = np.random.default_rng(2)
    scale = np.array([5.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.3, 0.2])
    X = rng.normal(size=(80, 3, 8)) * scale
    train, test = X[:60], X[60:]
    pca = LayerPCA(3).fit(Inputs.of(train))
    assert pca.means_.shape == (3, 8) and pca.components_.shape == (3, 3, 8)
    out = pca.transform(Inputs.of(test))
    assert out.shape == (20, 9)
    for layer in range(3):
        ref = PCA(3, svd_solver="full").fit(train[:, layer])
        np.testing.assert_allclose(pca.means_[layer], ref.mean_, atol=1e-12)
        # same sign convention as scikit-learn (largest |entry| positive), checked up to sign too
        signs = np.sign(np.sum(ref.components_ * pca.components_[layer], axis=1))
        np.testing.assert_allclose(pca.components_[layer] * signs[:, None], ref.components_, atol=1e-9)
        np.testing.assert_allclose(signs, 1.0)
        np.testing.assert_allclose(out[:, 3 * layer : 3 * layer + 3], ref.transform(test[:, layer]), atol=1e-9)
        np.testing.assert_allclose(pca.explained_variance_ratio_[layer], ref.explained_variance_ratio_, atol=1e-12)
    names = pca.get_feature_names_out().tolist()
    assert names[:4] == ["L0.pc1", "L0.pc2", "L0.pc3", "L1.pc1"] and names[-1] == "L2.pc3"


@pytest.mark.parametrize("n", [30, 6])  # n >= d (eigh path) and n < d (SVD path)
def test_layer_pca_full_rank_reconstructs_and_is_orthonormal(n):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 2, 8))
    m = min(n, 8)
    pca = LayerPCA(m).fit(Inputs.of(X))
    scores = pca.transform(Inputs.of(X))
    for layer in range(2):
        comps = pca.components_[layer]
        np.testing.assert_allclose(comps @ comps.T, np.eye(m), atol=1e-10)
        recon = scores[:, layer * m : (layer + 1) * m] @ comps + pca.means_[layer]
        np.testing.assert_allclose(recon, X[:, layer], atol=1e-10)
    np.testing.assert_array_equal(scores, pca_project(X, pca.means_, pca.components_))


def test_layer_pca_errors():
    X = np.random.default_rng(0).normal(size=(15, 3, 8))
    with pytest.raises(ValueError, match=r"n_components=10.*min\(15, 8\)"):
        LayerPCA(10).fit(Inputs.of(X))
    with pytest.raises(ValueError, match=r"n_components=10.*min\(5, 8\)"):
        LayerPCA(10).fit(Inputs.of(X[:5]))
    with pytest.raises(ValueError, match="n_components must be an int"):
        LayerPCA(0).fit(Inputs.of(X))


# --------------------------------------------------------------------- make_featurizer


def test_make_featurizer_views_and_sklearn_conventions():
    assert isinstance(make_featurizer("pca10"), LayerPCA) and make_featurizer("pca20").n_components == 20
    assert isinstance(make_featurizer("cosine"), CosineToLast)
    assert make_featurizer("mid").layer == "mid"
    assert make_featurizer("mean", 3).layer == 3
    assert make_featurizer("mean", "late", n_estimators=7).get_params()["n_estimators"] == 7
    with pytest.raises(ValueError, match="needs layer"):
        make_featurizer("mean")
    with pytest.raises(ValueError, match="does not take a layer"):
        make_featurizer("cosine", 2)
    with pytest.raises(ValueError, match="unknown view"):
        make_featurizer("pca5")
    # no work (or validation) in __init__; clone/get_params work
    bogus = MeanPool("nonsense")
    assert clone(bogus).layer == "nonsense"


@pytest.mark.parametrize("n, d, m", [(300, 40, 10), (500, 64, 20), (120, 120, 10), (60, 150, 10), (40, 90, 20)])
def test_top_components_equal_scikit_learns_pca(n, d, m):
    from acute.estimators.features import top_components

    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    ref = PCA(m, svd_solver="covariance_eigh" if n >= d else "full").fit(x)
    mean, comps, ratio = top_components(x, m)
    np.testing.assert_allclose(mean, ref.mean_, atol=1e-12)
    np.testing.assert_allclose(comps, ref.components_, atol=1e-9)
    np.testing.assert_allclose(ratio, ref.explained_variance_ratio_, atol=1e-12)


def test_top_components_of_fewer_records_than_dimensions_without_variance():
    """n < d takes the Gram matrix's eigenpairs; a layer whose top eigenvalues are not all clearly
    positive (here: no variance, or rank 2 for 3 components) keeps the covariance path: finite
    unit components, zero ratios where there is no variance."""
    from acute.estimators.features import top_components

    rng = np.random.default_rng(0)
    flat = np.ones((30, 100)) * 3.0
    mean, comps, ratio = top_components(flat, 5)
    assert np.isfinite(comps).all() and np.allclose(np.linalg.norm(comps, axis=1), 1) and (ratio == 0).all()
    rank2 = rng.normal(size=(30, 2)) @ rng.normal(size=(2, 100))
    _, comps, ratio = top_components(rank2, 3)
    ref = PCA(3, svd_solver="full").fit(rank2)
    np.testing.assert_allclose(np.abs(comps[:2] @ ref.components_[:2].T), np.eye(2), atol=1e-9)
    np.testing.assert_allclose(ratio[:2], ref.explained_variance_ratio_[:2], atol=1e-12)

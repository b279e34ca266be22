from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from sklearn.base import clone
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from acute.estimators.inputs import Inputs
from acute.errors import ModelMismatchError, ProbeFormatError
from acute.estimators import ActivationProbe, ExportedProbe, load_probe
from acute.estimators.probe_file import forest_arrays, forest_proba
from acute.store import ModelIdentity

N_OUT, D = 10, 12  # 9 decoder layers (thirds 1-3, 4-6, 7-9), hidden size 12
FINGERPRINT = {"architecture": "LlamaForCausalLM", "num_layers": 9, "hidden_size": 12, "vocab_size": 320}


def make_data(n=400, seed=0, strength=1.2):
    """Layer 5 carries (2*correct - 1) * u, the last layer a constant u (so cosine sees it too)."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.55
    X = rng.normal(size=(n, N_OUT, D))
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    X[:, 5] += strength * np.outer(2.0 * y - 1.0, u)
    X[:, -1] += 5.0 * u
    conf = np.clip(0.5 + 0.1 * (2.0 * y - 1.0) + 0.25 * rng.normal(size=n), 0.0, 1.0)
    return X.astype(np.float32), y, conf


@pytest.fixture(scope="module")
def data():
    X, y, conf = make_data()
    return (X[:300], y[:300], conf[:300]), (X[300:], y[300:], conf[300:])


def small(**kw):
    params = dict(n_estimators=30, search_n_estimators=10, random_state=0)
    params.update(kw)
    return ActivationProbe(**params)


@pytest.fixture(scope="module")
def fitted(data):
    (X, y, c), _ = data
    return small(view="pca10").fit(Inputs.of(X, c), y)


# ------------------------------------------------------------------------- behaviour


@pytest.mark.parametrize("kw", [dict(view="pca10"), dict(view="cosine"), dict(view="mid"),
                                dict(view="mean", layer=5)])
def test_probe_beats_chance_on_held_out(data, kw):
    (X, y, c), (Xt, yt, ct) = data
    probe = small(**kw).fit(Inputs.of(X, c), y)
    proba = probe.predict_proba(Inputs.of(Xt, ct))
    assert proba.shape == (len(Xt), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert roc_auc_score(yt, proba[:, 1]) > 0.8
    if kw["view"] == "mid":
        assert probe.layer_ == 5 and probe.layers_ == [5] and set(probe.cv_scores_) == {4, 5, 6}


def test_feature_names_and_attributes(data, fitted):
    (X, y, c), _ = data
    assert fitted.feature_names_[:2] == ["L0.pc1", "L0.pc2"]
    assert fitted.feature_names_[-2:] == ["L9.pc10", "raw_confidence"]
    assert len(fitted.feature_names_) == N_OUT * 10 + 1 == fitted.forest_.n_features_in_
    assert fitted.classes_.tolist() == [0, 1] and fitted.layer_ is None
    assert fitted.training_summary_["n_records"] == 300
    assert fitted.training_summary_["n_correct"] == int(y.sum())
    p = small(view="mean", layer=-7, append_confidence=False).fit(Inputs.of(X), y)
    assert p.layer_ == 3 and p.feature_names_ == [f"L3.d{j}" for j in range(D)]
    # append_confidence=False: no confidence column, and none needed
    np.testing.assert_array_equal(p.export().features(Inputs.of(X)), X[:, 3].astype(np.float64))
    p = small(view="cosine").fit(Inputs.of(X, c), y)
    assert p.feature_names_ == [f"cos.L{i}" for i in range(N_OUT - 1)] + ["raw_confidence"]
    np.testing.assert_array_equal(p.export().features(Inputs.of(X, c))[:, -1], c)
    pred = fitted.predict(Inputs.of(X, c))
    np.testing.assert_array_equal(pred, (fitted.predict_proba(Inputs.of(X, c))[:, 1] > 0.5).astype(int))


def test_reproducible_and_n_jobs_independent(data):
    (X, y, c), (Xt, _, ct) = data
    a = small(view="pca10", n_jobs=1).fit(Inputs.of(X, c), y).predict_proba(Inputs.of(Xt, ct))
    b = small(view="pca10", n_jobs=1).fit(Inputs.of(X, c), y).predict_proba(Inputs.of(Xt, ct))
    j = small(view="pca10", n_jobs=2).fit(Inputs.of(X, c), y).predict_proba(Inputs.of(Xt, ct))
    other = small(view="pca10", random_state=1).fit(Inputs.of(X, c), y).predict_proba(Inputs.of(Xt, ct))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, j)
    assert not np.array_equal(a, other)
    probe = small(view="pca10", n_jobs=2)
    assert probe.get_params()["n_jobs"] == 2 and clone(probe).get_params() == probe.get_params()


def test_forest_hyperparameters_are_used(data):
    (X, y, c), _ = data
    p = small(view="cosine", max_depth=3, min_samples_leaf=5, n_estimators=7, max_features=50).fit(Inputs.of(X, c), y)
    assert len(p.forest_.estimators_) == 7
    assert max(e.tree_.max_depth for e in p.forest_.estimators_) <= 3
    assert p.forest_.max_features == N_OUT  # 50 clipped to the 10 features
    assert p.forest_.min_samples_leaf == 5


# ----------------------------------------------------------------------- calibration


def test_isotonic_calibration_matches_sklearn(data):
    (X, y, c), (Xt, _, ct) = data
    p = small(view="pca10", calibration="isotonic").fit(Inputs.of(X, c), y)
    assert p.oof_proba_.shape == (300,)
    raw = p.predict_proba(Inputs.of(Xt, ct), calibrated=False)[:, 1]
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p.oof_proba_, y)
    np.testing.assert_allclose(p.predict_proba(Inputs.of(Xt, ct))[:, 1], iso.predict(raw), atol=1e-12)


def test_platt_calibration_matches_weighted_logistic_regression(data):
    (X, y, c), (Xt, _, ct) = data
    p = small(view="cosine", calibration="platt").fit(Inputs.of(X, c), y)
    oof = p.oof_proba_
    # reference: Platt's smoothed targets t as sample weights of duplicated rows, no penalty
    n_pos, n_neg = y.sum(), (~y).sum()
    t = np.where(y, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    lr = LogisticRegression(C=1e12, tol=1e-12, max_iter=10000)
    lr.fit(np.concatenate([oof, oof])[:, None], np.r_[np.ones(300), np.zeros(300)], sample_weight=np.r_[t, 1 - t])
    a, b = p.calibrator_.coef_, p.calibrator_.intercept_
    assert a == pytest.approx(lr.coef_[0, 0], rel=1e-4, abs=1e-4)
    assert b == pytest.approx(lr.intercept_[0], rel=1e-4, abs=1e-4)
    raw = p.predict_proba(Inputs.of(Xt, ct), calibrated=False)[:, 1]
    np.testing.assert_allclose(p.predict_proba(Inputs.of(Xt, ct))[:, 1], 1 / (1 + np.exp(-(a * raw + b))), atol=1e-14)


def test_stacked_calibration_is_a_logistic_on_out_of_fold_forest_and_confidence_logits(data):
    """Recompute the stacked probe by hand: out-of-fold forests on StratifiedKFold(cv) (PCA refitted
    per fold), then an unpenalised logistic regression on the two clipped logits."""
    from scipy.special import expit, logit
    from sklearn.model_selection import StratifiedKFold

    (X, y, c), (Xt, _, ct) = data
    p = small(view="pca10", calibration="stacked", cv=4).fit(Inputs.of(X, c), y)
    oof = np.empty(len(y))
    for tr, te in StratifiedKFold(4, shuffle=True, random_state=0).split(X, y):
        fold = small(view="pca10").fit(Inputs.of(X[tr], c[tr]), y[tr])
        oof[te] = fold.predict_proba(Inputs.of(X[te], c[te]))[:, 1]
    np.testing.assert_allclose(p.oof_proba_, oof, atol=1e-12)

    def feats(q, conf):
        return np.column_stack([logit(np.clip(q, 1e-3, 1 - 1e-3)), logit(np.clip(conf, 1e-6, 1 - 1e-6))])

    lr = LogisticRegression(C=np.inf, max_iter=10_000, tol=1e-10).fit(feats(oof, c), y)
    (w, v), b = p.calibrator_.coef_, p.calibrator_.intercept_
    np.testing.assert_allclose([w, v], lr.coef_[0], rtol=1e-4)
    np.testing.assert_allclose(b, lr.intercept_[0], rtol=1e-4, atol=1e-6)
    forest = p.predict_proba(Inputs.of(Xt, ct), calibrated=False)[:, 1]
    np.testing.assert_allclose(forest, small(view="pca10").fit(Inputs.of(X, c), y).predict_proba(Inputs.of(Xt, ct))[:, 1])
    np.testing.assert_allclose(p.predict_proba(Inputs.of(Xt, ct))[:, 1], expit(feats(forest, ct) @ [w, v] + b), atol=1e-12)
    assert w > 0 and v > 0  # both carry signal in this data


def test_out_of_bag_stacking_calibrates_on_each_records_trees_that_left_it_out(data):
    """oof='oob': the same trees as the plain probe; the stacker is fitted on each training
    record's mean P(correct) over the trees whose bootstrap sample (redrawn here from each tree's
    seed, as the forest drew it) did not contain it; a record no tree left out is left out."""
    from scipy.special import logit

    (X, y, c), (Xt, _, ct) = data
    n = len(y)

    def by_hand(probe):
        feats = probe._features(probe.featurizer_, Inputs.of(X, c))
        total, count = np.zeros(n), np.zeros(n)
        for tree in probe.forest_.estimators_:
            drawn = np.random.RandomState(tree.random_state).randint(0, n, n)
            out = np.setdiff1d(np.arange(n), drawn)
            total[out] += tree.predict_proba(feats[out])[:, 1]
            count[out] += 1
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    p = small(view="pca10", calibration="stacked", cv=4, oof="oob").fit(Inputs.of(X, c), y)
    plain = small(view="pca10").fit(Inputs.of(X, c), y)
    np.testing.assert_array_equal(p.predict_proba(Inputs.of(Xt, ct), calibrated=False), plain.predict_proba(Inputs.of(Xt, ct)))
    np.testing.assert_allclose(p.oof_proba_, by_hand(p), atol=1e-12)
    few = small(view="pca10", calibration="stacked", oof="oob", n_estimators=6).fit(Inputs.of(X, c), y)
    expected = by_hand(few)
    held = np.isfinite(expected)
    assert 0 < (~held).sum() < 40  # 6 trees: some records are in every bootstrap sample
    np.testing.assert_allclose(few.oof_proba_[held], expected[held], atol=1e-12)
    assert np.isnan(few.oof_proba_[~held]).all()

    def f(q, conf):
        return np.column_stack([logit(np.clip(q, 1e-3, 1 - 1e-3)), logit(np.clip(conf, 1e-6, 1 - 1e-6))])

    lr = LogisticRegression(C=np.inf, max_iter=10_000, tol=1e-10).fit(f(expected[held], c[held]), y[held])
    np.testing.assert_allclose(list(few.calibrator_.coef_), lr.coef_[0], rtol=1e-4)
    # the 5-fold default differs (other held-out probabilities), and a bad source is refused
    assert not np.allclose(small(view="pca10", calibration="stacked", cv=4).fit(Inputs.of(X, c), y).calibrator_.coef_[0],
                           p.calibrator_.coef_[0])
    with pytest.raises(ValueError, match="oof must be one of"):
        small(view="pca10", calibration="stacked", oof="bag").fit(Inputs.of(X, c), y)


def test_stacked_probe_needs_confidence_even_without_the_confidence_feature(data):
    (X, y, c), (Xt, _, ct) = data
    p = small(view="cosine", calibration="stacked", append_confidence=False).fit(Inputs.of(X, c), y)
    assert "raw_confidence" not in p.feature_names_
    with pytest.raises(ValueError, match="ActivationProbe.* reads the 'confidence' source, which these inputs lack"):
        p.predict_proba(Inputs.of(Xt))
    with pytest.raises(ValueError, match="ExportedProbe.* reads the 'confidence' source"):
        p.export().predict_proba(Inputs.of(Xt))


def test_stacked_probe_is_written_as_format_version_2(data, tmp_path):
    (X, y, c), _ = data
    stacked = small(view="cosine", calibration="stacked").fit(Inputs.of(X, c), y).save(tmp_path / "s")
    plain = small(view="cosine").fit(Inputs.of(X, c), y).save(tmp_path / "p")
    assert json.loads((stacked / "probe.json").read_text())["format_version"] == 2
    assert json.loads((plain / "probe.json").read_text())["format_version"] == 1
    assert load_file(str(stacked / "probe.safetensors"))["calibration.stacked"].shape == (3,)


# ---------------------------------------------------------------------------- export


@pytest.mark.parametrize("kw", [
    dict(view="pca10"),
    dict(view="pca10", calibration="platt"),
    dict(view="cosine", calibration="isotonic"),
    dict(view="cosine", max_depth=None),
    dict(view="mean", layer=2, append_confidence=False),
    dict(view="mid", calibration="platt"),
    dict(view="cosine", calibration="stacked", cv=5),
    dict(view="pca10", calibration="stacked", append_confidence=False),
    dict(view="mid", calibration="stacked"),
])
def test_export_matches_sklearn_forest(data, tmp_path, kw):
    (X, y, c), (Xt, _, ct) = data
    probe = small(**kw).fit(Inputs.of(X, c), y)
    feats = probe.export().features(Inputs.of(Xt, ct))
    ref_forest = probe.predict_proba(Inputs.of(Xt, ct), calibrated=False)[:, 1]
    arrays = forest_arrays(probe.forest_)
    assert np.abs(forest_proba(feats, arrays) - ref_forest).max() <= 1e-12
    assert np.abs(forest_proba(feats, arrays, chunk=7) - ref_forest).max() <= 1e-12
    ref = probe.predict_proba(Inputs.of(Xt, ct))
    assert np.abs(probe.export().predict_proba(Inputs.of(Xt, ct)) - ref).max() <= 1e-12
    loaded = load_probe(probe.save(tmp_path / "probe"))
    assert np.abs(loaded.predict_proba(Inputs.of(Xt, ct)) - ref).max() <= 1e-12
    assert loaded.feature_names == probe.feature_names_
    assert loaded.calibration == probe.calibration


def test_leaf_values_are_normalised_class1_probabilities(fitted):
    arrays = forest_arrays(fitted.forest_)
    tree = fitted.forest_.estimators_[0].tree_
    n0 = tree.node_count
    leaves = np.flatnonzero(tree.children_left == -1)
    # independent truth: a fitted tree's leaf proportions via its training-sample weights
    counts = tree.value[leaves, 0, :] * tree.weighted_n_node_samples[leaves, None]
    if np.allclose(tree.value[leaves].sum(axis=2), 1.0):  # fractions (recent scikit-learn)
        expected = counts[:, 1] / counts.sum(axis=1)
    else:  # counts (older scikit-learn)
        expected = tree.value[leaves, 0, 1] / tree.value[leaves, 0].sum(axis=1)
    np.testing.assert_allclose(arrays["trees.value"][:n0][leaves], expected, atol=1e-12)
    assert arrays["trees.offsets"][1] == n0 and arrays["trees.offsets"][-1] == len(arrays["trees.value"])


def test_save_load_round_trips_metadata(fitted, tmp_path, monkeypatch):
    out = fitted.save(tmp_path / "p", ModelIdentity(model="tiny-llama", model_fingerprint=FINGERPRINT),
                      training_summary={"task": "sciq"},
                      metrics={"smece": np.float64(0.05), "auroc": float("nan"), "n": np.int64(100)})
    assert sorted(x.name for x in out.iterdir()) == ["probe.json", "probe.safetensors"]

    def no_pickle(*a, **k):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    probe = load_probe(out)
    assert probe.model_name == "tiny-llama"
    assert probe.model_fingerprint == FINGERPRINT
    assert probe.training_summary["task"] == "sciq" and probe.training_summary["n_records"] == 300
    assert probe.metrics == {"smece": 0.05, "auroc": None, "n": 100}
    assert probe.view == "pca10" and probe.layers == list(range(N_OUT)) and probe.append_confidence
    man = json.loads((out / "probe.json").read_text())
    assert man["format"] == "acute-probe" and man["format_version"] == 1
    assert man["forest"]["n_estimators"] == 30 and man["forest"]["max_depth"] == 20
    assert man["forest"]["max_features"] == 10 and man["input"] == {"n_layer_outputs": N_OUT, "hidden_size": D}
    assert man["arrays"]["pca.components"]["shape"] == [N_OUT, 10, D]
    import acute

    assert man["acute_version"] == acute.__version__
    import hashlib

    assert man["files"]["probe.safetensors"]["sha256"] == hashlib.sha256(
        (out / "probe.safetensors").read_bytes()).hexdigest()
    arrays = load_file(str(out / "probe.safetensors"))
    np.testing.assert_array_equal(arrays["pca.means"], fitted.featurizer_.means_)
    np.testing.assert_array_equal(arrays["pca.components"], fitted.featurizer_.components_)


def _model(**fingerprint) -> ModelIdentity:
    return ModelIdentity(model_fingerprint=fingerprint)


def test_check_model(fitted, tmp_path):
    probe = load_probe(fitted.save(tmp_path / "p", ModelIdentity(model_fingerprint=FINGERPRINT)))
    probe.check_model(_model(**FINGERPRINT, extra="ignored"))
    probe.check_model(_model(**{k: v for k, v in FINGERPRINT.items() if k != "vocab_size"}))
    for key, val in [("architecture", "Qwen2ForCausalLM"), ("num_layers", 30), ("hidden_size", 576)]:
        with pytest.raises(ModelMismatchError, match=key):
            probe.check_model(_model(**dict(FINGERPRINT, **{key: val})))
    with pytest.raises(ModelMismatchError, match="architecture"):
        probe.check_model(_model(num_layers=9, hidden_size=12))
    # a fingerprint that disagrees with the fitted shape cannot be saved with the probe
    with pytest.raises(ModelMismatchError, match="'num_layers': the probe's input 9, model_fingerprint 30"):
        fitted.save(tmp_path / "q", _model(**dict(FINGERPRINT, num_layers=30)))
    with pytest.raises(ModelMismatchError, match="'hidden_size': the probe's input 12, model_fingerprint 576"):
        fitted.save(tmp_path / "q", _model(**dict(FINGERPRINT, hidden_size=576)))
    assert not (tmp_path / "q").exists()
    # without a saved fingerprint the input shape is still checked
    bare = load_probe(fitted.save(tmp_path / "bare"))
    bare.check_model(_model(**FINGERPRINT))
    with pytest.raises(ModelMismatchError):
        bare.check_model(_model(**dict(FINGERPRINT, num_layers=30)))


# ---------------------------------------------------------------- damaged probe dirs


@pytest.fixture()
def saved(fitted, tmp_path):
    return fitted.save(tmp_path / "probe")


def test_missing_files(saved):
    (saved / "probe.json").unlink()
    with pytest.raises(FileNotFoundError, match="probe.json"):
        load_probe(saved)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_probe(saved.parent / "nope")


def test_missing_arrays_file(saved):
    (saved / "probe.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="probe.safetensors"):
        load_probe(saved)


def test_truncated_and_tampered_arrays(saved):
    path = saved / "probe.safetensors"
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ProbeFormatError, match=r"probe.safetensors.*sha256"):
        load_probe(saved)
    tampered = bytearray(blob)
    tampered[-9] ^= 0x01
    path.write_bytes(bytes(tampered))
    with pytest.raises(ProbeFormatError, match=r"probe.safetensors.*sha256"):
        load_probe(saved)
    path.write_bytes(blob)
    load_probe(saved)  # intact again


def _rewrite(saved, mutate_arrays=None, mutate_manifest=None):
    """Rewrite a probe with consistent sha256 (so structural checks are what is tested)."""
    import hashlib

    arrays = load_file(str(saved / "probe.safetensors"))
    man = json.loads((saved / "probe.json").read_text())
    if mutate_arrays:
        mutate_arrays(arrays)
        man["arrays"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()}
    save_file(arrays, str(saved / "probe.safetensors"))
    man["files"]["probe.safetensors"]["sha256"] = hashlib.sha256((saved / "probe.safetensors").read_bytes()).hexdigest()
    if mutate_manifest:
        mutate_manifest(man)
    (saved / "probe.json").write_text(json.dumps(man))


def test_structurally_bad_arrays_are_rejected(saved):
    def cycle(a):
        a["trees.children_left"][0] = 0  # the root points to itself

    _rewrite(saved, cycle)
    with pytest.raises(ProbeFormatError, match="child index"):
        load_probe(saved)


def test_bad_pca_shape_rejected(saved):
    _rewrite(saved, lambda a: a.update({"pca.components": a["pca.components"][:, :5].copy()}))
    with pytest.raises(ProbeFormatError, match="feature"):
        load_probe(saved)


def test_array_shape_differs_from_manifest(saved):
    def shrink(man):
        man["arrays"]["layers"]["shape"] = [3]

    _rewrite(saved, mutate_manifest=shrink)
    with pytest.raises(ProbeFormatError, match=r"probe.safetensors.*'layers'"):
        load_probe(saved)


def test_bad_manifest(saved):
    (saved / "probe.json").write_text("{not json")
    with pytest.raises(ProbeFormatError, match=r"probe.json.*JSON"):
        load_probe(saved)
    (saved / "probe.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ProbeFormatError, match="probe.json"):
        load_probe(saved)


def test_feature_names_inconsistent(saved):
    _rewrite(saved, mutate_manifest=lambda m: m["feature_names"].pop())
    with pytest.raises(ProbeFormatError, match="feature names"):
        load_probe(saved)


# ---------------------------------------------------------------------- atomic save


def test_save_is_atomic_and_refuses_foreign_dirs(fitted, data, tmp_path, monkeypatch):
    (_, _, _), (Xt, _, ct) = data
    target = tmp_path / "probe"
    fitted.save(target)
    # overwriting a probe directory replaces it
    X, y, c = data[0]
    other = small(view="cosine").fit(Inputs.of(X, c), y)
    other.save(target)
    assert load_probe(target).view == "cosine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe"]  # no temp leftovers
    # a crash while writing leaves the old probe intact and no temp directory
    import acute.estimators.probe_format as probes_mod  # where the probe folder is written

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(probes_mod.json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        fitted.save(target)
    with pytest.raises(OSError):
        fitted.save(tmp_path / "fresh")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe"]
    np.testing.assert_array_equal(load_probe(target).predict_proba(Inputs.of(Xt, ct)), other.predict_proba(Inputs.of(Xt, ct)))
    # refuse to overwrite a directory that is not a probe, or a file
    foreign = tmp_path / "results"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an acute probe directory"):
        fitted.save(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        fitted.save(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_probe(fitted.save(empty)).view == "pca10"


# ------------------------------------------------------------------------ bad inputs


def test_bad_inputs(data):
    (X, y, c), (Xt, _, ct) = data
    bad = X.copy()
    bad[3, 2, 1] = np.nan
    with pytest.raises(ValueError, match=r"states.*row 3"):
        small().fit(Inputs.of(bad, c), y)
    badc = c.copy()
    badc[11] = np.inf
    with pytest.raises(ValueError, match=r"confidence.*row 11"):
        small().fit(Inputs.of(X, badc), y)
    with pytest.raises(ValueError, match="reads the 'confidence' source"):
        small().fit(Inputs.of(X), y)
    with pytest.raises(ValueError, match="reads an acute.estimators.inputs.Inputs of named sources, got ndarray"):
        small().fit(X, y)
    with pytest.raises(ValueError, match="all records are correct.*needs both"):
        small().fit(Inputs.of(X, c), np.ones(300, dtype=bool))
    with pytest.raises(ValueError, match="all records are wrong"):
        small().fit(Inputs.of(X, c), np.zeros(300))
    with pytest.raises(ValueError, match="fewer than the cv=3 folds"):
        small(view="cosine").fit(Inputs.of(X[:2], c[:2]), np.array([0, 1]))
    yy = np.zeros(300, dtype=int)
    yy[:2] = 1
    with pytest.raises(ValueError, match="cv=3 needs at least 3 correct"):
        small(view="cosine", calibration="platt").fit(Inputs.of(X, c), yy)
    with pytest.raises(ValueError, match=r"layer=40.*10 layer outputs"):
        small(view="mean", layer=40).fit(Inputs.of(X, c), y)
    with pytest.raises(ValueError, match="needs at least 3 decoder layers"):
        small(view="late").fit(Inputs.of(X[:, :3], c), y)
    with pytest.raises(ValueError, match="unknown view"):
        small(view="pca30").fit(Inputs.of(X, c), y)
    with pytest.raises(ValueError, match="calibration must be"):
        small(calibration="beta").fit(Inputs.of(X, c), y)
    with pytest.raises(ValueError, match="needs layer"):
        small(view="mean").fit(Inputs.of(X, c), y)
    with pytest.raises(ValueError, match=r"n_components=10.*min\(8, 12\)"):
        small(view="pca10").fit(Inputs.of(X[:8], c[:8]), y[:8].copy())


def test_bad_inputs_at_predict(fitted, data, tmp_path):
    _, (Xt, _, ct) = data
    exported = load_probe(fitted.save(tmp_path / "p"))
    bad = Xt.copy()
    bad[5, 0, 0] = np.inf
    for model in (fitted, exported):
        with pytest.raises(ValueError, match=r"states.*row 5"):
            model.predict_proba(Inputs.of(bad, ct))
        with pytest.raises(ValueError, match="reads the 'confidence' source"):
            model.predict_proba(Inputs.of(Xt))
        with pytest.raises(ValueError, match=r"\[n, 9, 12\]"):
            model.predict_proba(Inputs.of(Xt[:, :9], ct))
    assert isinstance(exported, ExportedProbe)


def test_saved_probe_is_readable_by_others_not_private(fitted, tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    try:
        out = fitted.save(tmp_path / "p", ModelIdentity(model_fingerprint=FINGERPRINT))
    finally:
        os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()} == {0o644}

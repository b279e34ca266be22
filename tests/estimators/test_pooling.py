"""Pooling specs, probes that read other pooled states than the mean, and their export."""

from types import SimpleNamespace

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute.evaluation.crossval import fit_predict, inputs_for
from acute.errors import InputError, UnknownEstimatorError
from acute.estimators import make_estimator
from acute.estimators.registry import estimator_group, estimator_pooling, is_estimator
from acute.estimators.features import cosine_to_last
from acute.store import ModelIdentity
from acute.store.pooling import Concatenated, generation_states, parse_pooling, store_states
from acute.estimators.probe_file import load_probe
from acute.estimators import ActivationProbe

N, N_OUT, D = 160, 5, 8


def _data(seed=0):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(N, N_OUT, D)).astype(np.float32)
    last = rng.normal(size=(N, N_OUT, D)).astype(np.float32)
    y = (last[:, 2, 0] + 0.3 * rng.normal(size=N) > 0).astype(int)  # the signal sits in "last"
    conf = np.clip(rng.uniform(size=N), 0.01, 0.99)
    return mean, last, y, conf


def test_parse_pooling_accepts_single_and_joined_specs_and_names_bad_ones():
    assert parse_pooling("mean") == ("mean",)
    assert parse_pooling("mean+last-answer") == ("mean", "last-answer")
    for bad, words in (("median", "unknown pooling 'median'"), ("mean+mean", "twice"), ("", "non-empty"),
                       (None, "non-empty")):
        with pytest.raises(InputError, match=words):
            parse_pooling(bad)


def test_block_cosine_is_the_cosine_of_each_state_side_by_side():
    mean, last, _, _ = _data()
    joint = cosine_to_last(np.concatenate([mean, last], axis=-1), blocks=2)
    assert joint.shape == (N, 2 * (N_OUT - 1))
    np.testing.assert_allclose(joint, np.hstack([cosine_to_last(mean), cosine_to_last(last)]), atol=1e-12)
    # by hand for one record and layer
    a, b = last[3, 1].astype(float), last[3, -1].astype(float)
    assert joint[3, N_OUT - 1 + 1] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    with pytest.raises(InputError, match="does not split into 3"):
        cosine_to_last(mean, blocks=3)


def test_estimator_names_take_a_pooling_suffix():
    est = make_estimator("acute-cosine-stacked@last-answer")
    assert est.get_params()["pooling"] == "last-answer" and est.get_params()["calibration"] == "stacked"
    assert estimator_group("acute-pca10@mean+last-prompt") == "acute"
    assert estimator_pooling("platt") is None and estimator_pooling("acute-cosine") == "mean"
    assert estimator_pooling("acute-cosine@last-prompt") == "last-prompt"
    assert is_estimator("acute-cosine@last-answer") and not is_estimator("acute-cosine@median")
    with pytest.raises(UnknownEstimatorError, match="only the probes"):
        make_estimator("platt@last-answer")
    with pytest.raises(InputError, match="unknown pooling"):
        make_estimator("acute-cosine@median")
    with pytest.raises(InputError, match="fixed by the estimator name"):
        make_estimator("acute-cosine", probe_params={"pooling": "last-answer"})


def test_fit_predict_feeds_each_probe_its_own_pooling():
    mean, last, y, conf = _data()
    tr, te = np.arange(120), np.arange(120, N)
    X = Inputs({"states@mean": mean, "states@last-answer": last, "confidence": conf})
    names = ["platt", "acute-cosine@last-answer", "acute-cosine-stacked@last-answer", "acute-cosine"]
    kw = dict(probe_params={"n_estimators": 20})
    got = fit_predict(names, X.take(tr), y[tr], X.take(te), **kw)
    direct = ActivationProbe(view="cosine", n_estimators=20, pooling="last-answer").fit(
        Inputs.of(last[tr], conf[tr], pooling="last-answer"), y[tr])
    np.testing.assert_allclose(got["acute-cosine@last-answer"],
                               direct.predict_proba(Inputs.of(last[te], conf[te], pooling="last-answer"))[:, 1])
    on_mean = ActivationProbe(view="cosine", n_estimators=20).fit(Inputs.of(mean[tr], conf[tr]), y[tr])
    np.testing.assert_allclose(got["acute-cosine"], on_mean.predict_proba(Inputs.of(mean[te], conf[te]))[:, 1])
    with pytest.raises(InputError, match="reads the 'states@last-answer' source"):
        fit_predict(["acute-cosine@last-answer"], Inputs.of(mean[tr], conf[tr]), y[tr], Inputs.of(mean[te], conf[te]), **kw)


def test_inputs_for_reads_what_the_named_estimators_need():
    mean, last, _, _ = _data()

    class FakeStore:
        layer_means = mean
        raw_confidence = np.full(N, 0.5)
        ids = list(range(N))

        def states(self, pooling):
            if pooling not in ("mean", "last-answer"):
                raise InputError(f"no {pooling} states")
            return mean if pooling == "mean" else last

    store = FakeStore()
    assert inputs_for(store, ["platt"]).sources == ("confidence",)
    np.testing.assert_array_equal(inputs_for(store, ["platt", "acute-cosine"])["states@mean"], mean)
    got = inputs_for(store, ["acute-cosine", "acute-pca10@mean+last-answer"])
    assert set(got.sources) == {"states@mean", "confidence", "states@mean+last-answer"}
    np.testing.assert_array_equal(got["states@mean+last-answer"], np.concatenate([mean, last], axis=-1))
    joint = store_states(store, "mean+last-answer")
    assert isinstance(joint, Concatenated) and joint.shape == (N, N_OUT, 2 * D)
    np.testing.assert_array_equal(joint[[4, 1]], np.concatenate([mean[[4, 1]], last[[4, 1]]], axis=-1))
    with pytest.raises(InputError, match="no last-prompt states"):
        store_states(store, "last-prompt")


def test_generation_states_concatenate_in_spec_order_and_name_what_is_missing():
    mean, last, _, _ = _data()
    gens = [SimpleNamespace(layer_means=mean[i], last_prompt=None, last_answer=last[i]) for i in range(3)]
    got = generation_states(gens, "last-answer+mean")
    np.testing.assert_array_equal(got, np.concatenate([last[:3], mean[:3]], axis=-1))
    with pytest.raises(InputError, match="no last-prompt states"):
        generation_states(gens, "last-prompt")


@pytest.mark.parametrize("view", ["cosine", "pca10", "mean"])
def test_a_joint_pooling_probe_exports_and_scores_equal_in_numpy(tmp_path, view):
    mean, last, y, conf = _data(1)
    X = np.concatenate([mean, last], axis=-1)
    probe = ActivationProbe(view=view, layer=2 if view == "mean" else None, n_estimators=15,
                            calibration="stacked", cv=3, pooling="mean+last-answer").fit(
                                Inputs.of(X, conf, pooling="mean+last-answer"), y)
    out = probe.save(tmp_path / "p", ModelIdentity(model_fingerprint={"num_layers": N_OUT - 1, "hidden_size": D}))
    loaded = load_probe(out)
    assert loaded.pooling == "mean+last-answer" and loaded.manifest["format_version"] == 3
    assert loaded.manifest["input"] == {"n_layer_outputs": N_OUT, "hidden_size": D, "pooling": "mean+last-answer"}
    joint = Inputs.of(X, conf, pooling="mean+last-answer")
    np.testing.assert_allclose(loaded.predict_proba(joint), probe.predict_proba(joint), atol=1e-12)
    with pytest.raises(InputError, match=r"expects \[n, 5, 16\] \(pooling 'mean\+last-answer'\)"):
        loaded.predict_proba(Inputs.of(mean, conf, pooling="mean+last-answer"))


def test_a_mean_probe_keeps_its_old_format():
    mean, _, y, conf = _data()
    probe = ActivationProbe(view="cosine", n_estimators=10).fit(Inputs.of(mean, conf), y)
    exported = probe.export()
    assert exported.manifest["format_version"] == 1 and "pooling" not in exported.manifest["input"]
    assert exported.pooling == "mean"

"""The label-free drift signal (acute.metrics.drift, acute.serving.monitoring.DriftWindow) and the
confidence reference a probe file keeps: the distance checked against scipy's two-sample KS
statistic on the samples the reference was made from, the probe file round trip (and an older
probe without a reference), and one log line per crossing of the threshold."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from scipy.stats import ks_2samp

from acute.estimators.inputs import Inputs
from acute.errors import ProbeFormatError
from acute.estimators import ActivationProbe, load_probe
from acute.metrics.drift import REFERENCE_QUANTILES, check_reference, confidence_reference, drift_statistic


@pytest.mark.parametrize("decimals", [None, 1, 2])  # continuous, and the few values a forest gives
@pytest.mark.parametrize("shift", [0.0, 0.5, 1.5])
def test_distance_is_the_two_sample_ks_statistic_within_a_percentile(decimals, shift):
    rng = np.random.default_rng(int(10 * shift) + (decimals or 0))
    calibration, live = rng.beta(2, 2, 800), rng.beta(2, 2 + shift, 500)
    if decimals is not None:
        calibration, live = np.round(calibration, decimals), np.round(live, decimals)
    got = drift_statistic(live, confidence_reference(calibration, "out-of-fold"))
    assert abs(got - ks_2samp(calibration, live).statistic) <= 0.01 + 1e-12


def test_distance_extremes_and_reference_fields():
    ref = confidence_reference(np.full(7, 0.5), "held-out")
    assert ref["n"] == 7 and ref["source"] == "held-out" and ref["quantiles"] == [0.5] * REFERENCE_QUANTILES
    assert drift_statistic([0.5, 0.5], ref) == 0.0  # all mass at one point on both sides
    assert drift_statistic([0.9], ref) == 1.0
    sample = np.linspace(0, 1, 1001)
    np.testing.assert_allclose(confidence_reference(sample, "out-of-fold")["quantiles"],
                               np.linspace(0, 1, REFERENCE_QUANTILES), atol=1e-12)


@pytest.mark.parametrize("entry, message", [
    ([0.1], "must be an object"),
    ({"quantiles": [0.5] * 100, "n": 3, "source": "held-out"}, "101 non-decreasing"),
    ({"quantiles": [0.6] + [0.5] * 100, "n": 3, "source": "held-out"}, "101 non-decreasing"),
    ({"quantiles": [0.5] * 100 + [1.5], "n": 3, "source": "held-out"}, "101 non-decreasing"),
    ({"quantiles": [0.5] * 101, "n": 0, "source": "held-out"}, "n must be an integer >= 1"),
    ({"quantiles": [0.5] * 101, "n": 3, "source": "guess"}, "source must be one of"),
])
def test_a_malformed_reference_is_refused_naming_the_file(entry, message):
    with pytest.raises(ProbeFormatError, match=message) as e:
        check_reference(entry, "p/probe.json")
    assert str(e.value).startswith("p/probe.json: ")


def test_probe_file_keeps_the_reference_and_an_older_probe_has_none(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3, 8)).astype(np.float32), rng.integers(0, 2, 40)
    probe = ActivationProbe(view="cosine", n_estimators=3).fit(Inputs.of(X, rng.uniform(size=40)), y)
    ref = confidence_reference(rng.uniform(size=50), "out-of-fold")
    probe.save(tmp_path / "new", confidence_reference=ref)
    assert load_probe(tmp_path / "new").confidence_reference == ref
    probe.save(tmp_path / "old")  # what every probe written before this change looks like
    assert "confidence_reference" not in json.loads((tmp_path / "old" / "probe.json").read_text())
    assert load_probe(tmp_path / "old").confidence_reference is None


def test_window_reports_once_full_and_logs_each_crossing_once(caplog):
    from acute.serving.monitoring import DriftWindow

    ref = confidence_reference(np.linspace(0.0, 0.5, 200), "out-of-fold")
    window = DriftWindow(ref, window=4, threshold=0.3)
    assert window.add([0.1, 0.2, 0.3]) is None  # not full yet
    with caplog.at_level(logging.INFO, logger="acute.serving.monitoring"):
        assert window.add([0.4]) == pytest.approx(0.2, abs=0.011)  # {.1,.2,.3,.4} against U(0, .5)
        assert not caplog.records
        assert window.add([0.9, 0.9, 0.9, 0.9]) == 1.0
        assert window.add([0.95]) == 1.0  # still above: no second warning
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "1.000" in warnings[0].getMessage() and "0.3" in warnings[0].getMessage()
        window.add([0.1, 0.2, 0.3, 0.4])  # back below
        assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
        window.add([0.9] * 4)
        assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO, logging.WARNING]
    assert DriftWindow(None, 4, 0.3).add([0.9] * 10) is None


def _store(path, n=200, seed=0):
    """``n`` labelled synthetic records whose dimension 0 and raw confidence carry the label."""
    from acute.store import StoreWriter, open_store

    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < 0.6
    states = rng.normal(size=(n, 4, 12))
    states[:, :, 0] += 2 * y[:, None] - 1
    raw = 1 / (1 + np.exp(-(2 * y - 1) - rng.normal(size=n)))
    manifest = {"model": "tiny", "model_fingerprint": {"architecture": "LlamaForCausalLM", "num_layers": 3,
                                                       "hidden_size": 12}, "task": "default"}
    with StoreWriter(path, manifest, dtype="float32") as w:
        w.add([{"id": f"q{i}", "correct": bool(y[i])} for i in range(n)], states,
              [np.array([np.log(r)]) for r in raw])
    return open_store(path)


def test_export_keeps_the_confidences_the_probe_gave_records_it_was_not_fitted_on(tmp_path):
    """The certificate's calibration records (out of fold), else the held-out records, else none;
    each checked against predictions computed here."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold

    from acute.evaluation.training import train_probe
    from acute.evaluation.crossval import split_ids

    store = _store(tmp_path / "s")
    X, y, raw = np.asarray(store.layer_means, dtype=np.float32), store.correct, store.raw_confidence
    certified = train_probe(store, view="pca10", n_estimators=10, max_error=0.2, delta=0.2,
                            certify_backend="binomial")
    oof = np.empty(len(y))
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        est = clone(certified.probe).fit(Inputs.of(X[tr], raw[tr]), y[tr])
        oof[te] = est.predict_proba(Inputs.of(X[te], raw[te]))[:, 1]
    assert certified.confidence_reference == confidence_reference(oof, "out-of-fold")
    certified.save(tmp_path / "p")
    assert load_probe(tmp_path / "p").confidence_reference == certified.confidence_reference

    held = train_probe(store, view="pca10", n_estimators=10, test_fraction=0.3)
    test = split_ids(store.ids, test_fraction=0.3, seed=0)[1]
    conf = held.probe.predict_proba(Inputs.of(X[test], raw[test]))[:, 1]
    assert held.confidence_reference == confidence_reference(conf, "held-out")
    assert train_probe(store, view="pca10", n_estimators=10).confidence_reference is None

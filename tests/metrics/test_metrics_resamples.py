"""Tests for acute.metrics.metric_over_resamples: the batched metrics equal the scalar metric
called once per resample, and the protocol study's gap cells are unchanged by it."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest

from acute import metrics as M
from acute.protocol import analysis
from acute.protocol.analysis import gap_cells
from acute.protocol.settings import CONTEXTS, PROVENANCES

FAST = {
    "ece": M.ece,
    "kde_ece": M.kde_ece,
    "ks_cal": M.ks_cal,
    "smece": M.smece,
    "brier": M.brier,
    "nll": M.nll,
    "auroc": M.auroc,
    "auc_euro_low": M.METRICS["auc_euro_low"].fn,
    "auc_euro_all": M.METRICS["auc_euro_all"].fn,
}
SIZES = (1, 2, 7, 40, 300)
KINDS = ("plain", "ends_and_ties", "two_values", "constant", "all_correct", "all_wrong")


def _case(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, correct, resample indices) of one kind of data."""
    rng = np.random.default_rng(seed)
    conf = rng.beta(0.7, 0.7, n)
    if kind == "ends_and_ties":  # exact 0 and 1, values shared by many records
        conf = np.round(conf, 1)
        conf[rng.random(n) < 0.15] = 0.0
        conf[rng.random(n) < 0.15] = 1.0
    elif kind == "two_values":  # resamples repeat as multisets
        conf = np.where(rng.random(n) < 0.5, 0.3, 0.85)
    elif kind == "constant":
        conf = np.full(n, conf[0])
    correct = rng.random(n) < conf
    if kind == "all_correct":
        correct[:] = True
    elif kind == "all_wrong":
        correct[:] = False
    indices = M.bootstrap_indices(n, 12 if n == 300 else 30, seed)
    return conf, correct, indices


def _loop(metric, conf: np.ndarray, correct: np.ndarray, indices: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.array([metric(conf[i], correct[i]) for i in indices], dtype=np.float64)


def _batched(metric, conf: np.ndarray, correct: np.ndarray, indices: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return M.metric_over_resamples(metric, conf, correct, indices)


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", KINDS)
def test_batched_metric_equals_scalar_loop(name, n, kind):
    seed = 1000 * SIZES.index(n) + KINDS.index(kind)
    conf, correct, indices = _case(kind, n, seed)
    got = _batched(FAST[name], conf, correct, indices)
    ref = _loop(FAST[name], conf, correct, indices)
    assert got.dtype == np.float64 and got.shape == (indices.shape[0],)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)  # nan where the loop gives nan


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_metric_on_more_seeds(name, seed):
    conf, correct, indices = _case("plain", 60, seed)
    np.testing.assert_allclose(_batched(FAST[name], conf, correct, indices),
                               _loop(FAST[name], conf, correct, indices), rtol=0, atol=1e-12)


def test_smece_bisection_takes_the_scalar_decisions(monkeypatch):
    """With every value recomputed exactly (as near-ties are), the result is bit-for-bit the
    scalar one; the cheaper smoothing alone differs from it by rounding only."""
    conf, correct, indices = _case("plain", 40, 7)
    ref = _loop(M.smece, conf, correct, indices)
    fast = _batched(M.smece, conf, correct, indices)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-12)
    monkeypatch.setattr(M.smooth, "_SMECE_TIE", math.inf)
    np.testing.assert_array_equal(_batched(M.smece, conf, correct, indices), ref)


def test_many_resamples_are_evaluated_in_blocks():
    conf, correct, _ = _case("ends_and_ties", 5, 11)
    indices = M.bootstrap_indices(5, 2500, 11)  # more than one block
    for metric in (M.ece, M.ks_cal, M.auroc):
        np.testing.assert_allclose(_batched(metric, conf, correct, indices),
                                   _loop(metric, conf, correct, indices), rtol=0, atol=1e-12)
    assert M.resampling._block_rows(5) == 1024 and M.resampling._block_rows(5000) < 1024


def test_resamples_of_another_size_and_no_resamples():
    conf, correct, _ = _case("plain", 30, 5)
    indices = np.random.default_rng(5).integers(0, 30, size=(20, 8))
    for metric in FAST.values():
        np.testing.assert_allclose(_batched(metric, conf, correct, indices),
                                   _loop(metric, conf, correct, indices), rtol=0, atol=1e-12)
    empty = M.metric_over_resamples(M.smece, conf, correct, np.zeros((0, 30), dtype=np.int64))
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_auroc_single_class_resamples_give_nan_with_one_warning():
    conf = np.array([0.2, 0.9, 0.6])
    correct = np.array([True, False, True])
    indices = np.array([[0, 0, 2], [0, 1, 2], [1, 1, 1]])
    with pytest.warns(RuntimeWarning, match="2 of 3 resamples") as caught:
        got = M.metric_over_resamples(M.auroc, conf, correct, indices)
    assert len(caught) == 1
    np.testing.assert_array_equal(np.isnan(got), [True, False, True])
    assert got[1] == M.auroc(conf[[0, 1, 2]], correct[[0, 1, 2]])


def test_other_callables_fall_back_to_the_loop():
    conf, correct, indices = _case("ends_and_ties", 40, 3)
    calls = []

    def mean_gap(c, y):
        calls.append(c.shape)
        return float(np.mean(c) - np.mean(y))

    got = M.metric_over_resamples(mean_gap, conf, correct, indices)
    assert len(calls) == indices.shape[0]
    np.testing.assert_array_equal(got, _loop(mean_gap, conf, correct, indices))
    ece15 = functools.partial(M.ece, n_bins=15)
    np.testing.assert_array_equal(M.metric_over_resamples(ece15, conf, correct, indices),
                                  _loop(ece15, conf, correct, indices))


@pytest.mark.parametrize(
    "conf, correct, match",
    [
        ([], [], "confidence: is empty"),
        ([0.5, float("nan")], [1, 0], "confidence: contains NaN"),
        ([0.5, 1.5], [1, 0], "confidence: values must lie in"),
        ([0.5, 0.2], [1, 2], "correct: labels must be 0/1"),
        ([0.5, 0.2], [1, 0, 1], "same length"),
        ([[0.5, 0.2]], [1, 0], "confidence: expected a 1-D array"),
    ],
)
def test_inputs_are_validated_like_the_scalar_metrics(conf, correct, match):
    with pytest.raises(ValueError, match=match):
        M.brier(conf, correct)
    with pytest.raises(ValueError, match=match):
        M.metric_over_resamples(M.brier, conf, correct, [[0]])


@pytest.mark.parametrize(
    "indices, match",
    [([0, 1], "2-D integer array"), ([[0.0, 1.0]], "2-D integer array"),
     (np.zeros((2, 0), dtype=int), "2-D integer array"), ([[0, 3]], r"in \[0, 3\)"),
     ([[-1, 0]], r"in \[0, 3\)")],
)
def test_bad_indices_are_refused(indices, match):
    with pytest.raises(ValueError, match=match):
        M.metric_over_resamples(M.smece, [0.1, 0.5, 0.9], [0, 1, 1], indices)


# --------------------------------------------------------------------------------------------
# the protocol study's gap cells
# --------------------------------------------------------------------------------------------


def _record(rng: np.random.Generator, rid: int) -> dict:
    """A per-record dict as run_protocol stores it (see tests/protocol/test_protocol.py), with random
    verbalized confidences (ties, 0 and 1 included) and token log-probs."""
    answers = {p: f"{p}-{rid}" for p in PROVENANCES}
    verbal, token = {}, {}
    for p in PROVENANCES:
        status = "parse_failure" if rng.random() < 0.08 else "ok"
        c_verb = float(rng.choice([0.0, 0.2, 0.5, 0.7, 0.9, 1.0])) if status == "ok" else None
        verbal[p] = {"status": status, "c_verb": c_verb, "raw": str(c_verb)}
        token[p] = {}
        for c in CONTEXTS:
            bad = rng.random() < 0.04
            logprobs = None if bad else list(np.log(rng.uniform(0.05, 1.0, rng.integers(1, 4))))
            token[p][c] = {"status": "empty_span" if bad else "ok", "logprobs": logprobs}
    return {"id": f"r{rid}", "status": "ok", "correct": bool(rng.random() < 0.6),
            "answers": answers, "verbal": verbal, "token": token}


def _loop_stats(metric, conf: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The per-resample loop that analysis._metric_stats replaced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.array([metric(conf[i], y[i]) for i in idx], dtype=np.float64)


def test_gap_cells_equal_those_of_the_per_resample_loop(monkeypatch):
    rng = np.random.default_rng(2024)
    records = [_record(rng, i) for i in range(14)]
    cells = gap_cells(records, n_bootstrap=60, seed=3)
    monkeypatch.setattr(analysis, "_metric_stats", _loop_stats)
    reference = gap_cells(records, n_bootstrap=60, seed=3)
    assert len(cells) == len(reference) > 0
    assert any(c["status"] == "ok" for c in cells)
    for got, ref in zip(cells, reference):
        assert got.keys() == ref.keys()
        for key, value in ref.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=0, abs=1e-12), key
            else:
                assert got[key] == value, key


# ------------------------------------------------------------------------------------------
# Every bootstrap in acute goes through metric_over_resamples: the intervals equal the loop's
# ------------------------------------------------------------------------------------------


def test_bootstrap_and_paired_bootstrap_equal_the_loop_over_published_indices():
    rng = np.random.default_rng(11)
    conf = rng.beta(2, 2, 90)
    other = np.clip(conf + rng.normal(0, 0.1, conf.size), 0, 1)
    correct = rng.random(conf.size) < conf
    idx = M.bootstrap_indices(conf.size, n=120, seed=4)
    for metric in (M.smece, M.kde_ece, M.ece):
        stats = _loop(metric, conf, correct, idx)
        iv = M.bootstrap(metric, conf, correct, n=120, seed=4)
        assert (iv.low, iv.high) == pytest.approx(tuple(np.percentile(stats, [2.5, 97.5])), abs=1e-12)
        diffs = stats - _loop(metric, other, correct, idx)
        pv = M.paired_bootstrap(metric, conf, other, correct, n=120, seed=4)
        assert pv.estimate == pytest.approx(metric(conf, correct) - metric(other, correct), abs=1e-15)
        assert (pv.low, pv.high) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])), abs=1e-12)


def test_cv_metric_draws_equal_cv_metric_on_each_resample():
    from acute.evaluation.crossval import cv_metric, cv_metric_draws

    rng = np.random.default_rng(5)
    y = rng.random(9) < 0.5  # 9 records: some resamples hold one class only
    y[:2] = [True, False]
    preds = rng.beta(2, 2, (3, 9))  # three repeats
    idx = M.bootstrap_indices(9, 200, seed=1)
    assert any(y[i].all() or not y[i].any() for i in idx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for metric in (M.smece, M.brier, M.auroc, M.METRICS["auc_euro_all"].fn):
            got = cv_metric_draws(metric, preds, y, idx)
            want = np.array([cv_metric(metric, preds, y, i) for i in idx])
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=metric.__name__)
            assert np.isnan(got).sum() == (np.isnan(want).sum() if metric is M.auroc else 0)


def test_evaluate_intervals_equal_those_of_the_per_resample_loop(monkeypatch):
    import acute.evaluation.crossval as crossval
    from acute.evaluation import evaluate_predictions

    rng = np.random.default_rng(8)
    y = rng.random(150) < 0.6
    confs = {"platt": rng.beta(3, 2, (2, 150)), "acute-cosine": np.clip(0.3 + 0.5 * y + rng.normal(0, 0.2, (2, 150)), 0, 1)}
    rows = evaluate_predictions(confs, y, n_bootstrap=80, seed=2)

    def loop(metric, predictions, correct, index):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.array([crossval.cv_metric(metric, predictions, correct, i) for i in index])

    monkeypatch.setattr(crossval, "cv_metric_draws", loop)
    reference = evaluate_predictions(confs, y, n_bootstrap=80, seed=2)
    assert any(k.endswith("_ci_low") for k in rows[0]) and "diff_smece_ci_low" in rows[1]
    for got, ref in zip(rows, reference):
        assert got.keys() == ref.keys()
        for key, value in ref.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=0, abs=1e-12, nan_ok=True), key

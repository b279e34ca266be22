"""acute.evaluation.transfer on synthetic stores: cells against direct fits, raw rows against the metric
computed directly, subject folds that hold out whole subjects, and the markdown tables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute import metrics
from acute.estimators import DEFAULT_ESTIMATOR, make_estimator
from acute.evaluation.transfer import (REFERENCE, leave_subjects_out, subject_folds, subjects_markdown, transfer_markdown,
                            transfer_table)

PARAMS = {"n_estimators": 12}
L, D = 3, 12  # the default (acute-pca10-stacked) needs at least 10 dimensions


@dataclass
class FakeStore:
    ids: list
    correct: np.ndarray
    raw_confidence: np.ndarray
    layer_means: np.ndarray
    records: list


def fake_store(task: str, n: int, seed: int, shift: float = 0.0, subjects: int = 6) -> FakeStore:
    """Records whose correctness depends on one hidden direction (present in every layer) and,
    more weakly, on the raw confidence."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=n)
    y = rng.random(n) < 1 / (1 + np.exp(-2.0 * signal))
    lm = rng.normal(size=(n, L + 1, D)).astype(np.float32)
    lm[:, :, 0] += signal[:, None] + shift
    conf = 1 / (1 + np.exp(-(0.7 * signal + rng.normal(size=n))))
    records = [{"id": f"{task}-{i}", "meta": {"subject": f"s{i % subjects}"}} for i in range(n)]
    return FakeStore([r["id"] for r in records], y, conf, lm, records)


@pytest.fixture(scope="module")
def stores():
    return {"a": fake_store("a", 120, 0), "b": fake_store("b", 90, 1, shift=0.5), "c": fake_store("c", 80, 2)}


@pytest.fixture(scope="module")
def table(stores):
    return transfer_table(stores, cv=3, n_bootstrap=50, probe_params=PARAMS)


def _row(cell, name):
    return next(r for r in cell["rows"] if r["estimator"] == name)


def test_every_pair_is_a_cell_and_the_diagonal_is_cross_validated(table, stores):
    assert table["estimators"] == [DEFAULT_ESTIMATOR, REFERENCE]
    cells = {(c["train"], c["test"]): c for c in table["cells"]}
    assert set(cells) == {(a, b) for a in stores for b in stores}
    for (a, b), c in cells.items():
        assert c["mode"] == ("cv" if a == b else "transfer")
        assert (c["n_train"], c["n_test"]) == (len(stores[a].ids), len(stores[b].ids))
        # raw confidence is never fitted: its row is the metric of the test task's raw confidence
        raw = _row(c, "raw")
        assert raw["auc_euro_all"] == pytest.approx(metrics.auc_euro(stores[b].raw_confidence, stores[b].correct))
        assert _row(c, DEFAULT_ESTIMATOR)["reference"] == REFERENCE


def test_a_transfer_cell_equals_a_direct_fit(table, stores):
    a, b = stores["a"], stores["c"]
    cell = next(c for c in table["cells"] if (c["train"], c["test"]) == ("a", "c"))
    for name in (DEFAULT_ESTIMATOR, REFERENCE):
        est = make_estimator(name, random_state=0, probe_params=PARAMS)
        est.fit(Inputs.of(a.layer_means, a.raw_confidence), a.correct.astype(int))
        p = est.predict_proba(Inputs.of(b.layer_means, b.raw_confidence))[:, 1]
        assert _row(cell, name)["auc_euro_all"] == pytest.approx(metrics.auc_euro(p, b.correct))
        assert _row(cell, name)["smece"] == pytest.approx(metrics.smece(p, b.correct))


def test_transfer_refuses_bad_input(stores):
    with pytest.raises(ValueError, match="at least two tasks"):
        transfer_table({"a": stores["a"]})
    with pytest.raises(ValueError, match="unknown estimator"):
        transfer_table(stores, estimators=["acute-nope"])
    odd = fake_store("x", 50, 3)
    odd.layer_means = odd.layer_means[:, :2]
    with pytest.raises(ValueError, match="different layer shapes"):
        transfer_table({"a": stores["a"], "x": odd})
    one = fake_store("y", 50, 4)
    one.correct = np.ones(50, bool)
    with pytest.raises(ValueError, match="task 'y'.*both classes"):
        transfer_table({"a": stores["a"], "y": one})


def test_subject_folds_hold_out_whole_subjects():
    subjects = [f"s{i % 7}" for i in range(70)]
    folds = subject_folds(subjects, n_splits=3, repeats=2, seed=0)
    assert len(folds) == 2 and all(len(rep) == 3 for rep in folds)
    for rep in folds:
        tested = np.concatenate([te for _, te in rep])
        assert sorted(tested) == list(range(70))  # every record tested once per repeat
        for tr, te in rep:
            held = {subjects[i] for i in te}
            assert held and not held & {subjects[i] for i in tr}
            assert len(tr) + len(te) == 70
    assert [sorted({subjects[i] for i in te}) for _, te in folds[0]] != \
        [sorted({subjects[i] for i in te}) for _, te in folds[1]]
    with pytest.raises(ValueError, match="at least 5 subjects"):
        subject_folds(["x", "y"], n_splits=5)


def test_leave_subjects_out_scores_unseen_subjects(stores):
    store = stores["a"]
    res = leave_subjects_out(store, n_splits=3, repeats=1, n_bootstrap=30, probe_params=PARAMS)
    assert set(res["modes"]) == {"subjects held out", "random folds"} and res["n_subjects"] == 6
    held = {r["estimator"]: r for r in res["modes"]["subjects held out"]}
    # Platt scaling refitted without each fold's subjects, by hand
    y, conf = store.correct.astype(int), store.raw_confidence
    oof = np.empty(y.size)
    for tr, te in subject_folds([r["meta"]["subject"] for r in store.records], 3, 1, 0)[0]:
        est = make_estimator(REFERENCE).fit(Inputs.of(confidence=conf[tr]), y[tr])
        oof[te] = est.predict_proba(Inputs.of(confidence=conf[te]))[:, 1]
    assert held[REFERENCE]["auc_euro_all"] == pytest.approx(metrics.auc_euro(oof, y))
    assert held["raw"]["auc_euro_all"] == pytest.approx(metrics.auc_euro(conf, y))
    no_subject = FakeStore(store.ids, store.correct, conf, store.layer_means, [{"id": 1, "meta": {}}] * len(y))
    with pytest.raises(ValueError, match="no meta\\['subject'\\]"):
        leave_subjects_out(no_subject, n_splits=3, repeats=1, n_bootstrap=0, probe_params=PARAMS)


def test_markdown_tables(table, stores):
    md = transfer_markdown(table)
    assert "| train \\ test | a | b | c |" in md
    assert sum(line.startswith("| a |") for line in md.splitlines()) == 2
    assert "| a | *" in md  # the diagonal in italics
    res = leave_subjects_out(stores["b"], n_splits=3, repeats=1, n_bootstrap=20, probe_params=PARAMS)
    md = subjects_markdown(res)
    assert "| subjects held out |" in md and "| random folds |" in md

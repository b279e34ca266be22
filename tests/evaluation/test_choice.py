"""``auto`` by benchmarks/every_signal.md's rule on the user's store (acute.evaluation.choice): the
verdict's cases, one line saying what was shipped and why, the selection in probe.json, the
sources of the scoring setting only, and the default probe when the rule picks it."""

from __future__ import annotations

import json

import pytest

from acute.estimators import load_probe
from acute.estimators.probe_file import ExportedProbe
from acute.estimators.stack_file import ExportedStack
from acute.evaluation import choice
from cli_run import run  # tests/cli_run.py
from smaller import small_searches  # tests/smaller.py
from test_stack_rows import write_store

pytest.importorskip("skops")
A, V, D = choice.CANDIDATES


def test_the_candidates_are_the_two_stacks_and_the_states_own_probe():
    """D is the states' probe by name, not whatever the default is (which the rule may make A or V)."""
    from acute.estimators import STATES_PROBE

    assert (A, V, D) == ("acute-all", "visible-all", STATES_PROBE) == ("acute-all", "visible-all", "acute-pca10-stacked")


@pytest.mark.parametrize("adm, a_vs_v, chosen", [
    ({A: True, V: True, D: True}, -0.001, A),
    ({A: True, V: True, D: True}, -0.003, V),
    ({A: True, V: False, D: True}, -0.010, A),
    ({A: False, V: True, D: True}, +0.010, V),
    ({A: False, V: False, D: True}, 0.0, D),
    ({A: False, V: False, D: False}, 0.0, A),
])
def test_the_verdict_follows_the_rule(adm, a_vs_v, chosen):
    assert choice.verdict(adm, a_vs_v)[0] == chosen


def test_the_evidence_names_step_three_s_stack_and_the_default_still_comes_first():
    """Over several pairs (benchmarks/every_signal.py) step 3 picks the stack admissible on more
    pairs; today's default still stays when it alone is admissible."""
    none = {A: False, V: False, D: False}
    assert choice.verdict(none, 0.0, fallback=V) == (V, "neither stack is admissible everywhere; "
                                                        "visible-all is on more pairs (ties go to acute-all)")
    assert choice.verdict({**none, D: True}, 0.0, fallback=V)[0] == D


def test_a_difference_carries_the_corrected_t_interval_computed_by_hand():
    """``_diff``'s t-interval is Nadeau and Bengio's over the fold x repeat auc-euro differences,
    computed here from scipy's t quantile."""
    import numpy as np
    from scipy import stats

    from acute import metrics
    from acute.evaluation.crossval import cv_folds

    rng = np.random.default_rng(3)
    n = 90
    y = (rng.uniform(size=n) < 0.5).astype(np.int64)
    splits = cv_folds([f"r{i}" for i in range(n)], y, 3, 2, 0)
    a = np.clip(0.5 * y + rng.uniform(0, 0.5, size=(2, n)), 0, 1)
    b = rng.uniform(size=(2, n))
    d = np.array([metrics.auc_euro(a[r, te], y[te]) - metrics.auc_euro(b[r, te], y[te])
                  for r, rep in enumerate(splits) for _, te in rep])
    n_te = np.mean([len(te) for rep in splits for _, te in rep])
    se = np.sqrt((1 / d.size + n_te / (n - n_te)) * d.var(ddof=1))
    q = stats.t.ppf(0.975, d.size - 1)
    got = choice._diff(a, b, y, np.arange(n)[None], splits)
    assert got["t_low"] == pytest.approx(d.mean() - q * se) and got["t_high"] == pytest.approx(d.mean() + q * se)
    assert got["diff"] > 0 and got["t_low"] > 0


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("auto") / "store"
    write_store(path, n=120)
    return path


def _export(store_path, out, setting, capsys):
    with small_searches():
        return run(["export", "--store", store_path, "--estimator", "auto", "--for", setting, "--out", out,
                    "--n-estimators", "10", "--auto-folds", "3", "--auto-repeats", "1", "--group-by", "shelf"],
                   capsys)


@pytest.mark.parametrize("setting", ["store", "serve"])
def test_auto_ships_by_the_rule_and_says_why_in_one_line(store_path, tmp_path, capsys, setting):
    rc, out, err = _export(store_path, tmp_path / "auto", setting, capsys)
    assert rc == 0, err
    lines = [line for line in out.splitlines() if line.startswith("auto: ")]
    assert len(lines) == 1 and lines[0].startswith("auto: on this store the hidden states added ")
    probe = load_probe(tmp_path / "auto")
    sel = probe.manifest["selection"]
    sel = sel.get("auto", sel)
    assert sel["rule"] == "benchmarks/every_signal.md" and sel["scoring"] == setting
    assert sel["cv"] == {"n_splits": 3, "repeats": 1, "random_state": 0, "group_by": "shelf"}
    assert lines[0].endswith(f"exported {sel['chosen']}") and sel["line"] == lines[0][len("auto: "):]
    assert sel["chosen"] == choice.verdict(sel["admissible"], sel["states_add"]["diff"])[0]
    assert sel["states_add"]["t_low"] <= sel["states_add"]["t_high"] and "corrected t [" in lines[0]
    assert set(sel["scores"]) >= set(choice.CANDIDATES) and sel["best_single"] in sel["scores"]
    if setting == "serve":  # no metadata in a chat request, no parser for the store's task
        assert {"platt+meta", "visible", "answer-surface"} <= set(sel["left_out"])
        assert not {"metadata", "visible"} & set(probe.sources)
    else:
        assert sel["left_out"] == {}


def test_auto_ships_the_default_probe_when_the_rule_picks_it(store_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(choice, "verdict", lambda adm, d: (D, "only the default probe is not below it"))
    rc, out, err = _export(store_path, tmp_path / "d", "serve", capsys)
    assert rc == 0, err
    assert "exported acute-pca10-stacked" in out and "probe (auto -> acute-pca10-stacked)" in out
    probe = load_probe(tmp_path / "d")
    assert isinstance(probe, ExportedProbe) and not isinstance(probe, ExportedStack)
    assert probe.selection["auto"]["chosen"] == D
    man = json.loads((tmp_path / "d" / "probe.json").read_text())
    assert man["training_summary"]["scoring"]["setting"] == "serve"
    assert man["confidence_reference"]["source"] == "out-of-fold"

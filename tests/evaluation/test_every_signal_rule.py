"""benchmarks/every_signal.py applies every_signal.md's rule to committed evaluations: checked on
hand-written ``results.json`` files whose verdicts follow from the rule by hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def rule():
    sys.path.insert(0, str(BENCH))  # the script imports benchmarks/_study.py
    try:
        spec = importlib.util.spec_from_file_location("every_signal", BENCH / "every_signal.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _candidate(auc: float, ref: tuple[str, float], visible: tuple[str, float], interval: float = 0.004) -> dict:
    """A row with its differences to the best baseline and to the best visible control, each with
    a symmetric interval of half-width ``interval``."""
    row = {"auc_euro_all": auc, "reference": ref[0], "best_visible_reference": visible[0]}
    for prefix, (_, other) in (("diff", ref), ("diff_best_visible", visible)):
        d = auc - other
        row.update({f"{prefix}_auc_euro_all": d, f"{prefix}_auc_euro_all_ci_low": d - interval,
                    f"{prefix}_auc_euro_all_ci_high": d + interval})
    return row


def _write(root: Path, name: str, aucs: dict[str, float], *, n: int = 1000, visible: float = 0.80,
           baseline: float = 0.79, interval: float = 0.004) -> None:
    """``root/model/name/results.json``: a baseline ``platt``, a visible control ``answer-text`` and
    the candidates in ``aucs`` (acute-all, visible-all, acute-pca10-stacked)."""
    ref, vis = ("platt", baseline), ("answer-text", visible)
    rows = [{"estimator": "platt", "auc_euro_all": baseline, "best_visible_reference": "answer-text"},
            {"estimator": "answer-text", "auc_euro_all": visible, "best_visible_reference": "answer-text"}]
    rows += [{"estimator": c, **_candidate(a, ref, vis, interval)} for c, a in aucs.items()]
    folder = root / "model" / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "split": {"mode": "cv", "n_records": n, "n_splits": 5, "n_repeats": 5}, "reference": "platt",
        "results": rows}))


def _reading(rule, root: Path, capsys) -> str:
    assert rule.main(["--results", str(root)]) == 0
    return capsys.readouterr().out.split("## Reading")[1]


ALL = ("acute-all", "visible-all", "acute-pca10-stacked")


def test_acute_all_when_it_is_admissible_and_not_below_visible_all(rule, tmp_path, capsys):
    _write(tmp_path, "a", dict(zip(ALL, (0.810, 0.8115, 0.805))))  # A - V = -0.0015: within the margin
    _write(tmp_path, "b", dict(zip(ALL, (0.820, 0.815, 0.801))))
    out = _reading(rule, tmp_path, capsys)
    assert "**the rule chooses acute-all**" in out and "-0.0015" in out and "interim" not in out


def test_visible_all_when_acute_all_falls_below_it_by_more_than_the_margin(rule, tmp_path, capsys):
    _write(tmp_path, "a", dict(zip(ALL, (0.810, 0.8125, 0.805))))  # A - V = -0.0025
    _write(tmp_path, "b", dict(zip(ALL, (0.820, 0.815, 0.801))))
    assert "**the rule chooses visible-all**" in _reading(rule, tmp_path, capsys)


def test_the_best_single_control_is_the_better_of_baseline_and_visible_control(rule, tmp_path, capsys):
    # the baseline (0.83) beats the visible control (0.80): acute-all at 0.825 is 0.005 below it, its
    # interval [-0.009, -0.001] ends below 0: not admissible; visible-all (0.832) is admissible
    _write(tmp_path, "a", dict(zip(ALL, (0.825, 0.832, 0.80))), baseline=0.83)
    assert rule.main(["--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| platt 0.8300 |" in out and "0.8250: -0.0050 [-0.0090, -0.0010] **not admissible**" in out
    assert "**the rule chooses visible-all**" in out


def test_the_default_stays_only_when_it_alone_is_admissible(rule, tmp_path, capsys):
    _write(tmp_path, "a", dict(zip(ALL, (0.790, 0.790, 0.805))))  # both stacks 0.010 below 0.80
    assert "**the rule chooses acute-pca10-stacked**" in _reading(rule, tmp_path, capsys)


def test_neither_stack_everywhere_chooses_the_one_admissible_on_more_evaluations(rule, tmp_path, capsys):
    _write(tmp_path, "a", dict(zip(ALL, (0.790, 0.805, 0.790))))  # only V admissible
    _write(tmp_path, "b", dict(zip(ALL, (0.805, 0.790, 0.790))))  # only A
    _write(tmp_path, "c", dict(zip(ALL, (0.805, 0.790, 0.790))))  # only A
    out = _reading(rule, tmp_path, capsys)
    assert "**the rule chooses acute-all**" in out and "where it fails: model/a" in out


def test_evaluations_without_the_stacks_make_the_reading_interim(rule, tmp_path, capsys):
    _write(tmp_path, "a", dict(zip(ALL, (0.810, 0.809, 0.805))))
    _write(tmp_path, "old", {"acute-pca10-stacked": 0.805})
    _write(tmp_path, "small", dict(zip(ALL, (0.810, 0.809, 0.805))), n=500)
    out = _reading(rule, tmp_path, capsys)
    assert "**interim**: 1 of 2 evaluations" in out and "model/old" in out
    assert "on the evaluations with every candidate (1) the rule would choose acute-all" in out
    assert "outside the rule's evidence" in out and "model/small (500 records" in out

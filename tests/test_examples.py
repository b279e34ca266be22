"""The scripts in examples/ run end to end on a tiny model (in process with runpy, so that the
labels can be made mixed: random tiny models answer everything wrong)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute.estimators import load_probe
from acute.store import open_store
from acute.tasks import OpenQATask
from acute.testing import hash_label
from smaller import small_searches  # tests/smaller.py

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"




def hashed_is_correct(self, ex, generation) -> bool:
    return hash_label(ex.id)


@pytest.fixture
def mixed_labels(monkeypatch):
    monkeypatch.setattr(OpenQATask, "is_correct", hashed_is_correct)


def run_example(name: str, *argv, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [name, *map(str, argv)])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


@pytest.fixture(scope="module")
def trained(long_context_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "run"
    with pytest.MonkeyPatch.context() as mp, small_searches():  # the controls' rows, not their searches
        mp.setattr(OpenQATask, "is_correct", hashed_is_correct)
        run_example("train_probe.py", "--model", long_context_dir, "--limit", 40, "--trees", 10,
                    "--out", out, monkeypatch=mp)
    return out


def test_train_probe(trained, long_context_dir):
    store = open_store(trained / "store")
    assert len(store) == 40 and store.layer_means.shape == (40, 5, 64)
    assert store.correct.tolist() == [hash_label(i) for i in store.ids]
    results = json.loads((trained / "evaluation" / "results.json").read_text())
    assert [r["estimator"] for r in results["results"]] == [
        "raw", "platt", "isotonic", "acute-pca10", "acute-pca10-stacked", "auto"] + results["params"]["controls"]
    assert results["split"]["mode"] == "cv"
    probe = load_probe(trained / "probe")
    assert probe.selection["chosen"] == "acute-pca10-stacked" and probe.calibration == "stacked"
    assert probe.selection["best_by_cv"] in ("acute-cosine", "acute-pca10", "acute-cosine-stacked",
                                             "acute-pca10-stacked")
    assert probe.training_summary["n_records"] == 40
    assert probe.model_name == str(long_context_dir)
    assert probe.training_summary["task_settings"]["name"] == "default"


def test_score_live(trained, long_context_dir, monkeypatch, capsys):
    run_example("score_live.py", "--model", long_context_dir, "--probe", trained / "probe",
                "--limit", 3, "--risk", 0.5, monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert len(lines) == 6 and lines[0] == "What is the capital of France?"
    for line in lines[1::2]:
        conf = float(line.split("probe ")[1].split()[0])
        assert line.endswith("trust" if conf > 0.5 else "abstain")


def test_export_and_load(long_context_dir, tmp_path, monkeypatch, mixed_labels, capsys):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the fresh process imports acute from here
    run_example("export_and_load.py", "--model", long_context_dir, "--limit", 30, "--trees", 10,
                "--out", tmp_path, monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "30 records: largest difference between the fitted and the reloaded probe = 0.0e+00" in out
    assert (tmp_path / "probe" / "probe.safetensors").is_file()
    store = open_store(tmp_path / "store")
    p = load_probe(tmp_path / "probe").predict_proba(Inputs.of(np.asarray(store.layer_means, np.float32), store.raw_confidence))
    assert p.shape == (30, 2)


@pytest.fixture(scope="module")
def from_logs(long_context_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("logs") / "run"
    with pytest.MonkeyPatch.context() as mp, small_searches():  # the controls' rows, not their searches
        run_example("train_from_logs.py", "--model", long_context_dir, "--limit", 40, "--trees", 10,
                    "--out", out, monkeypatch=mp)
    return out


def test_train_from_logs(from_logs):
    store = open_store(from_logs / "store")
    rows = [json.loads(line) for line in (from_logs / "demo-logs.jsonl").read_text().splitlines()]
    assert store.ids == [r["id"] for r in rows] and len(rows) == 40
    assert store.correct.tolist() == [r["label"] for r in rows] and 0 < store.correct.sum() < 40
    assert [r["generation"] for r in store.records] == [r["response"] for r in rows]
    assert store.manifest["responses"]["labels"] == "label field"
    results = json.loads((from_logs / "evaluation" / "results.json").read_text())
    assert [r["estimator"] for r in results["results"]] == (["raw", "platt", "acute-pca10-stacked"]
                                                            + results["params"]["controls"])
    probe = load_probe(from_logs / "probe")
    assert probe.training_summary["responses"]["prompt_format"] == "prompt"


def test_gate_other_engine(from_logs, long_context_dir, monkeypatch, capsys):
    # the stand-in engine (the tiny model answers blank lines: abstain without scoring)
    run_example("gate_other_engine.py", "--model", long_context_dir, "--probe", from_logs / "probe",
                "--limit", 3, "--risk", 0.5, monkeypatch=monkeypatch)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6 and lines[0] == "What is the capital of France?"
    # a file of the engine's answers: each scored and decided
    run_example("gate_other_engine.py", "--model", long_context_dir, "--probe", from_logs / "probe",
                "--answers", from_logs / "demo-logs.jsonl", "--limit", 4, "--risk", 0.5,
                monkeypatch=monkeypatch)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 8
    for line in lines[1::2]:
        conf = float(line.split("probe ")[1].split()[0])
        assert line.endswith("trust" if conf > 0.5 else "abstain")

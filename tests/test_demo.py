"""``acute demo`` (acute/cli/demo.py): the rows it shows, the export read off the evaluation, and
the live table's column saying whether each answer was right."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from acute.cli import demo
from acute.estimators.registry import ACUTE_VARIANTS, DEFAULT_ESTIMATOR
from acute.tasks import get_task
from stores import relabel  # tests/stores.py


def row(name, auc, smece=0.1):
    return {"estimator": name, "auc_euro_all": auc, "smece": smece}


def test_the_demo_evaluates_and_shows_the_rows_a_newcomer_needs():
    assert set(ACUTE_VARIANTS) <= set(demo.DEMO_ESTIMATORS) and DEFAULT_ESTIMATOR in demo.DEMO_ESTIMATORS
    rows = [row("raw", 0.50), row("platt", 0.55), row("isotonic", 0.54), row("beta", 0.56),
            row("acute-early", 0.60), row("acute-mid", 0.62), row("acute-late", 0.61),
            row("acute-cosine", 0.62, smece=0.05), row("acute-pca10", 0.58), row("acute-pca20", float("nan")),
            row(DEFAULT_ESTIMATOR, 0.63), row("acute-cosine-stacked", 0.70), row("question-only", 0.52),
            row("platt+meta", 0.625)]
    # the best plain view: cosine ties mid on auc-euro and wins on smECE; stacked rows are not views
    assert demo.demo_rows(rows) == ["raw", "platt", "isotonic", "acute-cosine", DEFAULT_ESTIMATOR, "platt+meta",
                                    "question-only"]
    assert "scores 0.625 auc-euro against acute-pca10-stacked's 0.630" in demo.control_note(rows)
    rows = [r for r in rows if r["estimator"] != "platt+meta"]
    assert demo.control_note(rows) is None
    # no question-only (a store without last-prompt states); the default may be the best view's twin
    rows = [r for r in rows if r["estimator"] != "question-only"]
    assert demo.demo_rows(rows)[-1] == DEFAULT_ESTIMATOR and len(demo.demo_rows(rows)) == 5
    assert demo.demo_rows([row("raw", 0.5)]) == ["raw"]


def test_every_live_question_has_a_gold_answer_graded_like_a_collection():
    task = get_task("default")
    golds = demo.live_golds(demo.DEMO_QUESTIONS, task.load())
    assert None not in golds and golds[0] == ("Paris",)
    assert demo.live_golds(["Who wrote Hamlet?"], task.load()) == [None]
    questions = list(demo.DEMO_QUESTIONS[:3]) + ["Who wrote Hamlet?"]
    right = demo.grade_live(task, questions, ["Paris.", "Ag", "The answer is 2884.", "Shakespeare"],
                            demo.live_golds(questions, task.load()))
    assert right == [True, False, True, None]


def test_the_live_table_shows_a_trusted_wrong_answer():
    scored = [SimpleNamespace(question="What is the capital of France?", answer="Lyon", raw_confidence=0.9,
                              confidence=0.8, decision="trust", trust=True),
              SimpleNamespace(question="What is the chemical symbol for gold?", answer="Au", raw_confidence=0.7,
                              confidence=0.3, decision="abstain", trust=False),
              SimpleNamespace(question="Who wrote Hamlet?", answer="Shakespeare", raw_confidence=0.9,
                              confidence=0.9, decision="trust", trust=True)]
    lines = demo.live_table(scored, [False, True, None], 0.5)
    assert lines[1].split()[-1] == "right"
    assert lines[2].endswith("trust    NO") and lines[3].endswith("abstain  yes") and lines[4].endswith("?")
    assert lines[-1] == ("trusted 2 of 3 answers; 1 of the trusted were wrong, 1 without a known gold answer")


# ------------------------------------------------------------------ end to end, tiny model
@pytest.fixture
def relabelled_collect(monkeypatch, tmp_path):
    """``collect`` as the demo calls it, then the store's labels replaced by a hash of the id:
    a tiny random model answers every question wrong, and the folds need both classes."""
    import acute.collect

    real = acute.collect.collect

    def collect(model, tok, task, examples, out_dir, **kw):
        summary = real(model, tok, task, examples, tmp_path / "raw-store", progress=False, **kw)
        relabel(tmp_path / "raw-store", out_dir)
        return summary

    monkeypatch.setattr(demo, "collect", collect)


def test_run_demo_end_to_end_on_a_tiny_model(long_context_dir, relabelled_collect, tmp_path, capsys):
    timings: dict[str, float] = {}
    paths = demo.run_demo(tmp_path / "demo", limit=40, model_name=str(long_context_dir), n_bootstrap=10,
                          questions=list(demo.DEMO_QUESTIONS[:2]) + ["Who wrote Hamlet?"], n_estimators=5,
                          timings=timings)
    out = capsys.readouterr().out
    assert set(timings) == {"load", "collect", "evaluate", "export", "live"}
    # the table: only the newcomer's rows (one plain view, the default, question-only)
    results = json.loads((paths["evaluation"] / "results.json").read_text())
    evaluated = [r["estimator"] for r in results["results"]]
    assert set(evaluated) == set(demo.DEMO_ESTIMATORS) | set(demo.DEMO_CONTROLS)
    shown = demo.demo_rows(results["results"])
    table = [line for line in out.splitlines() if line.startswith("| ")]
    for name in evaluated:
        assert any(f" {name} " in line or f"**{name}**" in line or f"`{name}`" in line for line in table) \
            == (name in shown), name
    # the export: the default probe, its selection the evaluation's out-of-fold comparison
    probe = json.loads((paths["probe"] / "probe.json").read_text())
    sel = probe["selection"]
    assert sel["chosen"] == DEFAULT_ESTIMATOR and sel["cv"]["source"] == "evaluation"
    by_row = {r["estimator"]: r for r in results["results"]}
    for s in sel["scores"]:
        assert s["auc_euro_all"] == pytest.approx(by_row[s["estimator"]]["auc_euro_all"])
    assert f"best probe by the 5-fold cross-validation above: {sel['best_by_cv']}" in out
    # the live table: a column saying whether each answer was right
    live = out[out.index("live scoring"):].splitlines()
    assert live[1].split()[-1] == "right"
    marks = [line.split()[-1] for line in live[2:5]]
    assert marks[2] == "?" and all(m in ("yes", "NO") for m in marks[:2])
    assert live[5].startswith("trusted ")
    assert np.isfinite(sum(timings.values()))

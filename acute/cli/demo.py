"""``acute demo``: the whole pipeline on the default model and the built-in questions.

fetch model -> collect a store -> evaluate the estimators a newcomer needs by cross-validation
-> export the default probe fitted on all records (its comparison read from the evaluation) ->
score a few live questions with a trust decision, each marked right or wrong against its gold
answer.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..models.cards import DEFAULT_MODEL
from ..estimators.probe_names import ACUTE_VARIANTS
from ..estimators.registry import DEFAULT_ESTIMATOR
from ..metrics.specs import best_of
from ..tasks import Example, get_task
from ..collect import collect
from ..estimators.probe_file import load_probe
from ..evaluation import EvaluationSettings, evaluate_store, write_evaluation
from ..evaluation.training import train_probe
from ..models import load_model
from ..scoring.scorer import Scorer
from ..store import open_store

__all__ = ["DEMO_CONTROLS", "DEMO_ESTIMATORS", "DEMO_GOLD", "DEMO_QUESTIONS", "DEMO_RISK", "demo_rows",
           "grade_live", "live_table", "run_demo"]

DEMO_QUESTIONS = (
    "What is the capital of France?",
    "What is the chemical symbol for gold?",
    "What is 4821 minus 1937?",
    "Who was the first person to walk on the Moon?",
    "In which year did the Byzantine emperor Basil II die?",
)
#: gold answers of the live questions that are not among the built-in questions (those take the
#: built-in set's answers)
DEMO_GOLD: dict[str, tuple[str, ...]] = {
    "What is 4821 minus 1937?": ("2884",),
    "In which year did the Byzantine emperor Basil II die?": ("1025",),
}
DEMO_RISK = 0.5
# one repeat of 5-fold cross-validation keeps the demo within minutes on 2 cores
DEMO_FOLDS, DEMO_REPEATS = 5, 1
#: what the demo evaluates: the baselines a newcomer compares with, the paper's six views (to
#: find the best of them), the default; plus two controls when the store feeds them: Platt scaling
#: that knows the question's category and difficulty (on the built-in questions it explains the
#: default's gain: README, "What it has shown") and the question-only probe
DEMO_ESTIMATORS: tuple[str, ...] = ("raw", "platt", "isotonic", "acute-early", "acute-mid", "acute-late",
                                    "acute-cosine", "acute-pca10", "acute-pca20", "acute-pca10-stacked")
DEMO_CONTROLS: tuple[str, ...] = ("platt+meta", "question-only")
DEMO_LIMIT = 300


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def demo_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows of an evaluation a newcomer needs, in this order: ``raw``, ``platt``, ``isotonic``,
    the paper's best view (the plain ``acute-*`` row with the highest auc-euro (all), ties by
    smECE), the default estimator, then the controls ``platt+meta`` and ``question-only`` when
    they were evaluated. Names not among ``rows`` are left out."""
    by_name = {r["estimator"]: r for r in rows}
    views = [n for n in ACUTE_VARIANTS if n in by_name and math.isfinite(by_name[n].get("auc_euro_all", math.nan))]
    best_view = best_of(views, by_name.__getitem__) if views else None
    wanted = ["raw", "platt", "isotonic", best_view, DEFAULT_ESTIMATOR, *DEMO_CONTROLS]
    return [n for n in dict.fromkeys(wanted) if n in by_name]


def control_note(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One sentence putting the default beside ``platt+meta``, the control that explains its gain
    on the built-in questions, so a newcomer does not read category lookup as a probe's win;
    None when either row is missing."""
    by_name = {r["estimator"]: r for r in rows}
    d, m = by_name.get(DEFAULT_ESTIMATOR), by_name.get("platt+meta")
    if d is None or m is None:
        return None
    return (f"platt+meta (raw confidence plus the question's category and difficulty, no hidden states) scores "
            f"{m['auc_euro_all']:.3f} auc-euro against {DEFAULT_ESTIMATOR}'s {d['auc_euro_all']:.3f}: on these "
            "questions most of a probe's gain over calibrated confidence is knowing the kind of question, "
            "not reading the answer (README, 'What it has shown').")


def live_golds(questions: Sequence[str], examples: Sequence[Any]) -> list[tuple[str, ...] | None]:
    """The gold answers of each live question: the built-in question's of the same text, else
    :data:`DEMO_GOLD`'s, else None (unknown)."""
    builtin = {" ".join(ex.question.split()): tuple(ex.answers) for ex in examples}
    return [builtin.get(" ".join(q.split())) or DEMO_GOLD.get(q) for q in questions]


def grade_live(task, questions: Sequence[str], answers: Sequence[str],
               golds: Sequence[Sequence[str] | None]) -> list[bool | None]:
    """Whether each answer is right, graded by ``task`` as a collection grades it
    (``task.is_correct``); None where the gold answer is unknown."""
    return [None if gold is None else bool(task.is_correct(Example(id=f"live-{i}", question=q, answers=list(gold)), a))
            for i, (q, a, gold) in enumerate(zip(questions, answers, golds))]


def live_table(scored: Sequence[Any], right: Sequence[bool | None], risk: float) -> list[str]:
    """The lines of the live-scoring table: question, answer, raw confidence, the probe's
    confidence, the decision and whether the answer was right; then how many trusted answers
    were wrong (what a probe worth its name keeps at zero)."""
    mark = {True: "yes", False: "NO", None: "?"}
    lines = [f"live scoring with the exported probe: trust iff confidence > risk level {risk}",
             f"{'question':<52} {'answer':<24} {'raw':>5} {'probe':>5}  {'decision':<8} right"]
    for s, ok in zip(scored, right):
        lines.append(f"{_clip(s.question, 52):<52} {_clip(s.answer, 24):<24} {s.raw_confidence:>5.2f} "
                     f"{s.confidence:>5.2f}  {s.decision:<8} {mark[ok]}")
    trusted = [ok for s, ok in zip(scored, right) if s.trust]
    wrong = sum(ok is False for ok in trusted)
    lines.append(f"trusted {len(trusted)} of {len(scored)} answers; {wrong} of the trusted were wrong"
                 + (f", {sum(ok is None for ok in trusted)} without a known gold answer" if None in trusted else ""))
    return lines


def run_demo(out: Path, limit: int | None = DEMO_LIMIT, model_name: str = DEFAULT_MODEL,
             n_bootstrap: int = 200, questions=DEMO_QUESTIONS, risk: float = DEMO_RISK,
             load_options: dict | None = None, n_estimators: int | None = None,
             timings: dict[str, float] | None = None) -> dict:
    """Run the demo into ``out`` and return the paths it wrote (store, evaluation, probe).

    Collects ``limit`` built-in questions drawn evenly from every category with a fixed seed
    (all of them when None; a collection left in ``out`` is resumed), evaluates
    :data:`DEMO_ESTIMATORS` (and the question-only control when the store has last-prompt
    states) by 5-fold cross-validation with paired bootstrap intervals (``n_bootstrap``
    resamples) of each estimator's difference to the best baseline, and prints the rows a
    newcomer needs (:func:`demo_rows`; ``evaluation/`` holds them all). Exports the default
    estimator (``acute-pca10-stacked``) fitted on all records, with the evaluation's
    out-of-fold comparison recorded in ``probe.json`` as its selection (no second comparison is
    fitted), and scores ``questions`` live at risk level ``risk``, each answer graded against
    its gold answer (the built-in set's, :data:`DEMO_GOLD`'s) like a collection grades it.
    Prints the collection summary, the results table and the live table to stdout, progress
    to stderr. ``load_options`` go to :func:`acute.models.load_model` (``device``, ``dtype``,
    ``device_map``); ``n_estimators`` (default: the probes' 500) sets the forests' trees (for
    tests). ``timings``, when given, gets the seconds of each step (``load``, ``collect``,
    ``evaluate``, ``export``, ``live``).
    """
    out = Path(out)
    steps = timings if timings is not None else {}
    t0 = clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps[step] = now - clock
        clock = now

    _say(f"[1/5] loading {model_name} (a first run fetches and converts it into the acute cache)")
    model, tok = load_model(model_name, **(load_options or {}))
    task = get_task("default")
    builtin = task.load()
    examples = builtin
    if limit is not None and limit < len(examples):  # a fixed sample across all categories
        keep = np.random.default_rng(0).choice(len(examples), size=limit, replace=False)
        examples = [examples[i] for i in sorted(keep)]
    lap("load")
    _say(f"[2/5] answering {len(examples)} built-in questions while recording every layer")
    summary = collect(model, tok, task, examples, out / "store")
    print("\n".join(summary.lines()))
    lap("collect")

    _say(f"[3/5] evaluating {len(DEMO_ESTIMATORS)} estimators by {DEMO_FOLDS}-fold cross-validation")
    store = open_store(out / "store")
    probe_params = {"n_estimators": n_estimators} if n_estimators is not None else None
    settings = EvaluationSettings(estimators=DEMO_ESTIMATORS, cv=DEMO_FOLDS, repeats=DEMO_REPEATS,
                                  n_bootstrap=n_bootstrap, probe_params=probe_params, reliability="best",
                                  controls=DEMO_CONTROLS)
    result = evaluate_store(store, settings=settings)
    write_evaluation(result, out / "evaluation")
    print()
    print(replace(result, rows=[result.row(n) for n in demo_rows(result.rows)]).markdown())
    print(f"(every evaluated row: {out / 'evaluation' / 'results.md'})")
    note = control_note(result.rows)
    if note:
        print(note)
    lap("evaluate")

    _say(f"[4/5] fitting the default probe ({DEFAULT_ESTIMATOR}) on all {len(store)} records and exporting it")
    trained = train_probe(store, DEFAULT_ESTIMATOR, n_estimators=n_estimators)
    selection = result.selection(DEFAULT_ESTIMATOR)  # the evaluation's comparison, not a second one
    replace(trained, selection=selection).save(out / "probe")
    print(f"\n{DEFAULT_ESTIMATOR} exported to {out / 'probe'} (probe.safetensors + probe.json, no pickle); "
          f"best probe by the {DEMO_FOLDS}-fold cross-validation above: {selection['best_by_cv']}")
    if selection["warning"]:
        print(f"warning: {selection['warning']}")
    lap("export")

    _say(f"[5/5] scoring live questions at risk level {risk}")
    scorer = Scorer(model, tok, load_probe(out / "probe"))  # asks like the default task
    questions = list(questions)
    scored = scorer.generate(questions, risk=risk)
    right = grade_live(task, questions, [s.answer for s in scored], live_golds(questions, builtin))
    print()
    print("\n".join(live_table(scored, right, risk)))
    lap("live")
    paths = {"store": out / "store", "evaluation": out / "evaluation", "probe": out / "probe"}
    print(f"\ndone in {time.perf_counter() - t0:.0f} s. Outputs:")
    for k, v in paths.items():
        print(f"  {k:<11} {v}")
    print(f"score your own question: acute score --probe {out / 'probe'} \"Who wrote Hamlet?\"")
    return paths

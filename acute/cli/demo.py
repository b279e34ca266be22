"""``acute demo``: the whole pipeline on the default model and the built-in questions.

fetch model -> collect a store -> evaluate every estimator by cross-validation -> export a
probe fitted on all records -> score a few live questions with a trust decision.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["DEMO_QUESTIONS", "DEMO_RISK", "run_demo"]

DEMO_QUESTIONS = (
    "What is the capital of France?",
    "What is the chemical symbol for gold?",
    "What is 4821 minus 1937?",
    "Who was the first person to walk on the Moon?",
    "In which year did the Byzantine emperor Basil II die?",
)
DEMO_RISK = 0.5
# one repeat of 5-fold cross-validation keeps the demo within minutes on 2 cores
DEMO_FOLDS, DEMO_REPEATS = 5, 1


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


DEMO_LIMIT = 300


def run_demo(out: Path, limit: int | None = DEMO_LIMIT, model_name: str = "smollm2-135m-instruct",
             n_bootstrap: int = 200, questions=DEMO_QUESTIONS, risk: float = DEMO_RISK,
             load_options: dict | None = None) -> dict:
    """Run the demo into ``out`` and return the paths it wrote (store, evaluation, probe).

    Collects ``limit`` built-in questions drawn evenly from every category with a fixed seed
    (all of them when None; a collection left in ``out`` is resumed), evaluates every estimator
    (six baselines, six ACUTE probes, their stacked variants and ``auto``) by 5-fold
    cross-validation with paired bootstrap intervals (``n_bootstrap`` resamples) of each
    estimator's difference to the best baseline, exports the default estimator
    (``acute-pca10-stacked``, fitted on all records, with the cross-validated comparison of the
    candidates recorded in ``probe.json``) and scores ``questions`` live at risk level
    ``risk``. Prints the collection summary, the results table and one line per scored question
    to stdout, progress to stderr. ``load_options`` go to :func:`acute.models.load_model`
    (``device``, ``dtype``, ``device_map``).
    """
    import numpy as np

    from ..collect import collect
    from ..estimators.probe_file import load_probe
    from ..estimators.registry import DEFAULT_ESTIMATOR
    from ..evaluation import evaluate_store, write_evaluation
    from ..evaluation.training import train_probe
    from ..models import load_model
    from ..scoring.scorer import Scorer
    from ..store import open_store
    from ..tasks import get_task

    out = Path(out)
    t0 = time.perf_counter()
    _say(f"[1/5] loading {model_name} (a first run fetches and converts it into the acute cache)")
    model, tok = load_model(model_name, **(load_options or {}))
    task = get_task("default")
    examples = task.load()
    if limit is not None and limit < len(examples):  # a fixed sample across all categories
        keep = np.random.default_rng(0).choice(len(examples), size=limit, replace=False)
        examples = [examples[i] for i in sorted(keep)]
    _say(f"[2/5] answering {len(examples)} built-in questions while recording every layer")
    summary = collect(model, tok, task, examples, out / "store", model_name=model_name)
    print("\n".join(summary.lines()))

    _say(f"[3/5] evaluating every estimator by {DEMO_FOLDS}-fold cross-validation")
    store = open_store(out / "store")
    result = evaluate_store(store, n_bootstrap=n_bootstrap, cv=DEMO_FOLDS, repeats=DEMO_REPEATS,
                            reliability="best")
    write_evaluation(result, out / "evaluation")
    print()
    print(result.markdown())

    _say(f"[4/5] fitting the default probe ({DEFAULT_ESTIMATOR}) on all {len(store)} records and exporting it")
    trained = train_probe(store)  # the default, with auto's cross-validated comparison recorded
    trained.save(out / "probe")
    auto = trained.auto
    print(f"\n{DEFAULT_ESTIMATOR} exported to {out / 'probe'} (probe.safetensors + probe.json, no pickle); "
          f"best probe by 5-fold cross-validation on these records: {auto.best_}")
    if auto.warning_:
        print(f"warning: {auto.warning_}")

    _say(f"[5/5] scoring live questions at risk level {risk}")
    scorer = Scorer(model, tok, load_probe(out / "probe"))  # asks like the default task
    scored = scorer.generate(list(questions), risk=risk)
    print(f"\nlive scoring with the exported probe: trust iff confidence > risk level {risk}")
    print(f"{'question':<52} {'answer':<24} {'raw':>5} {'probe':>5}  decision")
    for s in scored:
        print(f"{_clip(s.question, 52):<52} {_clip(s.answer, 24):<24} "
              f"{s.raw_confidence:>5.2f} {s.confidence:>5.2f}  {s.decision}")
    paths = {"store": out / "store", "evaluation": out / "evaluation", "probe": out / "probe"}
    print(f"\ndone in {time.perf_counter() - t0:.0f} s. Outputs:")
    for k, v in paths.items():
        print(f"  {k:<11} {v}")
    print(f"score your own question: acute score --probe {out / 'probe'} \"Who wrote Hamlet?\"")
    return paths

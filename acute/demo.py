"""``acute demo``: the whole pipeline on the default model and the built-in questions.

fetch model -> collect a store -> evaluate every estimator on a held-out split -> export a
probe fitted on all records -> score a few live questions with a trust decision.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

DEMO_QUESTIONS = (
    "What is the capital of France?",
    "What is the chemical symbol for gold?",
    "What is 4821 minus 1937?",
)
DEMO_VIEW = "pca10"
DEMO_RISK = 0.5


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_demo(out: Path, limit: int | None = None, model_name: str = "smollm2-135m-instruct",
             n_bootstrap: int = 200) -> dict:
    """Run the demo and return the paths it wrote. Resumes a collection left in ``out``."""
    import numpy as np

    from .collect import collect
    from .evaluate import evaluate_store
    from .models import load_model, model_fingerprint
    from .probes import ActivationProbe, load_probe
    from .scoring import Scorer
    from .store import open_store
    from .tasks import get_task

    out = Path(out)
    t0 = time.perf_counter()
    _say(f"[1/5] loading {model_name} (first run fetches and converts it into the acute cache)")
    model, tok = load_model(model_name)
    task = get_task("default")
    examples = task.load(limit=limit)
    _say(f"[2/5] collecting {len(examples)} built-in questions")
    summary = collect(model, tok, task, examples, out / "store", model_name=model_name)
    print("\n".join(summary.lines()))

    _say("[3/5] evaluating the six baselines and six ACUTE variants on a held-out split")
    store = open_store(out / "store")
    evaluate_store(store, out_dir=out / "evaluation", n_bootstrap=n_bootstrap)
    print((out / "evaluation" / "results.md").read_text())

    _say(f"[4/5] exporting a {DEMO_VIEW} probe fitted on all {len(store)} records")
    probe = ActivationProbe(view=DEMO_VIEW, random_state=0)
    probe.fit(store.layer_means, store.correct, confidence=store.raw_confidence)
    probe.save(out / "probe", model_name=model_name, model_fingerprint=model_fingerprint(model),
               training_summary={"store": str((out / "store").resolve()), "n": len(store),
                                 "accuracy": float(np.mean(store.correct)),
                                 "generation": store.manifest.get("generation")})

    _say(f"[5/5] scoring live questions at risk level {DEMO_RISK}")
    scorer = Scorer(model, tok, load_probe(out / "probe"))
    for s in scorer.generate(list(DEMO_QUESTIONS), risk=DEMO_RISK):
        print(f"- {s.answer!r}: raw {s.raw_confidence:.2f}, probe {s.confidence:.2f} -> {s.decision}")
    paths = {"store": out / "store", "evaluation": out / "evaluation", "probe": out / "probe"}
    print(f"\ndone in {time.perf_counter() - t0:.0f} s. Outputs:")
    for k, v in paths.items():
        print(f"  {k:<11} {v}")
    return paths

#!/usr/bin/env python
"""Train a probe from logged (prompt, response, label) rows: no generation needed.

    python examples/train_from_logs.py --logs my-logs.jsonl          # your own logs
    python examples/train_from_logs.py                               # a demo log, SmolLM2

A log row is one JSON line: ``id``, ``prompt`` (the prompt exactly as your serving engine sent
it) or ``messages`` (chat messages; the model's chat template is applied), ``response`` (what
the engine answered) and ``label`` (true/false, e.g. a human's verdict). The same command line:

    acute collect --responses my-logs.jsonl --out runs/logs-store
    acute export --store runs/logs-store --out runs/logs-probe

1. record: every response is fed to the model after its prompt in one batched forward pass
   (teacher forcing); the hidden states the recorder would have pooled had the model generated
   that answer, and its raw confidence, go to a store with the row's label.
2. evaluate: the raw confidence, Platt scaling and the default probe by 5-fold cross-validation.
3. fit the default probe on every record and save it with the store's settings, so that
   ``Scorer.score_responses`` formats prompts the way the logs did
   (see examples/gate_other_engine.py).

Without ``--logs`` a demo log is written first: built-in questions, each answered either with
its gold answer (label true) or with another question's (label false), in the model's prompt
format.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from acute.estimators.inputs import Inputs
import acute
from acute.collect import collect_responses, collection_settings
from acute.estimators import DEFAULT_ESTIMATOR, AutoEstimator
from acute.evaluation import evaluate_store
from acute.models import format_prompt
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct", help="card name, folder or .gguf")
parser.add_argument("--logs", default=None, help="JSONL of id, prompt|messages, response, label")
parser.add_argument("--limit", type=int, default=200, help="rows of the demo log (without --logs)")
parser.add_argument("--trees", type=int, default=500, help="random-forest size")
parser.add_argument("--out", default="runs/train-from-logs")
args = parser.parse_args()
out = Path(args.out)
model, tokenizer = acute.load_model(args.model)


def write_demo_log(path: Path, limit: int) -> Path:
    """Built-in questions answered with their gold answer or, every other row, with the next
    question's; labelled by the task's own check (standing in for a human's verdict)."""
    task = get_task("default")
    examples = task.load(limit=limit)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i, ex in enumerate(examples):
            answer = examples[(i + i % 2) % len(examples)].answers[0]
            row = {"id": ex.id, "prompt": format_prompt(tokenizer, ex.question),
                   "response": answer, "label": bool(task.is_correct(ex, answer))}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


logs = Path(args.logs) if args.logs else write_demo_log(out / "demo-logs.jsonl", args.limit)

# 1. record the logged responses (resumable: rerunning skips the rows already in the store)
summary = collect_responses(model, tokenizer, logs, out / "store")
print("\n".join(summary.lines()))
store = acute.open_store(out / "store")

# 2. cross-validate the probe against the model's own confidence and Platt scaling
result = evaluate_store(store, out_dir=out / "evaluation", n_bootstrap=200,
                        estimators=["raw", "platt", DEFAULT_ESTIMATOR],
                        probe_params={"n_estimators": args.trees})
print(result.to_markdown())

# 3. fit the default probe on every record and save it with the store's settings
auto = AutoEstimator(refit=DEFAULT_ESTIMATOR, probe_params={"n_estimators": args.trees})
auto.fit(Inputs.of(np.asarray(store.layer_means, dtype=np.float32), store.raw_confidence), store.correct)
auto.estimator_.save(out / "probe", acute.ModelIdentity.from_model(model),
                     training_summary=collection_settings(store.manifest),  # how the prompts were sent
                     selection=auto.selection())
print(f"{DEFAULT_ESTIMATOR} trained on {len(store)} logged responses saved to {out / 'probe'}")

#!/usr/bin/env python
"""Train a probe for a model: collect -> cross-validate -> choose -> fit -> save.

    python examples/train_probe.py                         # SmolLM2, 200 built-in questions
    python examples/train_probe.py --model path/to/model --limit 600 --out runs/my-probe

The probe shipped in models/smollm2-135m-instruct/probe is this script's probe on all 600
built-in questions, made with the command line (the same fit, without the evaluation step):

    acute collect --model smollm2-135m-instruct --task default --batch-size 16 --out runs/i13/smollm2-default
    acute export --store runs/i13/smollm2-default --out models/smollm2-135m-instruct/probe

1. collect: the model answers the built-in questions while every layer's hidden states are
   pooled over the answer tokens; each answer is labelled correct or wrong (a store on disk;
   rerunning resumes it).
2. evaluate: the raw confidence, two classic calibrators, the plain and stacked probe of one
   view and ``auto`` by 5-fold x 2 cross-validation, with each one's paired difference to the
   best baseline (``acute evaluate`` runs every estimator).
3. fit the default probe (``acute-pca10-stacked``) on every record and save it:
   ``probe.safetensors`` + ``probe.json`` (with the cross-validated scores of every candidate
   probe and baseline, and a warning if a baseline scored above it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from acute.estimators.inputs import Inputs
import acute
from acute.collect import collect, collection_settings
from acute.estimators import AUTO, DEFAULT_ESTIMATOR, AutoEstimator
from acute.evaluation import evaluate_store
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct", help="card name, folder or .gguf")
parser.add_argument("--limit", type=int, default=200, help="built-in questions to collect")
parser.add_argument("--view", default="pca10", help="view shown plain and stacked in the table: "
                    "pca10, pca20, cosine, early, mid or late")
parser.add_argument("--trees", type=int, default=500, help="random-forest size")
parser.add_argument("--out", default="runs/train-probe")
parser.add_argument("--store", default=None, help="store folder (default: OUT/store); resumed if present")
parser.add_argument("--probe-out", default=None, help="probe folder (default: OUT/probe)")
args = parser.parse_args()
out = Path(args.out)
store_dir = Path(args.store) if args.store else out / "store"
probe_dir = Path(args.probe_out) if args.probe_out else out / "probe"

# 1. collect
model, tokenizer = acute.load_model(args.model)
task = get_task("default")
summary = collect(model, tokenizer, task, task.load(limit=args.limit), store_dir)
print("\n".join(summary.lines()))
store = acute.open_store(store_dir)  # layer_means [n, L+1, d], correct, raw_confidence

# 2. cross-validate: every record scored out of fold, paired differences to the best baseline
names = list(dict.fromkeys(["raw", "platt", "isotonic", f"acute-{args.view}", f"acute-{args.view}-stacked",
                             DEFAULT_ESTIMATOR, AUTO]))
result = evaluate_store(store, out_dir=out / "evaluation", n_bootstrap=200, estimators=names,
                        probe_params={"n_estimators": args.trees})
print(result.to_markdown())

# 3. fit the default probe on every record (with the cross-validated comparison of the candidate
#    probes and the baselines recorded beside it) and save it, with the model's identity and
#    the collection settings
auto = AutoEstimator(refit=DEFAULT_ESTIMATOR, probe_params={"n_estimators": args.trees})
auto.fit(Inputs.of(np.asarray(store.layer_means, dtype=np.float32), store.raw_confidence), store.correct)
auto.estimator_.save(probe_dir, acute.ModelIdentity.from_model(model),
                     training_summary=collection_settings(store.manifest),  # how to prompt live
                     metrics={"cross_validated": {r["estimator"]: r for r in result.rows},
                              "split": result.split},
                     selection=auto.selection())
print(f"{DEFAULT_ESTIMATOR} saved to {probe_dir} (best probe by cross-validation: {auto.best_})")
if auto.warning_:
    print(f"warning: {auto.warning_}")

#!/usr/bin/env python
"""Train an ACUTE probe for a model: collect -> evaluate -> fit -> save.

    python examples/train_probe.py                         # SmolLM2, 200 built-in questions
    python examples/train_probe.py --model path/to/model --limit 600 --out runs/my-probe

The probe shipped in models/smollm2-135m-instruct/probe was made with

    python examples/train_probe.py --limit 200 --store runs/sanity/default \
        --probe-out models/smollm2-135m-instruct/probe --out runs/shipped-probe

1. collect: the model answers the built-in questions while every layer's hidden states are
   pooled over the answer tokens; each answer is labelled correct or wrong (a store on disk;
   rerunning resumes it).
2. evaluate: the raw confidence, two classic calibrators and the probe on a held-out split
   (``acute evaluate`` runs all six baselines and six probe variants).
3. fit the probe on every record and save it: ``probe.safetensors`` + ``probe.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import acute
from acute.collect import collect, collection_settings
from acute.evaluate import evaluate_store
from acute.probes import ActivationProbe
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct", help="card name, folder or .gguf")
parser.add_argument("--limit", type=int, default=200, help="built-in questions to collect")
parser.add_argument("--view", default="pca10", help="pca10, pca20, cosine, early, mid or late")
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
summary = collect(model, tokenizer, task, task.load(limit=args.limit), store_dir,
                  model_name=args.model)
print("\n".join(summary.lines()))
store = acute.open_store(store_dir)  # layer_means [n, L+1, d], correct, raw_confidence

# 2. evaluate on a held-out split (by record id)
result = evaluate_store(store, out_dir=out / "evaluation", n_bootstrap=200,
                        estimators=["raw", "platt", "isotonic", f"acute-{args.view}"],
                        probe_params={"n_estimators": args.trees})
print(result.to_markdown())

# 3. fit on everything and save, with the model's fingerprint and the collection settings
probe = ActivationProbe(view=args.view, n_estimators=args.trees)
probe.fit(np.asarray(store.layer_means, dtype=np.float32), store.correct,
          confidence=store.raw_confidence)
probe.save(probe_dir, model_name=args.model, model_fingerprint=acute.model_fingerprint(model),
           training_summary=collection_settings(store.manifest),  # how to prompt live
           metrics={"held_out": result.row(f"acute-{args.view}"), "split": result.split})
print(f"probe saved to {probe_dir}")

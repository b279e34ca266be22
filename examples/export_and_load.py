#!/usr/bin/env python
"""Export a fitted probe and load it back in a fresh process: the same probabilities, no pickle.

    python examples/export_and_load.py                      # SmolLM2, 100 built-in questions
    python examples/export_and_load.py --store runs/train-probe/store

An exported probe is two files: ``probe.safetensors`` (tree nodes, PCA components) and
``probe.json`` (manifest, sha256 of the arrays). ``acute.load_probe`` scores with numpy only,
so a deployment needs neither scikit-learn pickles nor the training code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from acute.estimators.inputs import Inputs
import acute
from acute.collect import collect
from acute.estimators import ActivationProbe
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct")
parser.add_argument("--limit", type=int, default=100, help="questions to collect (without --store)")
parser.add_argument("--store", default=None, help="an existing store instead of collecting")
parser.add_argument("--trees", type=int, default=100)
parser.add_argument("--out", default="runs/export-and-load")
args = parser.parse_args()
out = Path(args.out)

store_dir = Path(args.store) if args.store else out / "store"
if not args.store:
    model, tokenizer = acute.load_model(args.model)
    task = get_task("default")
    collect(model, tokenizer, task, task.load(limit=args.limit), store_dir)
store = acute.open_store(store_dir)
X = np.asarray(store.layer_means, dtype=np.float32)

probe = ActivationProbe(view="pca10", n_estimators=args.trees)
probe.fit(Inputs.of(X, store.raw_confidence), store.correct)
probe.save(out / "probe", acute.ModelIdentity.from_manifest(store.manifest))  # the store's model
here = probe.predict_proba(Inputs.of(X, store.raw_confidence))[:, 1]

# A fresh interpreter that knows nothing of the fitted object: load the files and score.
fresh = """
import json, sys
import numpy as np
import acute
from acute.estimators import Inputs
probe = acute.load_probe(sys.argv[1])
store = acute.open_store(sys.argv[2])
p = probe.predict_proba(Inputs.of(np.asarray(store.layer_means, dtype=np.float32), store.raw_confidence))
print(json.dumps(p[:, 1].tolist()))
"""
proc = subprocess.run([sys.executable, "-c", fresh, str(out / "probe"), str(store_dir)],
                      capture_output=True, text=True, check=True)
there = np.array(json.loads(proc.stdout.strip().splitlines()[-1]))
diff = float(np.max(np.abs(here - there)))
print(f"{len(here)} records: largest difference between the fitted and the reloaded probe = {diff:.1e}")
if diff > 1e-12:
    sys.exit("the reloaded probe disagrees with the fitted one")

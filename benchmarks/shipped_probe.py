"""Does a shipped probe beat Platt scaling on records it was not fitted on?

Usage:
    python benchmarks/shipped_probe.py --probe models/smollm2-135m-instruct/probe \\
        --store STORE [--train-builtin N] [--n-bootstrap 1000]

``STORE`` is a store of the probe's model and task (for the shipped SmolLM2 probe: the built-in
questions, e.g. ``runs/evidence/smollm2-135m-instruct/default/store`` from
``examples/evidence.toml``). The records the probe was fitted on are those of its own split
when ``acute train`` fitted it on this store (``training_summary.split``: ``split_ids`` with its
test fraction and seed), or the first ``N`` built-in questions (``--train-builtin N``, for a
probe fitted on an older, smaller store). Those records fit Platt scaling of the raw
confidence, the same training set the probe had, and every other record is the test set. Prints auc-euro (all), smECE and AUROC of the probe,
the raw confidence and Platt, and the probe's paired differences to Platt (95% bootstrap
intervals, the same resampled records for both). README's "Models" section quotes the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources

import numpy as np
from acute.estimators.inputs import Inputs


def builtin_ids(n: int) -> list[str]:
    """Ids of the first ``n`` built-in questions (``acute/data/questions.jsonl`` order)."""
    lines = resources.files("acute").joinpath("data/questions.jsonl").read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines if line.strip()]
    if n > len(ids):
        raise SystemExit(f"--train-builtin {n} is more than the {len(ids)} built-in questions")
    return ids[:n]


def main(argv=None) -> int:
    from acute.estimators.calibration import make_calibrator
    from acute.evaluation import evaluate_predictions
    from acute.store.pooling import store_states
    from acute.estimators.probe_file import load_probe
    from acute.store import open_store

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--train-builtin", type=int, default=None,
                    help="the probe was fitted on the first N built-in questions (default: its own split)")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    probe = load_probe(args.probe)
    store = open_store(args.store)
    if args.train_builtin:
        n_fit = args.train_builtin
        fitted_on = set(builtin_ids(n_fit))
        in_train = np.array([str(i) in fitted_on for i in store.ids])
    else:
        from acute.evaluation import split_ids

        split = probe.training_summary.get("split") or {}
        if not split.get("test_fraction"):
            raise SystemExit("the probe was fitted on all records of its store: give --train-builtin N")
        in_train = split_ids(store.ids, test_fraction=split["test_fraction"], seed=split["seed"])[0]
        n_fit = int(probe.training_summary["n_train"])
    if in_train.sum() != n_fit:
        raise SystemExit(f"{args.store} holds {in_train.sum()} of the {n_fit} records the probe was fitted "
                         "on; it must hold all of them (Platt is fitted on the same records)")
    tr, te = np.flatnonzero(in_train), np.flatnonzero(~in_train)
    if te.size == 0:
        raise SystemExit(f"{args.store} holds no record the probe was not fitted on")
    raw, y = store.raw_confidence, store.correct.astype(int)
    states = np.asarray(store_states(store, probe.pooling)[te], dtype=np.float32)
    preds = {
        "probe": probe.predict_proba(Inputs.of(states, raw[te], pooling=probe.pooling))[:, 1],
        "raw": raw[te],
        "platt": make_calibrator("platt").fit(raw[tr], y[tr]).predict_proba(raw[te])[:, 1],
    }
    rows = evaluate_predictions(preds, y[te], n_bootstrap=args.n_bootstrap, seed=args.seed, reference="platt")
    print(f"{args.probe} ({probe.view}, calibration {probe.calibration}, pooling {probe.pooling}) on "
          f"{te.size} records of {args.store} it was not fitted on (accuracy {y[te].mean():.3f}); "
          f"Platt fitted on the {tr.size} records the probe was fitted on\n")
    print("| estimator | auc-euro all | Δ vs platt [95% paired] | smECE | Δ smECE vs platt [95% paired] | AUROC |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        def iv(key):
            return (f"{r[f'diff_{key}']:+.4f} [{r[f'diff_{key}_ci_low']:+.4f}, {r[f'diff_{key}_ci_high']:+.4f}]"
                    if args.n_bootstrap else f"{r[f'diff_{key}']:+.4f}")
        print(f"| {r['estimator']} | {r['auc_euro_all']:.4f} | {iv('auc_euro_all')} | {r['smece']:.4f} | "
              f"{iv('smece')} | {r['auroc']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a change of dtype costs a probe, and what recertifying buys back (issue 45 item 2).

Usage:
    python benchmarks/domain_shift.py collect --out runs/domain-shift [--train 800] [--test 400] [--recert 500]
    python benchmarks/domain_shift.py measure --out runs/domain-shift [--max-error 0.2] [--delta 0.05] [--draws 20]

``collect`` writes three stores of SmolLM2-135M-Instruct on the built-in questions task
(``acute collect --model smollm2-135m-instruct --model-dtype DTYPE`` on disjoint slices of the
questions, shuffled once with seed 0, greedy, the task's settings; one thread is enough):

* ``float32-train``: the first ``--train`` questions, the model in float32 (the probe's domain);
* ``float32-test``: the next ``--test`` questions in float32 (the unshifted reference);
* ``bfloat16-test``: the same ``--test`` questions with the model loaded in bfloat16;
* ``bfloat16-recert``: the ``--recert`` questions after those, in bfloat16 (labels for
  ``acute recertify``).

``measure`` exports the default probe from ``float32-train`` with a certificate at
``--max-error`` / ``--delta`` (``acute export``), then scores the test questions:

* float32 test states (no shift);
* bfloat16 test states with the float32 probe as it is (the shift: its certificate is what the
  Scorer refuses; shown here for what it would have given);
* bfloat16 test states after ``acute recertify`` on 200 and on 500 bfloat16 labels, threshold
  only and with ``--restack`` (the stacker refitted too), ``--draws`` random draws of the 200
  (the 500 are all of them).

Columns: auc-euro (all), smECE, the certified threshold, the share of test answers it trusts
and the realised precision among them (1 - error, with an exact 95% interval), which the
certificate promises to be at least 1 - max_error with probability 1 - delta. Before the table,
what the change does on the same test questions (:func:`shift`): answers and labels that differ,
the pooled states' relative L2 difference per layer, the probe's confidence change and the trust
decisions that flip. Everything goes to ``OUT/domain_shift.json``; ``benchmarks/domain_shift.md``
holds the measured run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "smollm2-135m-instruct"
DTYPES = {"float32-train": "float32", "float32-test": "float32", "bfloat16-test": "bfloat16",
          "bfloat16-recert": "bfloat16"}


def _slices(n_train: int, n_test: int, n_recert: int) -> dict[str, slice]:
    test = slice(n_train, n_train + n_test)
    return {"float32-train": slice(0, n_train), "float32-test": test, "bfloat16-test": test,
            "bfloat16-recert": slice(n_train + n_test, n_train + n_test + n_recert)}


def collect_stores(out: Path, n_train: int, n_test: int, n_recert: int, batch_size: int) -> None:
    from acute.collect import collect
    from acute.models import load_model
    from acute.tasks import get_task

    task = get_task("default")
    examples = task.load()
    # the questions file is grouped by kind: disjoint slices of one shuffled order are alike
    examples = [examples[i] for i in np.random.default_rng(0).permutation(len(examples))]
    if n_train + n_test + n_recert > len(examples):
        raise SystemExit(f"the built-in questions task has {len(examples)} questions; asked for "
                         f"{n_train + n_test + n_recert}")
    slices = _slices(n_train, n_test, n_recert)
    for dtype in ("float32", "bfloat16"):
        model, tok = load_model(MODEL, dtype=dtype)
        for name, part in slices.items():
            if DTYPES[name] != dtype:
                continue
            start = time.perf_counter()
            summary = collect(model, tok, task, examples[part], out / name, model_name=MODEL,
                              batch_size=batch_size, progress=False)
            print(f"{name}: {summary.records} records, accuracy {summary.accuracy:.3f}, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
        del model


def _row(name: str, probe, store, labels: str = "") -> dict:
    """auc-euro, smECE and, for a valid certificate, its threshold, coverage and realised
    precision of ``probe`` on ``store``."""
    from acute.metrics import METRICS

    X = np.asarray(store.states(probe.pooling), dtype=np.float32)
    y = np.asarray(store.correct).astype(int)
    conf = probe.predict_proba(X, confidence=store.raw_confidence)[:, 1]
    out = {"setting": name, "labels": labels, "n": int(y.size), "accuracy": float(y.mean()),
           "auc_euro": float(METRICS["auc_euro_all"].fn(conf, y)), "smece": float(METRICS["smece"].fn(conf, y)),
           "threshold": None, "coverage": None, "precision": None}
    cert = probe.certificates[0] if probe.certificates else None
    if cert is not None and cert["valid"]:
        from scipy.stats import binomtest

        trusted = conf >= cert["threshold"]
        out.update(threshold=float(cert["threshold"]), coverage=float(trusted.mean()),
                   precision=float(y[trusted].mean()) if trusted.any() else None, n_trusted=int(trusted.sum()))
        if trusted.any():
            ci = binomtest(int(y[trusted].sum()), int(trusted.sum())).proportion_ci(0.95, method="exact")
            out["precision_ci"] = [float(ci.low), float(ci.high)]
    return out


def shift(probe, a, b) -> dict:
    """How the records of the same questions differ between stores ``a`` and ``b`` (float32 and
    bfloat16): answers, labels, pooled states (relative L2 per layer) and the probe's confidence."""
    ids_b = {str(i): k for k, i in enumerate(b.ids)}
    pairs = [(k, ids_b[str(i)]) for k, i in enumerate(a.ids) if str(i) in ids_b]
    ia, ib = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    ra, rb = a.records, b.records
    xa = np.asarray(a.states(probe.pooling), dtype=np.float64)[ia]
    xb = np.asarray(b.states(probe.pooling), dtype=np.float64)[ib]
    same_text = np.array([ra[i]["generation"] == rb[j]["generation"] for i, j in pairs])
    rel = np.linalg.norm(xb - xa, axis=2) / np.maximum(np.linalg.norm(xa, axis=2), 1e-12)  # [n, L+1]
    ca = probe.predict_proba(xa.astype(np.float32), confidence=np.asarray(a.raw_confidence)[ia])[:, 1]
    cb = probe.predict_proba(xb.astype(np.float32), confidence=np.asarray(b.raw_confidence)[ib])[:, 1]
    ya, yb = np.asarray(a.correct)[ia], np.asarray(b.correct)[ib]
    out = {"n": len(pairs), "same_answer": float(same_text.mean()), "label_flips": int((ya != yb).sum()),
           "state_rel_l2_median": float(np.median(rel)), "state_rel_l2_same_answer_median":
               float(np.median(rel[same_text])) if same_text.any() else None,
           "state_rel_l2_layer_medians": [float(v) for v in np.median(rel, axis=0)],
           "confidence_abs_diff_mean": float(np.abs(cb - ca).mean()),
           "confidence_abs_diff_same_answer_mean": float(np.abs(cb - ca)[same_text].mean()) if same_text.any() else None,
           "confidence_abs_diff_max": float(np.abs(cb - ca).max())}
    cert = probe.certificates[0] if probe.certificates else None
    if cert is not None and cert["valid"]:
        t = cert["threshold"]
        out["decision_flips"] = int(((ca >= t) != (cb >= t)).sum())
    return out


def _mean_row(rows: list[dict]) -> dict:
    """The mean of ``rows`` (draws); the certificate columns over the draws that certified, with
    ``certified`` the share of draws that did."""
    out = dict(rows[0])
    for key in ("auc_euro", "smece"):
        out[key] = float(np.mean([r[key] for r in rows]))
    ok = [r for r in rows if r["threshold"] is not None]
    out["certified"] = len(ok) / len(rows)
    for key in ("threshold", "coverage"):
        out[key] = float(np.mean([r[key] for r in ok])) if ok else None
    prec = [r["precision"] for r in ok if r["precision"] is not None]
    out["precision"] = float(np.mean(prec)) if prec else None
    out["precision_min"] = float(np.min(prec)) if prec else None
    out["below_target"] = (sum(p < 1 - out["max_error"] for p in prec) / len(prec)) if prec else None
    return out


def measure(out: Path, max_error: float, delta: float, draws: int, seed: int) -> list[dict]:
    from acute.estimators import load_probe
    from acute.estimators.registry import DEFAULT_ESTIMATOR
    from acute.evaluation.recertify import recertify
    from acute.evaluation.training import train_probe
    from acute.store import open_store

    stores = {name: open_store(out / name) for name in DTYPES}
    start = time.perf_counter()
    trained = train_probe(stores["float32-train"], DEFAULT_ESTIMATOR, max_error=max_error, delta=delta,
                          certify_backend="binomial", seed=seed)
    trained.save(out / "probe-float32")
    probe = load_probe(out / "probe-float32")
    cert = probe.certificates[0]
    print(f"probe {trained.label} fitted on {trained.n_train} float32 records "
          f"({time.perf_counter() - start:.0f} s); certificate at max_error {max_error:g}, delta {delta:g}: "
          + (f"threshold {cert['threshold']:g}" if cert["valid"] else f"none ({cert['reason']})"), flush=True)
    rows = [_row("float32 (its domain)", probe, stores["float32-test"], "-"),
            _row("bfloat16, as fitted (refused by the Scorer)", probe, stores["bfloat16-test"], "-")]
    moved = shift(probe, stores["float32-test"], stores["bfloat16-test"])
    print(f"float32 -> bfloat16 on the same {moved['n']} test questions: {moved}", flush=True)
    recert = stores["bfloat16-recert"]
    rng = np.random.default_rng(seed)
    for restack in (False, True):
        for n in (200, 500):
            n = min(n, len(recert))
            picks = [np.arange(len(recert))] if n == len(recert) else \
                [np.sort(rng.choice(len(recert), n, replace=False)) for _ in range(draws)]
            got = []
            for idx in picks:
                done = recertify(probe, recert.select(idx), max_error=max_error, delta=delta, restack=restack,
                                 backend="binomial", seed=seed)
                got.append({**_row("bfloat16, re-certified" + (" and restacked" if restack else ""),
                                   done.probe, stores["bfloat16-test"],
                                   f"{n}" + (f" ({len(picks)} draws)" if len(picks) > 1 else "")),
                            "max_error": max_error})
            rows.append(_mean_row(got))
            print(rows[-1], flush=True)
    (out / "domain_shift.json").write_text(json.dumps({"max_error": max_error, "delta": delta,
                                                       "fwer": cert["fwer"], "shift": moved, "rows": rows},
                                                      indent=2))
    print(f"certification: {cert['fwer']} (acute.metrics.certify's default), binomial backend, "
          f"{time.perf_counter() - start:.0f} s in all")
    print(_table(rows, max_error, delta))
    return rows


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _table(rows: list[dict], max_error: float, delta: float) -> str:
    lines = [f"| setting | labels | auc-euro | smECE | certified | threshold | coverage | realised precision "
             f"(target >= {1 - max_error:g}) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        share = r.get("certified", 1.0 if r["threshold"] is not None else 0.0)
        prec = _fmt(r["precision"])
        if r.get("precision_ci") and not r["labels"].endswith("draws)"):
            prec += f" [{r['precision_ci'][0]:.2f}, {r['precision_ci'][1]:.2f}] of {r['n_trusted']}"
        if r.get("precision_min") is not None and r["labels"].endswith("draws)"):
            prec += f" (min {r['precision_min']:.3f}; below target in {r['below_target']:.0%} of draws)"
        lines.append(f"| {r['setting']} | {r['labels']} | {r['auc_euro']:.4f} | {r['smece']:.4f} | {share:.2f} | "
                     f"{_fmt(r['threshold'], '.3g')} | {_fmt(r['coverage'])} | {prec} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--train", type=int, default=800)
    c.add_argument("--test", type=int, default=400)
    c.add_argument("--recert", type=int, default=500)
    c.add_argument("--batch-size", type=int, default=16)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--max-error", type=float, default=0.2)
    m.add_argument("--delta", type=float, default=0.05)
    m.add_argument("--draws", type=int, default=20)
    m.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        collect_stores(args.out, args.train, args.test, args.recert, args.batch_size)
    else:
        measure(args.out, args.max_error, args.delta, args.draws, args.seed)


if __name__ == "__main__":
    main()

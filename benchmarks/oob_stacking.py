#!/usr/bin/env python
"""Out-of-bag against 5-fold stacking, paired on an evaluation's own folds (issue 28).

For each ``PAIR`` folder (``PAIR/store`` and its evaluation ``PAIR/eval``, as ``acute run``
lays them out; ``--eval-name`` for another folder name), the stacked probes named by
``--estimators`` (default the default, ``acute-pca10-stacked``) are refitted with
``oof = "oob"`` on exactly the evaluation's outer folds (``folds.json``: the same training and
test records), the probe parameters and the seed the evaluation used, and compared with the
evaluation's own out-of-fold predictions of the 5-fold probe (``predictions*.csv``): auc-euro
(all) and smECE, the paired difference with its bootstrap interval (the same resampled records
for both) and the corrected resampled t-interval over folds x repeats. Nothing else is refitted.

The decision rule these numbers feed is written in ``benchmarks/oob_stacking.md`` (before the
numbers existed).

Usage::

    python benchmarks/oob_stacking.py runs/evidence/smollm2-135m-instruct/default \\
        runs/evidence/qwen2.5-coder-1.5b-instruct/{default,mmlu,sciq-mc,triviaqa,truthfulqa-gen} \\
        --out benchmarks/oob_stacking-results.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def evaluation_folds(eval_dir: Path, ids: Sequence[str], repeats: int | None):
    """The evaluation's outer folds as ``[repeat][(train, test)]`` index arrays over ``ids``
    (:func:`acute.evaluation.read_folds`), its seed and probe parameters; SystemExit naming the
    file on a mismatch."""
    from acute.errors import InputError
    from acute.evaluation import read_folds

    try:
        folds = read_folds(eval_dir, ids)[: repeats or None]
    except InputError as e:
        raise SystemExit(str(e)) from None
    saved = json.loads((eval_dir / "results.json").read_text(encoding="utf-8"))
    return folds, int(saved["split"]["seed"]), dict(saved["params"].get("probe_params") or {})


def pair_rows(pair: Path, names: Sequence[str], args) -> list[str]:
    from acute.evaluation import read_predictions
    from acute.evaluation.crossval import cross_val_predictions, inputs_for
    from acute.evaluation.table import evaluate_predictions
    from acute.store import open_store

    store = open_store(pair / "store")
    eval_dir = pair / args.eval_name
    folds, seed, probe_params = evaluation_folds(eval_dir, store.ids, args.repeats)
    y = np.asarray(store.correct).astype(np.int64)
    raw = np.asarray(store.raw_confidence, dtype=np.float64)
    ids, _, cv = read_predictions(eval_dir, names)
    if ids != [str(i) for i in store.ids]:
        raise SystemExit(f"{eval_dir}: its predictions are not of the records of {pair / 'store'}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    oob = cross_val_predictions(list(names), inputs_for(store, names), y, folds, random_state=seed,
                                n_jobs=args.n_jobs, probe_params={**probe_params, "oof": "oob"}, timings=timings)
    wall = time.perf_counter() - t0
    m = store.manifest
    out = []
    for name in names:
        preds = {name: cv[name][: len(folds)], f"{name} (oob)": oob[name]}
        rows = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=args.n_bootstrap, seed=seed,
                                                                reference=name, folds=folds)}
        a, b = rows[name], rows[f"{name} (oob)"]
        out.append(f"| {m.get('model')} | {m.get('task')} | {len(y)} | {name} | {len(folds[0])}x{len(folds)} "
                   f"| {a['auc_euro_all']:.4f} | {b['auc_euro_all']:.4f} "
                   f"| {b['diff_auc_euro_all']:+.4f} [{b['diff_auc_euro_all_ci_low']:+.4f}, "
                   f"{b['diff_auc_euro_all_ci_high']:+.4f}] "
                   f"| [{b['diff_auc_euro_all_t_low']:+.4f}, {b['diff_auc_euro_all_t_high']:+.4f}] "
                   f"| {a['smece']:.4f} | {b['smece']:.4f} | {timings.get(name, wall):.0f} |")
    return out


def write_table(lines: list[str], pairs: Sequence[str], rows_of, out: str | None) -> None:
    """Print the table's head ``lines``, then each pair's rows (``rows_of(Path(pair))``) as they
    come; with ``out``, also write the whole table there."""
    print("\n".join(lines), flush=True)
    for pair in pairs:
        rows = rows_of(Path(pair))
        print("\n".join(rows), flush=True)
        lines += rows
    if out:
        Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pairs", nargs="+", help="PAIR folders holding store/ and the evaluation folder")
    p.add_argument("--eval-name", default="eval", help="the evaluation folder inside each PAIR (default %(default)s)")
    p.add_argument("--estimators", default="acute-pca10-stacked",
                   help="comma-separated stacked probes (or question-only) to refit out of bag")
    p.add_argument("--repeats", type=int, default=None, help="the evaluation's first R repeats only (default: all)")
    p.add_argument("--n-bootstrap", type=int, default=1000)
    p.add_argument("--n-jobs", type=int, default=None, help="forest threads (default: all cores)")
    p.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    lines = [f"`python benchmarks/oob_stacking.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             "| model | task | records | probe | folds x repeats | auc-euro 5-fold | auc-euro oob "
             "| oob - 5-fold [95% paired bootstrap] | corrected t 95% | smECE 5-fold | smECE oob | oob fit s |",
             "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    write_table(lines, args.pairs, lambda pair: pair_rows(pair, names, args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What deciding before generating costs and saves: the two-stage gate on stores (issue 30).

Usage:
    python benchmarks/precheck.py --store DIR [--store DIR ...] [--thresholds 0.1,0.2,0.3,0.4,0.5]
        [--estimator acute-pca10-stacked] [--cv 5] [--repeats 1] [--seed 0] [--n-estimators N]
        [--n-jobs N] [--n-bootstrap 1000] [--prompt-pass-cost 1.0] [--out benchmarks/precheck.md]

For each store (it must keep the last-prompt states: collected by this acute, or re-recorded
with ``acute rerecord OLD --out NEW``), in one run: every record gets out-of-fold predictions
(stratified k-fold x repeats grouped by id, :func:`acute.evaluation.crossval.cv_folds`; the same
folds for every row) from the answer probe (``--estimator``), the question-only probe
(``question-only``: the PCA-10 forest over the last-prompt states, no raw confidence, what
``acute export --with-precheck`` ships) and Platt scaling of the raw confidence. The two-stage policy
at a precheck threshold u0 answers a record only when its question-only P(correct) > u0 and
then trusts it iff the answer probe's confidence > u; a record skipped before generating counts
as an abstention at every risk level u (its confidence is 0). Per u0 the table gives:

* auc-euro (all) of the two-stage policy and its paired difference to the answer probe alone
  (95% bootstrap interval, the same resampled records for every row: acute.evaluation.table);
* the fraction of generations skipped, and of the correct answers among them (what the gate
  throws away);
* the wall time saved, **estimated** from the store's recorded token counts (not measured):
  generating a record costs one prompt pass plus ``n_tokens - 1`` decoding steps, the precheck
  one prompt pass for every record (the ones it lets through pay their prompt twice), and a
  prompt pass costs ``--prompt-pass-cost`` decoding steps (default 1: a short prompt's pass
  and a decoding step both read every weight once, which dominates on a GPU at small batch; on
  a CPU a long prompt costs more, so raise it there). Saved = 1 - (two-stage cost / generating
  everything).

With ``--evaluation EVAL_DIR`` (one per ``--store``, in the same order) nothing is fitted: the
out-of-fold predictions of every repeat that ``acute evaluate`` (or ``acute run``'s evaluate
stage) wrote for these rows (``predictions.csv``, ``predictions-repeat*.csv``) are read instead,
so the gate is measured on exactly the evaluation's folds.

The rows of the answer probe alone, the question-only probe alone and Platt are printed above
for reference. Writes ``--out`` (default ``benchmarks/precheck.md``, one section per store)
and prints it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_THRESHOLDS = "0.1,0.2,0.3,0.4,0.5"
QUESTION_ONLY = "question-only"
BASELINE = "platt"


def two_stage(answer: np.ndarray, question: np.ndarray, u0: float) -> np.ndarray:
    """The two-stage policy's confidences ``[repeats, n]``: the answer probe's where the
    question-only P(correct) exceeds ``u0``, else 0 (skipped: abstain at every risk level)."""
    return np.where(question > u0, answer, 0.0)


def saved_fraction(skipped: np.ndarray, n_tokens: np.ndarray, prompt_pass_cost: float) -> float:
    """Estimated share of generation time saved (see the module doc): ``skipped`` bool ``[n]``,
    ``n_tokens`` the recorded generated tokens per record, in decoding-step units."""
    generate = prompt_pass_cost + np.maximum(n_tokens - 1, 0)
    everything = float(generate.sum())
    gated = prompt_pass_cost * n_tokens.size + float(generate[~skipped].sum())
    return 1.0 - gated / everything


def evaluation_predictions(eval_dir: str | Path, ids, names) -> dict[str, np.ndarray]:
    """``{name: [repeats, n]}``: an evaluation's out-of-fold predictions of ``names`` (every
    repeat's file), ordered as ``ids``; SystemExit naming the file when a column or record is missing."""
    from acute.errors import InputError
    from acute.evaluation import read_predictions

    try:
        got, _, preds = read_predictions(eval_dir, names)
    except InputError as e:
        raise SystemExit(str(e)) from None
    where = {str(i): k for k, i in enumerate(got)}
    missing = [i for i in map(str, ids) if i not in where]
    if missing:
        raise SystemExit(f"{eval_dir}: no predictions for {len(missing)} of the store's records (e.g. {missing[0]!r}); "
                         "evaluate this store first")
    order = np.array([where[str(i)] for i in ids])
    return {n: v[:, order] for n, v in preds.items()}


def _iv(row: dict, key: str) -> str:
    lo, hi = row.get(f"diff_{key}_ci_low"), row.get(f"diff_{key}_ci_high")
    value = f"{row[f'diff_{key}']:+.4f}"
    return value if lo is None else f"{value} [{lo:+.4f}, {hi:+.4f}]"


def store_section(store, args, thresholds: list[float], evaluation: str | None = None) -> str:
    """The markdown section of one store: the reference rows and one row per threshold (from the
    out-of-fold predictions of ``evaluation`` when given, else fitted here)."""
    from acute.evaluation.crossval import cross_val_predictions, cv_folds, inputs_for
    from acute.evaluation.table import evaluate_predictions
    from acute.evaluation.training import check_precheck_store

    check_precheck_store(store, "benchmarks/precheck.py")
    names = [args.estimator, QUESTION_ONLY, BASELINE]
    y = np.asarray(store.correct).astype(bool)
    raw = np.asarray(store.raw_confidence, dtype=np.float64)
    n_tokens = np.array([int(r.get("n_tokens") or 0) for r in store.records], dtype=np.float64)
    t0 = time.perf_counter()
    if evaluation is not None:
        preds = evaluation_predictions(evaluation, store.ids, names)
        source = f"the out-of-fold predictions of {evaluation} ({preds[names[0]].shape[0]} repeats; nothing fitted here)"
    else:
        folds = cv_folds(store.ids, y, n_splits=args.cv, n_repeats=args.repeats, seed=args.seed)
        preds = cross_val_predictions(names, inputs_for(store, names), y, folds, random_state=args.seed,
                                      n_jobs=args.n_jobs, probe_params={"n_estimators": args.n_estimators})
        source = (f"{args.cv}-fold x {args.repeats} cross-validation (seed {args.seed}), every record out of fold; "
                  f"fits {time.perf_counter() - t0:.0f} s")
    answer, question = preds[args.estimator], preds[QUESTION_ONLY]
    gated = {f"two-stage@{u0:g}": two_stage(answer, question, u0) for u0 in thresholds}
    rows = evaluate_predictions({**preds, **gated}, y, n_bootstrap=args.n_bootstrap, seed=args.seed,
                                reference=args.estimator)
    by_name = {r["estimator"]: r for r in rows}
    m = store.manifest
    lines = [f"## {m.get('model')}, task {m.get('task')} ({store.path})", "",
             f"{len(store)} records, accuracy {y.mean():.3f}, mean {n_tokens.mean():.1f} generated tokens; "
             f"{source}; {args.n_bootstrap} paired bootstrap resamples.", "",
             f"| estimator | uses | auc-euro all | Δ vs {args.estimator} [95% paired] | smECE | AUROC |",
             "|---|---|---:|---:|---:|---:|"]
    for name in names:
        r = by_name[name]
        lines.append(f"| {name} | {r['uses']} | {r['auc_euro_all']:.4f} | "
                     f"{'—' if name == args.estimator else _iv(r, 'auc_euro_all')} | {r['smece']:.4f} | "
                     f"{r['auroc']:.4f} |")
    lines += ["", f"Two-stage gate: answer only when the question-only P(correct) > u0, then decide by "
              f"{args.estimator} (skipped = abstain). Time saved is estimated from the recorded token "
              f"counts (a prompt pass costs {args.prompt_pass_cost:g}x a decoding step), not measured.", "",
              f"| u0 | auc-euro all | Δ vs {args.estimator} alone [95% paired] | skipped | correct among skipped "
              "| est. time saved |", "|---:|---:|---:|---:|---:|---:|"]
    for u0 in thresholds:
        r = by_name[f"two-stage@{u0:g}"]
        skipped = question <= u0  # [repeats, n]
        lost = [float((s & y).sum() / max(int(s.sum()), 1)) for s in skipped]
        saved = [saved_fraction(s, n_tokens, args.prompt_pass_cost) for s in skipped]
        lines.append(f"| {u0:g} | {r['auc_euro_all']:.4f} | {_iv(r, 'auc_euro_all')} | "
                     f"{skipped.mean():.1%} | {np.mean(lost):.1%} | {np.mean(saved):+.1%} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from acute.store import open_store

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", action="append", required=True, help="a store with last-prompt states (repeatable)")
    ap.add_argument("--thresholds", default=DEFAULT_THRESHOLDS,
                    help=f"comma-separated precheck thresholds u0 in (0, 1) (default {DEFAULT_THRESHOLDS})")
    ap.add_argument("--evaluation", action="append", default=None,
                    help="the evaluation folder of each --store, same order (read its out-of-fold predictions)")
    ap.add_argument("--estimator", default="acute-pca10-stacked", help="the answer probe (default %(default)s)")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-estimators", type=int, default=None, help="trees per forest (default 500)")
    ap.add_argument("--n-jobs", type=int, default=None, help="parallel jobs fitting the forests")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--prompt-pass-cost", type=float, default=1.0,
                    help="a prompt pass's cost in decoding steps, for the time estimate (default %(default)s)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("precheck.md")))
    args = ap.parse_args(argv)

    from acute.errors import InputError
    from acute.scoring.precheck import check_precheck

    try:
        thresholds = [check_precheck(float(v), "--thresholds") for v in args.thresholds.split(",") if v.strip()]
    except ValueError as e:  # InputError is one
        ap.error(str(e) if isinstance(e, InputError) else f"--thresholds must be numbers in (0, 1), got "
                                                          f"{args.thresholds!r}")
    if not thresholds or args.prompt_pass_cost < 0:
        ap.error("--thresholds needs at least one value and --prompt-pass-cost must be >= 0")
    if args.evaluation is not None and len(args.evaluation) != len(args.store):
        ap.error(f"--evaluation was given {len(args.evaluation)} times for {len(args.store)} --store")
    t0 = time.perf_counter()
    sections = [store_section(open_store(path), args, thresholds, ev)
                for path, ev in zip(args.store, args.evaluation or [None] * len(args.store))]
    head = (f"# The precheck: deciding before generating\n\n`python benchmarks/precheck.py "
            f"{' '.join(sys.argv[1:] if argv is None else argv)}` ({time.perf_counter() - t0:.0f} s)\n\n")
    text = head + "\n".join(sections)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

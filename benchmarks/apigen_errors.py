"""Which wrong function calls does a probe tell from right ones? (exploratory, after issue 26)

Usage:
    python benchmarks/apigen_errors.py --evaluation EVAL_DIR --store STORE
        [--estimators raw,isotonic,tfidf+platt,acute-pca10-stacked] [--n-bootstrap 1000]
        [--out benchmarks/apigen_errors.md]

Each wrong APIGen reply gets one kind, the first that applies (:func:`error_kind`):

* ``unparsed``: not a parseable list of calls;
* ``number of calls``: another number of calls than the gold answer;
* ``tool``: the same number, other tool names (as multisets);
* ``arguments named``: the same tools, but some call names other arguments (missing or extra);
* ``argument values``: the same tools and argument names; a value differs (the grader's verdict).

For each kind, the AUROC of each estimator's out-of-fold P(correct) between the correct replies
and the replies of that kind (the evaluation's ``predictions*.csv``; mean over repeats, nothing
refitted), and the last estimator minus the second (default: ``acute-pca10-stacked`` minus
``tfidf+platt``, the strongest control there) with a paired 95% bootstrap interval over records
(the same resamples for both; each resample's AUROC is the mean over repeats). Exploratory: no
rule decides anything from it. Appends a section to ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.errors import InputError  # noqa: E402
from acute.evaluation import read_predictions  # noqa: E402
from acute.metrics import bootstrap_indices  # noqa: E402
from acute.metrics.binned import auroc_rows  # noqa: E402
from acute.store import open_store  # noqa: E402

KINDS = ("unparsed", "number of calls", "tool", "arguments named", "argument values")
DEFAULT_ESTIMATORS = "raw,isotonic,tfidf+platt,acute-pca10-stacked"


def error_kind(answer: list[dict] | None, gold: list[dict]) -> str:
    """The kind of a wrong reply (``answer``: its parsed calls, None when it did not parse)
    against the ``gold`` calls; see the module docstring for the order."""
    if answer is None:
        return "unparsed"
    if len(answer) != len(gold):
        return "number of calls"
    if Counter(c["name"] for c in answer) != Counter(c["name"] for c in gold):
        return "tool"
    def named(calls):
        return Counter((c["name"], frozenset(c.get("arguments") or {})) for c in calls)
    if named(answer) != named(gold):
        return "arguments named"
    return "argument values"


def kinds_of(records: list[dict]) -> list[str | None]:
    """Each record's :func:`error_kind` (None for a correct one)."""
    out = []
    for r in records:
        if r["correct"]:
            out.append(None)
            continue
        answer = None if r.get("parse_error") or r.get("answer") is None else json.loads(r["answer"])
        out.append(error_kind(answer, json.loads(r["gold"][0])))
    return out


def mean_auroc(preds: np.ndarray, y: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """AUROC averaged over the repeats of ``preds [repeats, n]``; with ``index [B, m]``, one value
    per resample (records ``index[b]``)."""
    if index is None:
        return auroc_rows(preds, np.broadcast_to(y.astype(bool), preds.shape)).mean()
    conf = preds[:, index]
    return auroc_rows(conf, np.broadcast_to(y[index].astype(bool), conf.shape)).mean(axis=0)


def section(eval_dir: Path, store_dir: Path, names: list[str], n_bootstrap: int) -> str:
    if n_bootstrap < 1:
        raise InputError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    if len(names) < 2:
        raise InputError(f"--estimators needs at least two names (the last two are compared), got {names}")
    ids, y, preds = read_predictions(eval_dir, names)
    by_id = {str(r["id"]): r for r in open_store(store_dir).records}
    missing = next((i for i in ids if i not in by_id), None)
    if missing is not None:
        raise InputError(f"{store_dir}: the evaluation's record {missing!r} is not in the store")
    kinds = np.array(kinds_of([by_id[i] for i in ids]), dtype=object)
    a, b = names[-1], names[-2]
    lines = [f"## {eval_dir}", "",
             f"{len(ids)} replies, {int(y.sum())} correct; {next(iter(preds.values())).shape[0]} repeats of "
             f"out-of-fold predictions. AUROC between the correct replies and the wrong ones of each kind "
             f"(mean over repeats); last column: {a} minus {b}, 95% paired bootstrap over records.", "",
             "| wrong replies of kind | count | " + " | ".join(f"AUROC {n}" for n in names)
             + f" | mean P(correct) {a} | Δ AUROC {a} - {b} |",
             "|---|---:|" + "---:|" * (len(names) + 2)]
    for kind in ("all wrong", *KINDS):
        keep = (kinds != None) if kind == "all wrong" else (kinds == kind)  # noqa: E711
        sub = np.flatnonzero(keep | y.astype(bool))
        count = int(keep.sum())
        if count == 0:
            lines.append(f"| {kind} | 0 |" + " - |" * (len(names) + 2))
            continue
        ys = y[sub]
        values = [mean_auroc(preds[n][:, sub], ys) for n in names]
        index = bootstrap_indices(sub.size, n_bootstrap, seed=0)
        diff = mean_auroc(preds[a][:, sub], ys, index) - mean_auroc(preds[b][:, sub], ys, index)
        low, high = np.nanpercentile(diff, [2.5, 97.5])
        lines.append(f"| {kind} | {count} | " + " | ".join(f"{v:.3f}" for v in values)
                     + f" | {preds[a][:, np.flatnonzero(keep)].mean():.3f} | "
                     f"{values[-1] - values[-2]:+.3f} [{low:+.3f}, {high:+.3f}] |")
    lines.append(f"| (correct) | {int(y.sum())} |" + " |" * len(names)
                 + f" {preds[a][:, y.astype(bool)].mean():.3f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evaluation", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--estimators", default=DEFAULT_ESTIMATORS)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("apigen_errors.md"))
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    text = section(args.evaluation, args.store, names, args.n_bootstrap)
    with open(args.out, "a", encoding="utf-8") as fh:
        fh.write(f"    python benchmarks/apigen_errors.py --evaluation {args.evaluation} --store {args.store}"
                 + ("" if args.estimators == DEFAULT_ESTIMATORS else f" --estimators {args.estimators}")
                 + "\n\n" + text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

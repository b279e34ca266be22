"""Does a probe's gain survive controls that read the reply, without the model's states? (issue 26)

Usage:
    python benchmarks/answer_controls.py --evaluation EVAL_DIR --store STORE
        [--answer-field n_calls] [--n-bootstrap 1000] [--out benchmarks/answer_controls.md]

The question controls of ``acute evaluate`` never see the reply. A deployment sees the reply
too, so this fits acute's two reply controls (``answer-surface`` and ``answer-text``, control
rows of every evaluation since issue 42: :mod:`acute.estimators.visible`) on the evaluation's own
folds (``folds.json``, every repeat) and compares them with the out-of-fold predictions the
evaluation wrote (``predictions*.csv``; nothing of the evaluation is refitted): for an
evaluation made before those rows existed.

* ``answer-surface``: L2 logistic regression (strength by inner CV on log-loss, as acute's
  ``platt+meta``) on logit(raw confidence), the mean token log-probability, log(tokens), "did not
  parse", "stopped at the token cap" (standardised), and one-hots of the reply's structure: the
  store's ``acute.tasks.tool_calls.REPLY_FIELDS`` when every record has them, or the fields
  ``--answer-field`` names (fields of the record's ``meta`` that describe the reply, e.g. APIGen's
  ``n_calls`` in a store collected before the reply fields; a missing value is its own level).
  Never name a field that describes the gold answer.
* ``answer-text``: acute's text control (:class:`acute.estimators.controls.TextPlatt`, TF-IDF
  word 1-2 grams plus logit(raw confidence)) over the prompt followed by the reply.

The table (acute.evaluation.table: means over repeats, paired bootstrap over records, corrected
resampled t-interval over the fold x repeat differences) has the evaluation's default, its best
baseline and the text control ``tfidf+platt`` beside the two new rows, each minus each of the two
new controls. Appends a section to ``--out`` and prints it. (Sections written before issue 42
took the mean token log-probability as log(raw confidence) / tokens with the raw confidence
clipped at 1e-6; acute's control takes the log-probs' mean.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.errors import InputError  # noqa: E402
from acute.estimators.inputs import CONFIDENCE, PROMPT_REPLY, VISIBLE, Inputs  # noqa: E402
from acute.estimators.registry import DEFAULT_ESTIMATOR  # noqa: E402
from acute.estimators.visible import reply_fields, reply_texts, visible_inputs  # noqa: E402
from acute.evaluation import read_folds, read_predictions  # noqa: E402
from acute.evaluation.crossval import cross_val_predictions  # noqa: E402
from acute.evaluation.table import evaluate_predictions  # noqa: E402
from acute.store import open_store  # noqa: E402

SURFACE = "answer-surface"
TEXT = "answer-text"


def _store_in_order(store_dir: Path, ids: list[str]):
    """The store's records ``ids``, in that order (a :meth:`acute.store.Store.select` view)."""
    store = open_store(store_dir)
    row = {str(i): k for k, i in enumerate(store.ids)}
    missing = next((i for i in ids if i not in row), None)
    if missing is not None:
        raise InputError(f"{store_dir}: the evaluation's record {missing!r} is not in the store")
    return store.select([row[i] for i in ids])


def section(eval_dir: Path, store_dir: Path, answer_fields: list[str], n_bootstrap: int) -> str:
    if n_bootstrap < 1:
        raise InputError(f"n_bootstrap must be >= 1 (the table shows intervals), got {n_bootstrap}")
    ids, y, preds = read_predictions(eval_dir)
    store = _store_in_order(store_dir, ids)
    folds = read_folds(eval_dir, ids)
    # no --answer-field: the store's REPLY_FIELDS, when every record has them
    answer_fields = list(answer_fields) or list(reply_fields(store.records))
    inputs = Inputs({VISIBLE: visible_inputs(store.records, store.token_logprobs, answer_fields, where=str(store_dir)),
                     PROMPT_REPLY: reply_texts(store.records, where=str(store_dir)),
                     CONFIDENCE: store.raw_confidence})
    t0 = time.perf_counter()
    new = cross_val_predictions([SURFACE, TEXT], inputs, y, folds)
    seconds = time.perf_counter() - t0
    every = evaluate_predictions(preds, y, n_bootstrap=0)
    best = next(r["reference"] for r in every if "reference" in r)
    shown = {name: preds[name] for name in (DEFAULT_ESTIMATOR, best, "tfidf+platt") if name in preds}
    tables = {ref: {r["estimator"]: r for r in evaluate_predictions(
        {**shown, **new}, y, n_bootstrap=n_bootstrap, reference=ref, folds=folds)} for ref in new}
    fields = ", ".join(f"`{f}`" for f in answer_fields) or "none"
    lines = [f"## {eval_dir}", "",
             f"{len(ids)} records, {len(folds)} repeats of {len(folds[0])} folds (the evaluation's); "
             f"accuracy {y.mean():.3f}; answer fields {fields}; both controls fitted in {seconds:.0f} s. "
             "Differences: 95% paired bootstrap over records, then the corrected resampled t-interval.", "",
             "| estimator | auc-euro all | smECE | AUROC | " + " | ".join(f"Δ auc-euro all vs {ref}" for ref in new) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(new)]
    for name, r in tables[SURFACE].items():
        cells = []
        for ref in new:
            d = tables[ref][name]
            cells.append("(reference)" if name == ref else
                         f"{d['diff_auc_euro_all']:+.4f} [{d['diff_auc_euro_all_ci_low']:+.4f}, "
                         f"{d['diff_auc_euro_all_ci_high']:+.4f}] t[{d['diff_auc_euro_all_t_low']:+.4f}, "
                         f"{d['diff_auc_euro_all_t_high']:+.4f}]")
        lines.append(f"| {name} | {r['auc_euro_all']:.4f} | {r['smece']:.4f} | {r['auroc']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evaluation", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--answer-field", action="append", default=[],
                    help="a meta field that describes the reply (repeatable), e.g. n_calls")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("answer_controls.md"))
    args = ap.parse_args(argv)
    text = section(args.evaluation, args.store, args.answer_field, args.n_bootstrap)
    fields = "".join(f" --answer-field {f}" for f in args.answer_field)
    with open(args.out, "a", encoding="utf-8") as fh:
        fh.write(f"    python benchmarks/answer_controls.py --evaluation {args.evaluation} "
                 f"--store {args.store}{fields}\n\n" + text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

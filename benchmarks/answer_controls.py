"""Does a probe's gain survive controls that read the reply, without the model's states? (issue 26)

Usage:
    python benchmarks/answer_controls.py --evaluation EVAL_DIR --store STORE
        [--answer-field n_calls] [--n-bootstrap 1000] [--out benchmarks/answer_controls.md]

The controls of ``acute evaluate`` see the question (its metadata, its text, its states) and the
raw confidence, never the reply. A deployment sees the reply too, so this fits two post hoc
controls on the evaluation's own folds (``folds.json``, every repeat) and compares them with the
out-of-fold predictions the evaluation wrote (``predictions*.csv``; nothing of the evaluation is
refitted):

* ``answer-surface``: L2 logistic regression (strength by inner CV on log-loss, as acute's
  ``platt+meta``) on logit(raw confidence), the mean token log-probability, log(tokens), "did not
  parse", "stopped at the token cap" (standardised), and one-hots of ``--answer-field`` (fields of
  the record's ``meta`` that describe the reply, e.g. APIGen's ``n_calls``; a missing value is
  its own level). Never name a field that describes the gold answer.
* ``answer-text``: acute's text control (:class:`acute.estimators.controls.TextPlatt`, TF-IDF
  word 1-2 grams plus logit(raw confidence)) over the prompt followed by the reply.

The table (acute.evaluation.table: means over repeats, paired bootstrap over records, corrected
resampled t-interval over the fold x repeat differences) has the evaluation's default, its best
baseline and the text control ``tfidf+platt`` beside the two new rows, each minus each of the two
new controls. Appends a section to ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.errors import InputError  # noqa: E402
from acute.estimators.controls import TextPlatt, _logistic_cv  # noqa: E402
from acute.estimators.registry import DEFAULT_ESTIMATOR  # noqa: E402
from acute.evaluation import read_folds, read_predictions  # noqa: E402
from acute.evaluation.table import evaluate_predictions  # noqa: E402
from acute.store import open_store  # noqa: E402

SURFACE = "answer-surface"
TEXT = "answer-text"
_EPS = 1e-6


def surface_numeric(raw: np.ndarray, n_tokens: np.ndarray, unparsed: np.ndarray,
                    capped: np.ndarray) -> np.ndarray:
    """``[n, 5]``: logit(raw), mean token log-probability, log(tokens), unparsed, capped."""
    raw = np.clip(np.asarray(raw, float), _EPS, 1 - _EPS)
    tokens = np.maximum(np.asarray(n_tokens, float), 1.0)
    return np.column_stack([np.log(raw / (1 - raw)), np.log(raw) / tokens, np.log(tokens),
                            np.asarray(unparsed, float), np.asarray(capped, float)])


class SurfacePlatt:
    """logistic regression on :func:`surface_numeric` (standardised on the training records) and
    one-hots of the reply's metadata; ``fit(numeric, levels, y)`` / ``predict(numeric, levels)``."""

    def fit(self, numeric: np.ndarray, levels: np.ndarray, y: np.ndarray) -> SurfacePlatt:
        from sklearn.preprocessing import OneHotEncoder

        self.mean_, self.scale_ = numeric.mean(0), numeric.std(0) + 1e-12
        self.encoder_ = OneHotEncoder(handle_unknown="ignore").fit(levels) if levels.shape[1] else None
        self.model_ = _logistic_cv(self._features(numeric, levels), y, 0)
        return self

    def _features(self, numeric: np.ndarray, levels: np.ndarray) -> np.ndarray:
        x = (numeric - self.mean_) / self.scale_
        return x if self.encoder_ is None else np.hstack([x, self.encoder_.transform(levels).toarray()])

    def predict(self, numeric: np.ndarray, levels: np.ndarray) -> np.ndarray:
        return self.model_.predict_proba(self._features(numeric, levels))[:, 1]


def out_of_fold(fit_predict, folds, n: int) -> np.ndarray:
    """``[repeats, n]`` out-of-fold predictions of ``fit_predict(train_index, test_index)``."""
    out = np.full((len(folds), n), np.nan)
    for r, repeat in enumerate(folds):
        for tr, te in repeat:
            out[r, te] = fit_predict(tr, te)
    return out


def _records_in_order(store_dir: Path, ids: list[str]) -> list[dict]:
    by_id = {str(r["id"]): r for r in open_store(store_dir).records}
    missing = next((i for i in ids if i not in by_id), None)
    if missing is not None:
        raise InputError(f"{store_dir}: the evaluation's record {missing!r} is not in the store")
    return [by_id[i] for i in ids]


def section(eval_dir: Path, store_dir: Path, answer_fields: list[str], n_bootstrap: int) -> str:
    if n_bootstrap < 1:
        raise InputError(f"n_bootstrap must be >= 1 (the table shows intervals), got {n_bootstrap}")
    ids, y, preds = read_predictions(eval_dir)
    records = _records_in_order(store_dir, ids)
    folds = read_folds(eval_dir, ids)
    raw = np.array([r["raw_confidence"] for r in records], float)
    numeric = surface_numeric(raw, [r["n_tokens"] for r in records],
                              [bool(r.get("parse_error")) for r in records],
                              [r.get("finish_reason") == "length" for r in records])
    levels = np.array([[str((r.get("meta") or {}).get(f)) for f in answer_fields] for r in records],
                      dtype=object).reshape(len(records), len(answer_fields))
    texts = [f"{r['prompt']}\n{r['generation']}" for r in records]
    t0 = time.perf_counter()
    new = {
        SURFACE: out_of_fold(lambda tr, te: SurfacePlatt().fit(numeric[tr], levels[tr], y[tr])
                             .predict(numeric[te], levels[te]), folds, len(ids)),
        TEXT: out_of_fold(lambda tr, te: TextPlatt().fit([texts[i] for i in tr], y[tr], raw[tr])
                          .predict_proba([texts[i] for i in te], raw[te])[:, 1], folds, len(ids)),
    }
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

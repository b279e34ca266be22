"""Prefix probes: how well the correctness of the final answer is predicted from what a gate has
after ``k`` generated tokens, checkpoint by checkpoint, against what it would have without the
hidden states.

At each checkpoint ``k`` (:data:`PREFIX_CHECKPOINTS`) the rows are, each fitted in the training
folds on the final labels:

* ``probe``: the default estimator's design on the prefix: its states are the layer means over
  the first ``k`` generated tokens (:meth:`acute.store.Store.prefix_states`: the final means of
  an answer that ended before ``k``), its confidence the product of those tokens' probabilities;
* ``log-prob``: no hidden states, a logistic regression on the prefix's mean token log-probability
  and its lowest mean over sliding windows of :data:`LOGPROB_WINDOW` tokens (DeepConf's signal);
* at ``k = 0``, ``question-only``: the prompt's last-token states, before any token;
* at the end (``k`` = the answer's length), ``final``: the default estimator on the finished answer.

One estimator per checkpoint (``benchmarks/stop_early.md`` says why). Every row is scored on
every record (an answer that ended before ``k`` is scored on what the gate had then, its whole
answer), so the curve ends at the final probe; ``generating`` is the share of answers still
being written at ``k``, the ones a stop at ``k`` could save tokens on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..errors import InputError
from ..estimators.folds import out_of_fold
from ..estimators.inputs import CONFIDENCE, Inputs, states_source
from ..estimators.registry import DEFAULT_ESTIMATOR
from ..metrics import auc_euro, auroc, smece
from .crossval import cross_val_predictions, cv_metric, inputs_for

__all__ = ["LOGPROB_WINDOW", "PREFIX_CHECKPOINTS", "PrefixEvaluation", "evaluate_prefixes", "logprob_stats",
           "prefix_confidence", "prefix_inputs", "write_prefix_evaluation"]

logger = logging.getLogger(__name__)

#: The checkpoints (generated tokens) prefix probes are fitted at.
PREFIX_CHECKPOINTS: tuple[int, ...] = (4, 8, 16, 32, 64)
#: Tokens per sliding window of the log-prob rule's lowest window mean.
LOGPROB_WINDOW = 4
#: The question-only probe's registry name (its k = 0 row).
QUESTION_ONLY = "question-only"


def prefix_confidence(token_logprobs: Sequence[np.ndarray], k: int) -> np.ndarray:
    """float64 [n]: the product of the probabilities of each answer's first ``k`` tokens."""
    return np.array([math.exp(math.fsum(np.asarray(lp[:k], dtype=np.float64))) for lp in token_logprobs])


def logprob_stats(token_logprobs: Sequence[np.ndarray], k: int, window: int = LOGPROB_WINDOW) -> np.ndarray:
    """float64 [n, 2]: per answer, over its first ``k`` tokens, the mean token log-probability and
    the lowest mean over sliding windows of ``window`` tokens (the whole prefix when shorter); 0
    for an empty answer."""
    out = np.zeros((len(token_logprobs), 2))
    for i, lp in enumerate(token_logprobs):
        x = np.asarray(lp[:k], dtype=np.float64)
        if x.size == 0:
            continue
        w = min(window, x.size)
        sums = np.convolve(x, np.ones(w), mode="valid") / w
        out[i] = x.mean(), sums.min()
    return out


def prefix_inputs(store: Any, k: int) -> Inputs:
    """The default estimator's inputs after ``k`` generated tokens: ``states@mean`` = the store's
    prefix states at ``k`` (float32), ``confidence`` = :func:`prefix_confidence`."""
    states = np.asarray(store.prefix_states(k), dtype=np.float32)
    return Inputs({states_source("mean"): states, CONFIDENCE: prefix_confidence(store.token_logprobs, k)})


def _logprob_oof(stats: np.ndarray, y: np.ndarray, folds: list) -> np.ndarray:
    """Out-of-fold P(correct) [repeats, n] of the log-prob rule."""
    def fit_predict(train, test, *_):
        if np.unique(y[train]).size < 2:
            return np.full(len(test), float(np.mean(y[train])))
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
        return model.fit(stats[train], y[train]).predict_proba(stats[test])[:, 1]
    return np.stack([out_of_fold(fit_predict, rep, y.size) for rep in folds])


@dataclass
class PrefixEvaluation:
    """Out-of-fold predictions and their scores: ``predictions[(row, k)]`` ``[repeats, n]`` (``k``
    0 for ``question-only``, None for ``final``), ``rows`` one dict per (row, k) with
    ``auc_euro``, ``auroc``, ``smece`` (means over repeats) and ``generating`` (the share of
    answers longer than ``k`` tokens)."""

    checkpoints: tuple[int, ...]
    predictions: dict
    rows: list[dict]

    def to_markdown(self) -> str:
        """The rows as a markdown table, checkpoint by checkpoint."""
        lines = ["| row | k (tokens read) | still generating | auc-euro | AUROC | smECE |",
                 "|---|---:|---:|---:|---:|---:|"]
        for r in self.rows:
            k = "answer" if r["k"] is None else str(r["k"])
            lines.append(f"| {r['row']} | {k} | {r['generating']:.2f} | {r['auc_euro']:.4f} | "
                         f"{r['auroc']:.3f} | {r['smece']:.4f} |")
        return "\n".join(lines) + "\n"


def evaluate_prefixes(store: Any, folds: list, *, checkpoints: Iterable[int] = PREFIX_CHECKPOINTS,
                      estimator: str = DEFAULT_ESTIMATOR, random_state: int = 0, n_jobs: int | None = None,
                      probe_params: dict | None = None,
                      progress: Callable[[str], None] | None = None) -> PrefixEvaluation:
    """The rows of the module docstring on ``store`` (which must keep prefix checkpoints), over
    ``folds`` (:func:`acute.evaluation.crossval.cv_folds`: the evaluation's own, grouped where it
    groups). ``progress(what)`` is called before each row is fitted."""
    checkpoints = tuple(int(k) for k in checkpoints)
    if not checkpoints or any(k < 1 for k in checkpoints):
        raise InputError(f"checkpoints must be positive token counts, got {list(checkpoints)}")
    store.checkpoint_tokens  # a store without checkpoints: one line naming it and the remedy
    y = np.asarray(store.correct).astype(np.int64)
    n_tokens = np.asarray(store.n_tokens)
    fit = dict(random_state=random_state, n_jobs=n_jobs, probe_params=probe_params)
    preds: dict = {}

    def step(what: str) -> None:
        logger.info("prefix probes: %s", what)
        if progress is not None:
            progress(what)

    step(f"{QUESTION_ONLY} (k = 0)")
    preds[(QUESTION_ONLY, 0)] = cross_val_predictions(
        [QUESTION_ONLY], inputs_for(store, [QUESTION_ONLY]), y, folds, **fit)[QUESTION_ONLY]
    for k in checkpoints:
        step(f"probe and log-prob at k = {k}")
        preds[("probe", k)] = cross_val_predictions([estimator], prefix_inputs(store, k), y, folds, **fit)[estimator]
        preds[("log-prob", k)] = _logprob_oof(logprob_stats(store.token_logprobs, k), y, folds)
    step("final")
    preds[("final", None)] = cross_val_predictions([estimator], inputs_for(store, [estimator]), y, folds,
                                                   **fit)[estimator]
    rows = []
    for (name, k), p in preds.items():
        rows.append({"row": name, "k": k,
                     "generating": float(np.mean(n_tokens > k)) if k is not None else 0.0,
                     "auc_euro": cv_metric(auc_euro, p, y), "auroc": cv_metric(auroc, p, y),
                     "smece": cv_metric(smece, p, y)})
    return PrefixEvaluation(checkpoints, preds, rows)


def write_prefix_evaluation(result: PrefixEvaluation, out_dir: Any, *, params: dict | None = None,
                            model: str | None = None, task: str | None = None) -> dict[str, Path]:
    """Write ``prefix.md``, ``prefix.csv``, ``prefix.json`` (with ``params``) and ``prefix.png``
    into ``out_dir``, each atomically; returns name -> path."""
    import csv
    import io
    import json

    from ..fileio import json_ready, write_text_atomic
    from .plots import prefix_curves

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(result.rows[0]))
    writer.writeheader()
    writer.writerows(result.rows)
    files = {"md": write_text_atomic(out / "prefix.md", result.to_markdown()),
             "csv": write_text_atomic(out / "prefix.csv", buf.getvalue())}
    files["png"] = prefix_curves(result.rows, out / "prefix.png", model=model, task=task,
                                 title="one probe per checkpoint, out of fold; final labels")
    doc = {"model": model, "task": task, "checkpoints": list(result.checkpoints), "params": dict(params or {}),
           "rows": result.rows}
    files["json"] = write_text_atomic(out / "prefix.json", json.dumps(json_ready(doc), indent=1))
    return files

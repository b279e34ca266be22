"""Prefix probes: how well the correctness of the final answer is predicted from what a gate has
after ``k`` generated tokens, checkpoint by checkpoint, against what it would have without the
hidden states.

At each checkpoint ``k`` (:data:`PREFIX_CHECKPOINTS`) the rows are, each fitted in the training
folds on the final labels:

* ``probe``: the default estimator's design on the prefix: its states are the layer means over
  the first ``k`` generated tokens (:meth:`acute.store.Store.prefix_states`: the final means of
  an answer that ended before ``k``), its confidence the product of those tokens' probabilities;
* the controls of :mod:`acute.estimators.prefix_controls`, none of which reads hidden states or
  anything past token ``k``: ``log-prob`` (the prefix's mean token log-probability and its lowest
  mean over sliding windows of a few tokens, DeepConf's signal),
  ``surface-so-far`` (the reply so far's surface: tokens so far, whether it has ended, brackets
  and tool calls opened and closed, the calls it parses into), ``text-so-far`` (the prompt and
  the reply so far) and ``visible-so-far`` (a stack of the three and the prefix confidence:
  what the states add at ``k`` is ``probe`` against it);
* at ``k = 0``, ``question-only``: the prompt's last-token states, before any token;
* at the end (``k`` = the answer's length), ``final``: the default estimator on the finished answer.

:data:`ROW_USES` says what each row may use. The reply so far is the first ``k`` generated token
ids decoded by the store's tokenizer (its manifest's ``tokenizer``, or one given).

One estimator per checkpoint (``benchmarks/stop_early.md`` says why). Every row is scored on
every record (an answer that ended before ``k`` is scored on what the gate had then, its whole
answer), so the curve ends at the final probe; ``generating`` is the share of answers still
being written at ``k``, the ones a stop at ``k`` could save tokens on.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from sklearn.base import clone

from ..errors import InputError
from ..estimators.folds import out_of_fold
from ..estimators.inputs import CONFIDENCE, GROUPS, Inputs, states_source
from ..estimators.plan import FitPlan
from ..estimators.prefix_controls import (PREFIX_CONTROL_USES, PREFIX_CONTROLS, prefix_confidence, prefix_controls,
                                          prefix_sources)
from ..estimators.registry import STATES_PROBE
from ..metrics import auc_euro, auroc, smece
from .crossval import cross_val_predictions, cv_metric, inputs_for
from ..fileio import json_ready, write_text_atomic

__all__ = ["PREFIX_CHECKPOINTS", "ROW_USES", "PrefixEvaluation", "evaluate_prefixes", "load_tokenizer",
           "prefix_inputs", "write_prefix_evaluation"]

logger = logging.getLogger(__name__)

#: The checkpoints (generated tokens) prefix probes are fitted at.
PREFIX_CHECKPOINTS: tuple[int, ...] = (4, 8, 16, 32, 64)
#: The question-only probe's registry name (its k = 0 row).
QUESTION_ONLY = "question-only"
#: What each row may use (``prefix.json``'s ``uses``, the table's legend). An answer that ended
#: before ``k`` is read whole by every row.
ROW_USES: dict[str, str] = {
    QUESTION_ONLY: "the prompt's last-token states (k = 0: no answer token, no confidence)",
    "probe": "the layer means over the first k tokens + their confidence (product of their probabilities)",
    **PREFIX_CONTROL_USES,
    "final": "the finished answer's layer means + its confidence (the default estimator on the whole answer)",
}


def prefix_inputs(store: Any, k: int) -> Inputs:
    """The default estimator's inputs after ``k`` generated tokens: ``states@mean`` = the store's
    prefix states at ``k`` (float32), ``confidence`` = :func:`prefix_confidence`."""
    states = np.asarray(store.prefix_states(k), dtype=np.float32)
    return Inputs({states_source("mean"): states, CONFIDENCE: prefix_confidence(store.token_logprobs, k)})


def load_tokenizer(tokenizer: Any, store: Any) -> Any:
    """The tokenizer that decodes the store's generated tokens: ``tokenizer`` itself when it has a
    ``decode``, else loaded by transformers' ``AutoTokenizer`` from ``tokenizer`` (a folder or a
    hub id) or, when None, from the store manifest's ``tokenizer`` (the one that generated them).
    InputError naming it and the remedy when it cannot be loaded."""
    if hasattr(tokenizer, "decode"):
        return tokenizer
    name = tokenizer if tokenizer is not None else (getattr(store, "manifest", None) or {}).get("tokenizer")
    remedy = ("pass the model folder or hub id it was collected with (acute prefix --tokenizer PATH), or "
              "leave out the controls that read the reply's text (--controls log-prob)")
    if not name:
        raise InputError(f"{getattr(store, 'path', 'the store')}: the manifest names no tokenizer to decode "
                         f"the generated tokens with; {remedy}")
    from transformers import AutoTokenizer  # heavy import, only when the text controls run

    try:
        return AutoTokenizer.from_pretrained(str(name))
    except (OSError, ValueError) as e:
        raise InputError(f"{getattr(store, 'path', 'the store')}: cannot load the tokenizer {str(name)!r} "
                         f"({type(e).__name__}: {e}); {remedy}") from None


def _check_controls(controls: Sequence[str]) -> tuple[str, ...]:
    names = [controls] if isinstance(controls, str) else list(controls)
    unknown = [c for c in names if c not in PREFIX_CONTROLS]
    if unknown:
        raise InputError(f"unknown prefix controls {unknown}; choose from {', '.join(PREFIX_CONTROLS)}")
    return tuple(c for c in PREFIX_CONTROLS if c in names)


def _controls_oof(estimators: dict[str, Any], X: Inputs, y: np.ndarray, folds: list) -> dict[str, np.ndarray]:
    """Out-of-fold P(correct) ``{name: [repeats, n]}`` of each estimator, all of a training fold
    fitted by one :class:`~acute.estimators.plan.FitPlan` (a stack's first level refitted on the
    fold is the rows' own fits)."""
    def fit_predict(train, test, *_):
        plan = FitPlan(X.take(train), y[train])
        made = {name: clone(est) for name, est in estimators.items()}
        for est in made.values():
            plan.declare(est)
        held_out = X.take(test)
        return np.column_stack([np.clip(plan.fit(est).predict_proba(held_out)[:, 1], 0.0, 1.0)
                                for est in made.values()])

    per_repeat = [out_of_fold(fit_predict, rep, y.size) for rep in folds]
    return {name: np.stack([p[:, i] for p in per_repeat]) for i, name in enumerate(estimators)}


@dataclass
class PrefixEvaluation:
    """Out-of-fold predictions and their scores: ``predictions[(row, k)]`` ``[repeats, n]`` (``k``
    0 for ``question-only``, None for ``final``), ``rows`` one dict per (row, k) with
    ``auc_euro``, ``auroc``, ``smece`` (means over repeats) and ``generating`` (the share of
    answers longer than ``k`` tokens), ``uses`` what each row name may use (:data:`ROW_USES`)."""

    checkpoints: tuple[int, ...]
    predictions: dict
    rows: list[dict]
    uses: dict = field(default_factory=dict)

    def to_markdown(self) -> str:
        """The rows as a markdown table, checkpoint by checkpoint, then what each row uses."""
        lines = ["| row | k (tokens read) | still generating | auc-euro | AUROC | smECE |",
                 "|---|---:|---:|---:|---:|---:|"]
        for r in self.rows:
            k = "answer" if r["k"] is None else str(r["k"])
            lines.append(f"| {r['row']} | {k} | {r['generating']:.2f} | {r['auc_euro']:.4f} | "
                         f"{r['auroc']:.3f} | {r['smece']:.4f} |")
        if self.uses:
            lines += ["", "What each row may use (an answer that ended before k is read whole):", ""]
            lines += [f"- `{name}`: {text}" for name, text in self.uses.items()]
        return "\n".join(lines) + "\n"


def evaluate_prefixes(store: Any, folds: list, *, checkpoints: Iterable[int] = PREFIX_CHECKPOINTS,
                      estimator: str = STATES_PROBE, controls: Sequence[str] = PREFIX_CONTROLS,
                      tokenizer: Any = None, groups: Sequence[Any] | None = None, random_state: int = 0,
                      n_jobs: int | None = None, probe_params: dict | None = None,
                      progress: Callable[[str], None] | None = None) -> PrefixEvaluation:
    """The rows of the module docstring on ``store`` (which must keep prefix checkpoints), over
    ``folds`` (:func:`acute.evaluation.crossval.cv_folds`: the evaluation's own, grouped where it
    groups).

    ``controls``: which of :data:`PREFIX_CONTROLS` to fit at each checkpoint (default all).
    ``tokenizer`` decodes the generated token ids into the reply so far (a tokenizer, a folder or
    hub id, or None: the store's, :func:`load_tokenizer`); only ``log-prob`` runs without one.
    ``groups``: the value per record the folds keep apart (None: records one by one), which the
    stack's inner folds keep apart too. ``progress(what)`` is called before each step."""
    checkpoints = tuple(int(k) for k in checkpoints)
    if not checkpoints or any(k < 1 for k in checkpoints):
        raise InputError(f"checkpoints must be positive token counts, got {list(checkpoints)}")
    controls = _check_controls(controls)
    store.checkpoint_tokens  # a store without checkpoints: one line naming it and the remedy
    y = np.asarray(store.correct).astype(np.int64)
    n_tokens = np.asarray(store.n_tokens)
    if groups is not None and len(groups) != y.size:
        raise InputError(f"groups has {len(groups)} values but the store has {y.size} records")
    reads_text = any(c != "log-prob" for c in controls)
    decoder = load_tokenizer(tokenizer, store) if reads_text else None
    where = str(getattr(store, "path", "the store"))
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
        step(f"probe at k = {k}")
        preds[("probe", k)] = cross_val_predictions([estimator], prefix_inputs(store, k), y, folds, **fit)[estimator]
        if not controls:
            continue
        step(f"{', '.join(controls)} at k = {k}")
        X = prefix_sources(store.records, store.token_logprobs, k, decoder, where)
        if groups is not None:  # what the stack's inner folds keep apart, as the outer folds do
            X = X.with_source(GROUPS, groups)
        made = prefix_controls(random_state)
        for name, p in _controls_oof({c: made[c] for c in controls}, X, y, folds).items():
            preds[(name, k)] = p
    step("final")
    preds[("final", None)] = cross_val_predictions([estimator], inputs_for(store, [estimator]), y, folds,
                                                   **fit)[estimator]
    rows = []
    for (name, k), p in preds.items():
        rows.append({"row": name, "k": k,
                     "generating": float(np.mean(n_tokens > k)) if k is not None else 0.0,
                     "auc_euro": cv_metric(auc_euro, p, y), "auroc": cv_metric(auroc, p, y),
                     "smece": cv_metric(smece, p, y)})
    uses = {name: ROW_USES[name] for name in dict.fromkeys(name for name, _ in preds)}
    return PrefixEvaluation(checkpoints, preds, rows, uses)


def write_prefix_evaluation(result: PrefixEvaluation, out_dir: Any, *, params: dict | None = None,
                            model: str | None = None, task: str | None = None) -> dict[str, Path]:
    """Write ``prefix.md``, ``prefix.csv``, ``prefix.json`` (with ``params``) and ``prefix.png``
    into ``out_dir``, each atomically; returns name -> path."""
    from .plots import prefix_curves  # heavy: matplotlib

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
           "uses": dict(result.uses), "rows": result.rows}
    files["json"] = write_text_atomic(out / "prefix.json", json.dumps(json_ready(doc), indent=1))
    return files

"""What an evaluation computed: :class:`EvaluationResult` (the metric rows, the predictions,
the split or folds, the settings), how a chosen probe compares with the rest, and the text of
``results.md``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..estimators.registry import estimator_group, is_estimator
from ..metrics.specs import ranked
from .markdown import results_markdown, selective_markdown
from .writer import intro_markdown

__all__ = ["EvaluationResult"]


@dataclass
class EvaluationResult:
    """What ``evaluate_store`` computed (:func:`acute.evaluation.writer.write_evaluation` writes it).

    ``rows``: one metrics dict per estimator (see :func:`evaluate_predictions`, plus ``layer``
    for searched layers and ``chosen`` for ``auto``); ``predictions``: confidence per estimator on
    ``test_ids`` (in cross-validation: every record, out of fold, repeat 0); ``cv_predictions``:
    ``[repeats, n]`` per estimator in cross-validation, else None; ``test_correct``; ``split``:
    mode, seed, folds or test fraction, sizes and id hashes; ``skipped``: control -> why it was
    left out; ``train_ids``, ``fold_of`` (each record's test fold per repeat), ``params``, the
    stores' manifests and ``plot_names`` (the reliability diagrams to draw), for the writer;
    ``out_dir`` and ``files`` (name -> path) once written.
    """

    rows: list[dict]
    predictions: dict[str, np.ndarray]
    test_ids: list
    test_correct: np.ndarray
    split: dict
    out_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    cv_predictions: dict[str, np.ndarray] | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    train_ids: list = field(default_factory=list)
    fold_of: list | None = None
    params: dict = field(default_factory=dict)
    store_manifest: dict | None = None
    test_store_manifest: dict | None = None
    plot_names: list = field(default_factory=list)

    def row(self, estimator: str) -> dict:
        """The metrics row of one estimator (``KeyError`` if it was not evaluated)."""
        for r in self.rows:
            if r["estimator"] == estimator:
                return r
        raise KeyError(estimator)

    def selection(self, chosen: str) -> dict[str, Any]:
        """How ``chosen`` (an evaluated probe, e.g. the one exported) compares with the other
        activation-based estimators and the baselines of this evaluation, in the layout of
        :meth:`acute.estimators.registry.AutoEstimator.selection` (what ``probe.json`` records as
        ``selection``): ``chosen``, ``best_by_cv`` (the best of them by the evaluation's
        auc-euro (all), ties by smECE), ``refit`` (``chosen``), ``criterion``, ``cv`` (the
        evaluation's folds), ``candidates``, ``scores`` (best first), ``best_baseline`` and
        ``warning`` (when a baseline scored above ``chosen``). A probe exported on all of the
        evaluated records gets the evaluation's out-of-fold comparison instead of refitting one."""
        by_name = {r["estimator"]: r for r in self.rows}
        if chosen not in by_name:
            raise InputError(f"{chosen!r} was not evaluated (evaluated: {', '.join(by_name)})")
        groups = {n: estimator_group(n) for n in by_name if is_estimator(n)}
        cands = [n for n, g in groups.items() if g in ("acute", "stacked", "auto")]
        if chosen not in cands:
            raise InputError(f"{chosen!r} is not a probe: only a probe is exported")
        names = [n for n in by_name if groups.get(n) in ("baseline", "acute", "stacked", "auto")
                 and np.isfinite(by_name[n].get("auc_euro_all", np.nan))]
        keys = ("auc_euro_all", "smece", "auroc")
        scores = {n: {k: float(by_name[n].get(k, np.nan)) for k in keys} for n in names}
        ranking = ranked(names, scores.__getitem__, digits=9)
        best = next((n for n in ranking if n in cands), chosen)
        best_baseline = next((n for n in ranking if groups[n] == "baseline"), None)
        warning = None
        if best_baseline is not None and chosen in ranking and ranking.index(best_baseline) < ranking.index(chosen):
            b, c = scores[best_baseline], scores[chosen]
            warning = (f"the baseline {best_baseline} scored above {chosen} in this evaluation (auc-euro "
                       f"{b['auc_euro_all']:.4f} vs {c['auc_euro_all']:.4f}); on this data the hidden states "
                       "add nothing measurable over the raw confidence")
        split = self.split
        return {"chosen": chosen, "best_by_cv": best, "refit": chosen,
                "criterion": "the evaluation's out-of-fold auc-euro (all), ties by smECE",
                "cv": {"source": "evaluation", "mode": split.get("mode"), "n_splits": split.get("n_splits"),
                       "n_repeats": split.get("n_repeats"), "random_state": split.get("seed")},
                "candidates": cands, "scores": [{"estimator": n, **scores[n]} for n in ranking],
                "best_baseline": best_baseline, "warning": warning}

    def to_markdown(self) -> str:
        """The results table (:func:`acute.evaluation.markdown.results_markdown`)."""
        return results_markdown(self.rows)

    def markdown(self) -> str:
        """What ``results.md`` holds: the paragraph on how the records were scored, the results
        table, then the selective-prediction table (:func:`acute.evaluation.markdown.selective_markdown`)."""
        selective = selective_markdown(self.rows)
        text = intro_markdown(self) + self.to_markdown()
        if selective:
            text += ("\n## Selective prediction\n\nTrust the answers whose confidence is at least a "
                     "threshold: AURC is the mean error rate among trusted answers over all coverage "
                     "levels (lower is better), E-AURC the part above a perfect ranking's, coverage "
                     "at 5% / 10% error the largest fraction that can be trusted with at most that "
                     "error rate among them (a threshold chosen on these records, in hindsight: no "
                     "guarantee for new answers). Its certified counterpart (cross-validation only) "
                     "trusts each fold's answers by a certificate fitted on the other folds' "
                     "out-of-fold predictions (at most 10% error, delta 0.1, as `acute export "
                     "--max-error 0.1` certifies): the share trusted (mean over repeats), the error "
                     "among them and the share of folds that certified anything. Same intervals as "
                     "above.\n\n" + selective)
        return text

"""The reproduction report of ``acute run``: ``docs/results/README.md`` (and ``report.json``,
``summary.csv``, figures) from the evaluation, transfer and protocol runs.

* :mod:`~acute.report.runs`: an evaluation folder (:class:`EvalRun`; or an earlier report's
  committed tables, :func:`committed_eval_run`) and the report's numbers
  (each evaluation's own rows from ``results.json``, and their mean over models);
* :mod:`~acute.report.tables`: the Markdown tables;
* :mod:`~acute.report.summary`: the default estimator against the best baseline, per pair;
* :mod:`~acute.report.figures`: figures and the learning-curve and transfer sections;
* :mod:`~acute.report.render`: :class:`ReportInputs`, :func:`render_report`, :func:`write_report`.

The names below are the package's public API (docs/api.md): the report's inputs, rendering and
writing it, and reading one evaluation run; its tables and summaries are imported from their
modules.
"""

from __future__ import annotations

from .render import ReportInputs, render_report, write_report
from .runs import EvalRun, load_eval_run

__all__ = ["EvalRun", "ReportInputs", "load_eval_run", "render_report", "write_report"]

"""The reproduction report of ``acute run``: ``docs/results/README.md`` (and ``report.json``,
``summary.csv``, figures) from the evaluation, transfer and protocol runs.

* :mod:`~acute.report.runs`: an evaluation folder (:class:`EvalRun`) and the report's numbers
  (paired bootstrap draws, averaged over models, percentile intervals);
* :mod:`~acute.report.tables`: the Markdown tables;
* :mod:`~acute.report.summary`: the default estimator against the best baseline, per pair;
* :mod:`~acute.report.figures`: figures and the learning-curve and transfer sections;
* :mod:`~acute.report.render`: :class:`ReportInputs`, :func:`render_report`, :func:`write_report`.
"""

from __future__ import annotations

from .render import ReportInputs, render_report, write_report
from .runs import REPORT_METRICS, EvalRun, average_draws, interval_summary, load_eval_run, metric_draws, metric_values
from .summary import SUMMARY_COLUMNS, kept_summary_rows, summary_csv, summary_markdown, summary_rows
from .tables import (ACUTE_VIEWS, INTERPRETATION_END, INTERPRETATION_START, PAPER_NUMBERS, ablation_markdown,
                     comparison_markdown, estimator_markdown, preserved_block, timings_markdown)

__all__ = [
    "ACUTE_VIEWS", "INTERPRETATION_END", "INTERPRETATION_START", "PAPER_NUMBERS", "REPORT_METRICS",
    "SUMMARY_COLUMNS", "EvalRun", "ReportInputs", "ablation_markdown", "average_draws", "comparison_markdown",
    "estimator_markdown", "interval_summary", "kept_summary_rows", "load_eval_run", "metric_draws", "metric_values",
    "preserved_block", "render_report", "summary_csv", "summary_markdown", "summary_rows", "timings_markdown", "write_report",
]

"""The reproduction report of ``acute run``: ``docs/results/README.md`` (and ``report.json``,
``summary.csv``, figures) from the evaluation, transfer and protocol runs.

* :mod:`~acute.report.runs`: an evaluation folder (:class:`EvalRun`; or an earlier report's
  committed tables, :func:`committed_eval_run`) and the report's numbers
  (each evaluation's own rows from ``results.json``, and their mean over models);
* :mod:`~acute.report.tables`: the Markdown tables;
* :mod:`~acute.report.summary`: the default estimator against the best baseline, per pair;
* :mod:`~acute.report.figures`: figures and the learning-curve and transfer sections;
* :mod:`~acute.report.render`: :class:`ReportInputs`, :func:`render_report`, :func:`write_report`.
"""

from __future__ import annotations

from .render import ReportInputs, render_report, write_report
from .runs import (REPORT_METRICS, EvalRun, average_summaries, committed_eval_run, load_eval_run, run_summary,
                   settings_differences)
from .summary import SUMMARY_COLUMNS, kept_summary_rows, summary_csv, summary_markdown, summary_rows
from .tables import (ACUTE_VIEWS, INTERPRETATION_END, INTERPRETATION_START, PAPER_NUMBERS, ablation_markdown,
                     comparison_markdown, estimator_markdown, preserved_block, timings_markdown)

__all__ = [
    "ACUTE_VIEWS", "INTERPRETATION_END", "INTERPRETATION_START", "PAPER_NUMBERS", "REPORT_METRICS",
    "SUMMARY_COLUMNS", "EvalRun", "ReportInputs", "ablation_markdown", "average_summaries", "comparison_markdown",
    "committed_eval_run", "estimator_markdown", "kept_summary_rows", "load_eval_run", "run_summary",
    "settings_differences",
    "preserved_block", "render_report", "summary_csv", "summary_markdown", "summary_rows", "timings_markdown", "write_report",
]

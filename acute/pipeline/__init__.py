"""``acute run CONFIG``: the reproduction pipeline (model x task grid, stages in their own
processes, resume, timings) and its report.

* :mod:`~acute.pipeline.config`: the TOML config, read and checked;
* :mod:`~acute.pipeline.plan`: the jobs, which are done, the sample of examples per pair;
* :mod:`~acute.pipeline.processes`: a stage in its own process, its timings and peak memory;
* :mod:`~acute.pipeline.workers`: the stage workers (collect, evaluate, transfer, protocol, report);
* :mod:`~acute.pipeline.driver`: :func:`main`, the command line of ``acute run``.
"""

from __future__ import annotations

from .config import STAGES, Config, ModelSpec, TaskSpec, check_inputs, config_hash, load_config
from .driver import main, regenerate_commands
from .plan import Job, matches, pair_dir, plan_jobs, planned_failures, report_inputs_hash, select_examples
from .processes import load_timings, own_peak_rss_mb, run_worker, update_timings
from .workers import load_task_examples, worker_main

__all__ = ["STAGES", "Config", "Job", "ModelSpec", "TaskSpec", "check_inputs", "config_hash", "load_config",
           "load_task_examples", "load_timings", "main", "matches", "own_peak_rss_mb", "pair_dir", "plan_jobs",
           "planned_failures", "regenerate_commands", "report_inputs_hash", "run_worker", "select_examples",
           "update_timings", "worker_main"]

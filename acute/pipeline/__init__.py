"""``acute run CONFIG``: the reproduction pipeline (model x task grid, stages in their own
processes, resume, timings) and its report.

* :mod:`~acute.pipeline.config`: the TOML config, read and checked;
* :mod:`~acute.pipeline.plan`: the jobs, which are done, the sample of examples per pair;
* :mod:`~acute.pipeline.processes`: a stage in its own process, its timings and peak memory;
* :mod:`~acute.pipeline.workers`: the stage workers (collect, evaluate, transfer, protocol, report);
* :mod:`~acute.pipeline.driver`: :func:`main`, the command line of ``acute run``.

The names below are the package's public API (docs/api.md): reading a config, planning its jobs
and running it; the stages' workers, the sample selection and the timings are imported from
their modules.
"""

from __future__ import annotations

from .config import STAGES, Config, ModelSpec, TaskSpec, load_config
from .driver import main
from .plan import Job, plan_jobs

__all__ = ["STAGES", "Config", "Job", "ModelSpec", "TaskSpec", "load_config", "main", "plan_jobs"]

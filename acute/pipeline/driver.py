"""The reproduction pipeline (``acute run``): model x task grid -> stores -> evaluations ->
protocol studies -> ``docs/results/README.md``.

    acute run CONFIG [--out docs/results] [--work runs/reproduce]
        [--only MODEL/TASK ...] [--stages collect,evaluate,protocol,report]
        [--data-root DIR] [--plan] [--force]

For every model and task of the TOML config (see ``examples/reproduce.toml``):

1. **collect**: answer the task's examples (a fixed, seeded sample of the data file; sizes per
   model and task) while recording every layer's hidden states into a store
   (:func:`acute.collect.collect`; resumes through the store).
2. **evaluate**: split the records by id into train and test (seed, test fraction), fit the six
   baselines and six ACUTE variants, evaluate on test with bootstrap intervals
   (:func:`acute.evaluation.evaluate.evaluate_store`).
3. **protocol**: the verbalized-vs-token protocol study on the tasks that ask for it
   (:func:`acute.protocol.run_protocol`, its own size; its answers come from the pair's store
   when that holds every example, else from a store of its own; resumes record shard by shard).
4. **report**: ``README.md`` in ``--out`` with every table, figures, protocol tables and the
   wall time and peak memory of each stage (:mod:`acute.report.render`).

Resumable: a stage whose outputs are complete and were made with the same settings (a hash of
the settings that determine them, stored next to the outputs) is skipped; collection resumes
record by record. ``--force`` runs the selected stages even when they are complete (after a code
change their settings hash does not see); a forced collection still only adds missing records.
Each stage of each model and task runs in its own Python process (``python -m acute.pipeline
_worker ...``), so its peak resident memory is measured alone (the
process's ``VmHWM``, see :func:`own_peak_rss_mb`); wall time, CPU time (``os.wait4``) and peak
memory go to ``<work>/timings.json``. A failed stage is recorded and the others go on; the exit status is 1
when any stage failed.

Work layout: ``<work>/<model>/<task>/{store,eval,protocol}`` and ``<stage>.done.json`` there.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Sequence


from .config import STAGES, Config, check_inputs, load_config
from .plan import Job, plan_jobs, report_inputs_hash
from .processes import load_timings, run_worker, update_timings
from .workers import worker_main
from ..console import load_options_from_args, model_options_parser, show_logs

__all__ = ["main", "regenerate_commands"]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="acute run", description=__doc__.split("\n\n")[0], parents=[model_options_parser()],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="TOML config (examples/reproduce.toml, examples/reproduce-smoke.toml)")
    p.add_argument("--out", default="docs/results", help="where README.md, figures and tables go (default docs/results)")
    p.add_argument("--work", default="runs/reproduce", help="stores, evaluations, protocol runs, timings.json (default runs/reproduce)")
    p.add_argument("--only", nargs="+", action="extend", metavar="MODEL/TASK",
                   help="run only these model/task pairs (glob patterns; MODEL alone = all its tasks)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated subset of {','.join(STAGES)} (default all)")
    p.add_argument("--data-root", default=None, help="folder the tasks' data paths are relative to "
                   "(default: the config's run.data_root, $ACUTE_DATA, or ../shared/data)")
    p.add_argument("--plan", action="store_true", help="print the jobs and whether each would run, then exit")
    p.add_argument("--force", action="store_true",
                   help="run the selected stages even when their outputs are complete (e.g. after a code "
                        "change; a collection still resumes and only adds missing records)")
    args = p.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        p.error(f"--stages: unknown stage(s) {bad}; choose from {','.join(STAGES)}")
    args.stages = tuple(s for s in STAGES if s in stages)
    args.load_options = load_options_from_args(args)
    return args


def _command(argv: Sequence[str]) -> str:
    return shlex.join(["acute", "run", *argv])


def regenerate_commands(args: argparse.Namespace) -> tuple[str, str]:
    """``(full, report_only)``: the command that regenerates every output of the config (no
    ``--only``/``--stages``: the report covers every model and task) and the one that only
    rewrites the report from existing runs."""
    parts = [args.config, "--out", args.out, "--work", args.work]
    if args.data_root:
        parts += ["--data-root", args.data_root]
    return _command(parts), _command(parts + ["--stages", "report"])


def _prepare_report(job: Job, cfg: Config, work: Path, out: Path, timings: dict) -> None:
    job.hash = report_inputs_hash(cfg, work, timings, job.payload)
    job.done_file = work / "report.done.json"
    job.outputs = (out / "README.md", out / "report.json")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver; returns the exit status (0: every job ran or was complete, 1: a job failed)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_logs()  # progress and output paths of the library's slow steps, on stderr
    if argv[:1] == ["_worker"]:
        return worker_main(argv[1], argv[2])
    args = _parse_args(argv)
    cfg = load_config(args.config, data_root=args.data_root)
    check_inputs(cfg)
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    command, report_command = regenerate_commands(args)
    jobs = plan_jobs(cfg, work, out, args.stages, args.only, command=command,
                     report_command=report_command)
    timings_path = work / "timings.json"
    timings = load_timings(timings_path)
    if args.plan:
        for j in jobs:
            if j.stage == "report":
                _prepare_report(j, cfg, work, out, timings)
            state = "complete, would skip" if j.is_complete() and not args.force else "would run"
            print(f"{j.key:60s} {state}")
        return 0

    work.mkdir(parents=True, exist_ok=True)
    invocation = {"id": uuid.uuid4().hex, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "command": _command(argv), "jobs": []}
    ran: dict[str, dict] = {}  # this invocation's stage entries, merged into timings.json
    failed: set[str] = set()
    t_start = time.perf_counter()
    print(f"reproduce: {len(jobs)} jobs; work {work}; out {out}; data {cfg.data_root}", flush=True)
    for i, job in enumerate(jobs, start=1):
        tag = f"[{i}/{len(jobs)}] {job.key}"
        if job.stage == "report":
            timings = load_timings(timings_path)  # includes side-by-side invocations' stages
            _prepare_report(job, cfg, work, out, timings)
        blocked = [a for a in job.after if a in failed]
        if blocked:
            entry = {"status": "blocked", "wall_s": 0.0, "detail": f"needs {', '.join(blocked)}"}
            print(f"{tag}: blocked ({entry['detail']} failed)", flush=True)
            failed.add(job.key)
        elif job.is_complete() and not args.force:
            entry = {"status": "skipped", "wall_s": 0.0, "detail": f"complete (settings {job.hash})"}
            print(f"{tag}: skipped, outputs complete (settings {job.hash})", flush=True)
        else:
            print(f"{tag}: running", flush=True)
            entry = run_worker(job, work, load_options=args.load_options)
            ran[job.key] = entry
            if entry["status"] == "ran":
                peak = entry["peak_rss_mb"]
                print(f"{tag}: done in {entry['wall_s']:.1f} s, peak memory "
                      f"{'n/a' if peak is None else f'{peak:.0f} MB'}", flush=True)
            else:
                failed.add(job.key)
                print(f"{tag}: FAILED after {entry['wall_s']:.1f} s: {entry['detail']}", flush=True)
        invocation["jobs"].append({"key": job.key, "status": entry["status"], "wall_s": entry["wall_s"]})
        timings = update_timings(timings_path, ran, invocation)
    invocation["wall_s"] = round(time.perf_counter() - t_start, 3)
    update_timings(timings_path, ran, invocation)
    n_ran = sum(j["status"] == "ran" for j in invocation["jobs"])
    n_skip = sum(j["status"] == "skipped" for j in invocation["jobs"])
    print(f"reproduce: {n_ran} ran, {n_skip} skipped, {len(failed)} failed/blocked in "
          f"{invocation['wall_s']:.1f} s; timings in {timings_path}", flush=True)
    return 1 if failed else 0

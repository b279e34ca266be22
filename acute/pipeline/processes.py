"""Running a stage in its own process (``python -m acute.pipeline _worker``) and measuring it:
wall time, CPU time and peak resident memory, kept in ``timings.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any


from .plan import Job
from ..fileio import write_text_atomic

__all__ = ["LOAD_OPTIONS_ENV", "PACKAGE_ROOT", "load_timings", "own_peak_rss_mb", "run_worker", "update_timings",
           "write_json_atomic"]


PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # put first on a worker's PYTHONPATH


TIMINGS_FORMAT = "acute-reproduce-timings/1"


_MAX_INVOCATIONS = 50


def load_timings(path: Path) -> dict:
    """``timings.json`` (a fresh document when missing or unreadable)."""
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("format") == TIMINGS_FORMAT:
                return doc
        except (OSError, json.JSONDecodeError):
            pass
    return {"format": TIMINGS_FORMAT, "stages": {}, "invocations": []}


def update_timings(path: Path, stages: dict, invocation: dict) -> dict:
    """Merge this invocation's ``stages`` entries and its ``invocation`` record into
    ``timings.json`` under an exclusive lock, re-reading the file first, so that invocations
    running side by side (different ``--only`` pairs, same ``--work``) do not drop each
    other's entries. Returns the merged document."""
    import fcntl  # optional: POSIX

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = load_timings(path)
        doc["stages"].update(stages)
        others = [i for i in doc.get("invocations", []) if i.get("id") != invocation["id"]]
        doc["invocations"] = (others + [invocation])[-_MAX_INVOCATIONS:]
        write_json_atomic(path, doc)
    return doc


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, default=str))


def _peak_rss_mb(ru_maxrss: float) -> float:
    """``ru_maxrss`` in MiB (Linux reports KiB, macOS bytes)."""
    return ru_maxrss / (1024.0 * 1024.0) if sys.platform == "darwin" else ru_maxrss / 1024.0


def own_peak_rss_mb() -> float:
    """This process's peak resident set size in MiB.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this program's own
    address space. (``ru_maxrss`` is not used there: the kernel carries the pre-``exec`` peak
    of the forked parent into it, so a child of a large process would report at least the
    parent's size.) Elsewhere: ``resource.getrusage(RUSAGE_SELF).ru_maxrss``. psutil offers no
    peak on Linux, so it is not needed.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    import resource  # optional: POSIX

    return _peak_rss_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


#: environment variable that carries ``acute run``'s model placement options to its workers
LOAD_OPTIONS_ENV = "ACUTE_RUN_LOAD_OPTIONS"


def run_worker(job: Job, work: Path, log=print, load_options: dict | None = None) -> dict:
    """Run ``job`` in a child process of this script and return its timing entry: ``status``
    (``ran``/``failed``), ``wall_s`` (child's wall time, imports included), ``peak_rss_mb``
    (the child's peak resident set size as it reports it, :func:`own_peak_rss_mb`; else the
    ``ru_maxrss`` of ``os.wait4``), ``cpu_s`` (its user + system CPU time: on a shared
    machine a steadier measure of work than wall time), ``started``/``finished`` and the worker's
    ``detail`` (its summary, or the error)."""
    jobs_dir = work / ".jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    stem = job.key.replace("/", "__") + "-" + uuid.uuid4().hex[:8]
    job_file, result_file = jobs_dir / f"{stem}.job.json", jobs_dir / f"{stem}.result.json"
    write_json_atomic(job_file, {"stage": job.stage, "key": job.key, "hash": job.hash,
                                  "done_file": str(job.done_file) if job.done_file else None,
                                  "payload": job.payload})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env[LOAD_OPTIONS_ENV] = json.dumps(load_options or {})
    cmd = [sys.executable, "-m", "acute.pipeline", "_worker", str(job_file), str(result_file)]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    peak = cpu = None
    try:
        if hasattr(os, "wait4"):
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            peak = _peak_rss_mb(usage.ru_maxrss)
            cpu = usage.ru_utime + usage.ru_stime
        else:  # pragma: no cover - non-POSIX
            proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    result: dict = {}
    if result_file.is_file():
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            result = {}
    if result.get("peak_rss_mb") is not None:  # the worker's own measure (see own_peak_rss_mb)
        peak = result["peak_rss_mb"]
    ok = proc.returncode == 0 and result.get("ok") is True
    entry = {"status": "ran" if ok else "failed", "wall_s": round(wall, 3),
             "peak_rss_mb": None if peak is None else round(peak, 1),
             "cpu_s": None if cpu is None else round(cpu, 2), "started": started,
             "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config_hash": job.hash,
             "returncode": proc.returncode, "detail": result.get("summary") if ok else
             (result.get("error") or f"worker exited with status {proc.returncode}")}
    for f in (job_file, result_file):
        f.unlink(missing_ok=True)
    return entry

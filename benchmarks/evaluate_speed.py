#!/usr/bin/env python
"""Where the time of an evaluation goes: each phase of a cross-validated evaluation table, of
``acute demo`` and of a learning curve, in one run (issue 28).

(a) the full evaluation table of ``--store`` as ``acute evaluate`` makes it (every default
    estimator and control, ``--folds`` x ``--repeats``, default 5 x 2, the fold cache off):
    opening the store, reading its states, the cross-validated fits (and the seconds of each
    estimator, summed over folds; a fit shared between estimators counts for the one fitted
    first), the metric table with its bootstrap intervals, writing tables and plots;
(b) with ``--demo``, ``acute demo`` end to end into a fresh folder (``run_demo``: loading the
    model, answering the questions, evaluating, exporting, live scoring); the model is fetched
    and converted on a first run (``$ACUTE_HOME``), which the load line then includes;
(c) a learning curve on the same store (the estimators of ``acute learning-curve``, its
    repeats) extending evaluation (a): the fits it reads from (a) instead of refitting are
    counted; its cost is given as a ratio to (a)'s.

Targets of issue 28 on a quiet 2-core machine: (a) on a 2,041-record store at most 5 minutes,
(b) at most 3 minutes with the model converted, (c) at most twice (a).

Usage::

    python benchmarks/evaluate_speed.py --store runs/evidence/smollm2-135m-instruct/default/store --demo

The output is printed as it comes and written to ``benchmarks/evaluate_speed.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_OUT = Path(__file__).resolve().parent / "evaluate_speed.md"


class Report:
    """Lines printed as they come and kept for the report file."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def phase(self, name: str, seconds: float, note: str = "") -> None:
        self(f"| {name} | {seconds:.1f} |" + (f" {note} |" if note else " |"))


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    from acute.evaluation.settings import DEFAULT_FOLDS, DEFAULT_REPEATS
    from acute.evaluation.learning_curve import DEFAULT_REPEATS as LC_REPEATS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="the store to evaluate (a) and to draw a learning curve on (c)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the raw output goes (default %(default)s)")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS)
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    p.add_argument("--n-bootstrap", type=int, default=1000, help="bootstrap resamples of (a) (default %(default)s)")
    p.add_argument("--n-jobs", type=int, default=None, help="forest threads (default: the probes' default, all cores)")
    p.add_argument("--n-estimators", type=int, default=None,
                   help="trees of every forest, the layer searches' too (default: the probes' defaults; for tests)")
    p.add_argument("--demo", action="store_true", help="also time `acute demo` end to end (b)")
    p.add_argument("--demo-limit", type=int, default=None, help="questions the demo collects (default: the demo's)")
    p.add_argument("--demo-model", default=None, help="the demo's model (default: the demo's)")
    p.add_argument("--no-learning-curve", action="store_true", help="leave out (c)")
    p.add_argument("--lc-estimators", default="acute-pca10,acute-pca10-stacked",
                   help="the learning curve's probes (default: acute learning-curve's, %(default)s)")
    p.add_argument("--lc-repeats", type=int, default=LC_REPEATS, help="the learning curve's repeats (default %(default)s)")
    return p.parse_args(argv)


def _machine() -> str:
    import joblib
    import numpy
    import sklearn

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    load = " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
            f"({joblib.cpu_count()} usable), load average {load}; Python {platform.python_version()}, "
            f"numpy {numpy.__version__}, scikit-learn {sklearn.__version__}; commit {commit}; "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")


def evaluation_phases(args, say: Report, probe_params):
    """(a): the evaluation of the store, phase by phase; returns (store, result, total seconds)."""
    from acute.estimators.registry import ESTIMATORS
    from acute.evaluation import evaluate_store, write_evaluation
    from acute.evaluation.crossval import inputs_for
    from acute.store import open_store

    say(f"## (a) evaluation: {args.folds}-fold x {args.repeats}, every default estimator and control, "
        f"{args.n_bootstrap} bootstrap resamples, fold cache off\n")
    say("| phase | seconds | |\n|---|---:|---|")
    t0 = time.perf_counter()
    store = open_store(args.store)
    t_open = time.perf_counter() - t0
    say.phase("open the store", t_open, f"{len(store)} records, layer_means {list(store.layer_means.shape)}")
    t = time.perf_counter()
    pooled = list(ESTIMATORS) + (["question-only"] if "last-prompt" in getattr(store, "poolings", ()) else [])
    inputs_for(store, pooled)  # the hidden states the fits read (and the page cache holds for them)
    t_read = time.perf_counter() - t
    say.phase("read the states", t_read, "the poolings the probes read")
    t = time.perf_counter()
    result = evaluate_store(store, cv=args.folds, repeats=args.repeats, n_bootstrap=args.n_bootstrap,
                            n_jobs=args.n_jobs, probe_params=probe_params, progress=False, reliability="best")
    t_eval = time.perf_counter() - t
    fits = float(result.params["total_seconds"])
    say.phase("cross-validated fits and predictions", fits,
              f"{len(result.params['estimators'])} estimators x {args.folds * args.repeats} folds")
    say.phase("states again, metric table and bootstrap intervals", t_eval - fits)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        write_evaluation(result, Path(tmp) / "evaluation")
        t_write = time.perf_counter() - t
    say.phase("write tables and plots", t_write)
    total = t_open + t_read + t_eval + t_write
    say.phase("**total**", total)
    say("\nseconds of each estimator's fits and predictions, summed over folds (largest first):\n")
    say("| estimator | seconds |\n|---|---:|")
    for name, s in sorted(result.params["fit_seconds"].items(), key=lambda kv: -kv[1]):
        say(f"| {name} | {s:.1f} |")
    return store, result, total


def demo_phases(args, say: Report) -> float:
    """(b): ``acute demo`` end to end into a fresh folder; returns its total seconds."""
    from acute.cli.demo import DEMO_LIMIT, run_demo

    limit = DEMO_LIMIT if args.demo_limit is None else args.demo_limit
    say(f"\n## (b) acute demo: {limit} questions, end to end\n")
    kw = {} if args.demo_model is None else {"model_name": args.demo_model}
    steps: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run_demo(Path(tmp) / "demo", limit=limit, timings=steps, **kw)
        total = time.perf_counter() - t
    say("| phase | seconds |\n|---|---:|")
    for step, s in steps.items():
        say.phase(step, s)
    say.phase("**total**", total)
    return total


def learning_curve_phases(args, say: Report, store, result, probe_params, evaluation_s: float) -> float:
    """(c): a learning curve on the store, extending (a)'s evaluation; returns its seconds."""
    from acute.estimators.baselines import BASELINES
    from acute.evaluation.crossval import inputs_for
    from acute.evaluation.learning_curve import learning_curve, write_learning_curve

    names = [n.strip() for n in args.lc_estimators.split(",") if n.strip()]
    say(f"\n## (c) learning curve: {', '.join(names)} and the baselines, {args.folds}-fold x "
        f"{args.lc_repeats}, extending (a)\n")
    t0 = time.perf_counter()
    X = inputs_for(store, list(BASELINES) + names)
    t_read = time.perf_counter() - t0
    t = time.perf_counter()
    lc = learning_curve(X, store.correct, store.ids, estimators=names,
                        n_splits=args.folds, repeats=args.lc_repeats, n_jobs=args.n_jobs,
                        probe_params=probe_params, evaluation=result)
    t_lc = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        write_learning_curve(lc, tmp)
        t_write = time.perf_counter() - t
    say("| phase | seconds | |\n|---|---:|---|")
    say.phase("read the states", t_read)
    for size, s in zip(lc.sizes, lc.fit_seconds):
        say.phase(f"fits at {size} training records", s)
    say.phase("bootstrap intervals", t_lc - sum(lc.fit_seconds))
    say.phase("write tables and plot", t_write)
    total = t_read + t_lc + t_write
    say.phase("**total**", total, f"{total / evaluation_s:.2f}x the evaluation (a); "
              f"{lc.n_reused} estimator fits read from (a)")
    return total


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    say = Report()
    cmd = " ".join(["python", "benchmarks/evaluate_speed.py", *(sys.argv[1:] if argv is None else list(argv))])
    say(f"# evaluate_speed\n\n`{cmd}`\n\n{_machine()}; {time.strftime('%Y-%m-%d %H:%M')}\n")
    probe_params = None
    if args.n_estimators is not None:
        probe_params = {"n_estimators": args.n_estimators, "search_n_estimators": args.n_estimators}
    store, result, evaluation_s = evaluation_phases(args, say, probe_params)
    if args.demo:
        demo_phases(args, say)
    if not args.no_learning_curve:
        learning_curve_phases(args, say, store, result, probe_params, evaluation_s)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(say.lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

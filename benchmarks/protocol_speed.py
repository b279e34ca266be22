#!/usr/bin/env python
"""Time per row of the protocol study vs a collection of the same rows (a benchmark).

Both run in one process on one loaded model (model loading is left out of both), on the first
``--n`` rows of the task, with the same batch size:

* ``collect``: :func:`acute.collect.collect` into a fresh store (what ``acute collect`` runs:
  greedy answers with the hidden-state recorder, labels, store writes);
* ``protocol``: :func:`acute.protocol.run_protocol` into a fresh folder, everything included:
  its own answer pass (a collection into ``OUT/store``), the verbalizations and teacher-forced
  scorings, the analysis with ``--n-bootstrap`` resamples and the report files. Its passes are
  timed separately (answers / verbalizations and scoring / analysis).

Target of issue 17: protocol time per row at most 2.5x the collection time per row. Before
this issue's changes the ratio was 7.4 (SmolLM2, 40 TriviaQA rows, the CLI commands).

Usage (the model is fetched once into ``$ACUTE_HOME``)::

    python benchmarks/protocol_speed.py --threads 1 --n 40 \\
        --data ../shared/data/triviaqa/validation.jsonl

The report goes to ``benchmarks/protocol_speed.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch_throughput import command_line, markdown_table, write_report  # noqa: E402

import acute.protocol.runner as runner  # noqa: E402
from acute.collect import collect  # noqa: E402
from acute.models import load_model  # noqa: E402
from acute.tasks import get_task  # noqa: E402
from acute.store.generation import GenerationSettings

DEFAULT_OUT = Path(__file__).resolve().parent / "protocol_speed.md"


class PassTimer:
    """Wall time spent inside some functions of :mod:`acute.protocol.runner` (patched in place)."""

    def __init__(self, names: Sequence[str]):
        self.seconds = {name: 0.0 for name in names}
        for name in names:
            setattr(runner, name, self._timed(name, getattr(runner, name)))

    def _timed(self, name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return wrapper


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--task", default="triviaqa")
    ap.add_argument("--data", default="../shared/data/triviaqa/validation.jsonl")
    ap.add_argument("--n", type=int, default=40, help="rows (the first n examples)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--n-bootstrap", type=int, default=1000, help="the protocol's default")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    task = get_task(args.task)
    examples = task.load(args.data, limit=args.n)
    timer = PassTimer(["_elicit", "analyze_records"])
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        collect(model, tokenizer, task, examples, Path(tmp) / "collect",
                GenerationSettings(batch_size=args.batch_size), progress=False)
        t_collect = time.perf_counter() - start
        start = time.perf_counter()
        result = runner.run_protocol(model, tokenizer, task, examples, Path(tmp) / "protocol",
                                     GenerationSettings(batch_size=args.batch_size),
                                     n_bootstrap=args.n_bootstrap, progress=False)
        t_protocol = time.perf_counter() - start
    n = len(examples)
    elicit, analysis = timer.seconds["_elicit"], timer.seconds["analyze_records"]
    answers = t_protocol - elicit - analysis
    ratio = t_protocol / t_collect
    rows = [
        ["collect", f"{t_collect:.1f}", f"{t_collect / n:.2f}", "1.00"],
        ["protocol, total", f"{t_protocol:.1f}", f"{t_protocol / n:.2f}", f"{ratio:.2f}"],
        ["- answers (a collection) and report files", f"{answers:.1f}", f"{answers / n:.2f}",
         f"{answers / t_collect:.2f}"],
        ["- verbalizations and teacher-forced scoring", f"{elicit:.1f}", f"{elicit / n:.2f}",
         f"{elicit / t_collect:.2f}"],
        [f"- analysis ({args.n_bootstrap} bootstrap resamples)", f"{analysis:.1f}", f"{analysis / n:.2f}",
         f"{analysis / t_collect:.2f}"],
    ]
    parsed = sum(r["verbal"][p]["status"] == "ok" for r in result.records for p in r["verbal"])
    elicited = sum(r["verbal"][p]["status"] != "unavailable" for r in result.records for p in r["verbal"])
    write_report(args.out, "\n".join([
        "# Protocol study vs collection, time per row (`benchmarks/protocol_speed.py`)",
        "",
        f"    {command_line(Path(__file__).name, argv)}",
        "",
        f"Model `{args.model}` (float32, CPU), task `{args.task}` (`{args.data}`), the first {n} rows, "
        f"batch {args.batch_size}; one process, model loaded once (loading excluded from both). "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f} at the end, {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        markdown_table(["run", "seconds", "seconds / row", "x collect"], rows),
        "",
        f"Protocol / collection time per row: **{ratio:.2f}** (target <= 2.5: "
        f"{'met' if ratio <= 2.5 else 'NOT met'}; before issue 17: 7.4). "
        f"{parsed} of {elicited} verbalizations parsed.",
        "",
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a precheck costs a gated request whose question it lets through (issue 45 item 5).

Usage:
    python benchmarks/precheck_latency.py --store STORE [--questions 64] [--batch 8] [--repeats 3]

The answer probe (the default estimator) and the question-only probe (``acute export
--with-precheck``) are fitted on ``--store`` (SmolLM2-135M-Instruct's built-in questions, e.g. the
store ``benchmarks/q_style_check.py collect`` writes). Then ``--questions`` other built-in
questions (those after the store's in the same seeded shuffle) are scored by a
:class:`acute.scoring.Scorer` in batches of ``--batch``, three ways, interleaved per batch and
repeated ``--repeats`` times:

* ``plain``: ``generate(batch, risk=0.5)``, no precheck;
* ``gated``: ``generate(batch, risk=0.5, precheck=1e-9)``: every question passes the precheck, so
  every answer is generated: the precheck's pass is the generation's prefill
  (:func:`acute.extraction.generate_after_prompt_pass`);
* ``separate``: ``precheck(batch)`` and then ``generate(batch, risk=0.5)``: what a gate that
  prechecks in its own pass pays (acute before this change).

Prints the median seconds per batch of each and the overhead over ``plain``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = "smollm2-135m-instruct"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="SmolLM2 built-in questions store (with last-prompt states)")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import torch

    from acute.estimators import load_probe
    from acute.evaluation.training import train_probe
    from acute.models import load_model
    from acute.scoring import Scorer
    from acute.store import open_store
    from acute.tasks import get_task

    torch.set_num_threads(1)
    store = open_store(args.store)
    trained = train_probe(store, precheck_estimator="question-only", n_jobs=1)
    with tempfile.TemporaryDirectory() as tmp:
        trained.save(Path(tmp) / "probe")
        probe = load_probe(Path(tmp) / "probe")
    model, tok = load_model(MODEL)
    scorer = Scorer(model, tok, probe)
    examples = get_task("default").load()
    order = np.random.default_rng(0).permutation(len(examples))
    seen = {str(i) for i in store.ids}
    questions = [examples[i].question for i in order if str(examples[i].id) not in seen][:args.questions]
    batches = [questions[k:k + args.batch] for k in range(0, len(questions), args.batch)]
    ways = {
        "plain": lambda b: scorer.generate(b, risk=0.5),
        "gated": lambda b: scorer.generate(b, risk=0.5, precheck=1e-9),
        "separate": lambda b: (scorer.precheck(b, threshold=1e-9), scorer.generate(b, risk=0.5)),
    }
    ways["plain"](batches[0])  # warm-up
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(args.repeats):
        for b in batches:
            for name, call in ways.items():
                t0 = time.perf_counter()
                call(b)
                seconds[name].append(time.perf_counter() - t0)
        print(f"repeat {r + 1}/{args.repeats} done", flush=True)
    plain = float(np.median(seconds["plain"]))
    print(f"\n{len(questions)} questions, batches of {args.batch}, {args.repeats} repeats, one thread\n")
    print("| way | median s per batch | over plain |")
    print("|---|---:|---:|")
    for name in ways:
        med = float(np.median(seconds[name]))
        print(f"| {name} | {med:.3f} | {med / plain - 1:+.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""The probe's share of the time of a scored generation (``Scorer.generate``).

Inside ``Scorer.generate`` two things take time: generating with the hidden-state recorder
attached (``generate_and_record``) and scoring the pooled activations with the probe
(``predict_proba``; feature extraction included). Both are timed in place, by wrapping the two
calls, for batches of 1 and 8 built-in questions. Target: the probe takes <= 2% of the time.

    python benchmarks/scoring_overhead.py                     # fits a synthetic-label probe
    python benchmarks/scoring_overhead.py --probe runs/demo/probe

Without ``--probe``, a pca10 probe of the default size (500 trees) is fitted on the
activations of ``--n-train`` built-in questions with labels from a hash of the question id (its
predictions mean nothing; its size and shape are those of a real probe). Questions used to time
scoring are disjoint from the training ones.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time

import numpy as np
from acute.estimators.inputs import Inputs


class _TimedProbe:
    """Delegates to a probe and adds the time of each ``predict_proba`` call to ``seconds``."""

    def __init__(self, probe):
        self.probe = probe
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(self.probe, name)

    def predict_proba(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.probe.predict_proba(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0


def _fit_synthetic_probe(model, tok, task, examples, trees: int):
    from acute.extraction import generate_and_record
    from acute.models import model_fingerprint
    from acute.store import ModelIdentity
    from acute.estimators import ActivationProbe

    prompts = [task.prompt(tok, ex) for ex in examples]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=task.max_new_tokens,
                               stop_strings=task.stop_strings)
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    y = np.array([hashlib.sha256(ex.id.encode()).digest()[0] % 2 for ex in examples])
    probe = ActivationProbe(view="pca10", n_estimators=trees).fit(Inputs.of(X, raw), y)
    return probe.export(ModelIdentity(model="benchmark", model_fingerprint=model_fingerprint(model)))


def main(argv=None) -> int:
    import torch

    import acute.extraction
    from acute.models import load_model
    from acute.estimators import load_probe
    from acute.scoring import Scorer
    from acute.tasks import get_task

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--probe", default=None, help="a saved probe (default: fit a synthetic-label one)")
    p.add_argument("--n-train", type=int, default=64)
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per batch size")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tok = load_model(args.model)
    task = get_task("default")
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    examples = task.load()
    need = args.n_train + 1 + sum(sizes) * args.repeats
    if len(examples) < need:
        raise SystemExit(f"needs {need} built-in questions, found {len(examples)}")
    t0 = time.perf_counter()
    if args.probe:
        probe = load_probe(args.probe)
        what = f"probe {args.probe} ({probe.view}, {probe.manifest['forest']['n_trees']} trees)"
    else:
        probe = _fit_synthetic_probe(model, tok, task, examples[: args.n_train], args.trees)
        what = f"synthetic-label pca10 probe, {args.trees} trees, fitted on {args.n_train} records"
    print(f"# {what}; setup {time.perf_counter() - t0:.0f} s; torch threads {torch.get_num_threads()}",
          file=sys.stderr)

    timed = _TimedProbe(probe)
    scorer = Scorer(model, tok, timed, task=task)
    real_generate = acute.extraction.generate_and_record
    gen_seconds = [0.0]

    def timed_generate(*a, **k):
        t = time.perf_counter()
        try:
            return real_generate(*a, **k)
        finally:
            gen_seconds[0] += time.perf_counter() - t

    acute.extraction.generate_and_record = timed_generate
    questions = iter(ex.question for ex in examples[args.n_train:])
    scorer.generate(next(questions), risk=0.5)  # warm-up (first-call overheads)
    rows = []
    try:
        for b in sizes:
            shares, totals, probe_ms, gen_s, tokens = [], [], [], [], []
            for _ in range(args.repeats):
                batch = [next(questions) for _ in range(b)]
                timed.seconds, gen_seconds[0] = 0.0, 0.0
                t = time.perf_counter()
                out = scorer.generate(batch, risk=0.5)
                total = time.perf_counter() - t
                totals.append(total)
                probe_ms.append(1000 * timed.seconds)
                gen_s.append(gen_seconds[0])
                shares.append(100 * timed.seconds / total)
                tokens.append(sum(s.n_tokens for s in out))
            rows.append((b, statistics.median(totals), statistics.median(gen_s),
                         statistics.median(probe_ms), statistics.median(shares), max(shares),
                         statistics.mean(tokens)))
    finally:
        acute.extraction.generate_and_record = real_generate

    print("| batch | Scorer.generate (s) | generate_and_record (s) | probe.predict_proba (ms) "
          "| probe share, median (max) | generated tokens |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b, total, gen, pms, share, worst, toks in rows:
        print(f"| {b} | {total:.2f} | {gen:.2f} | {pms:.1f} | {share:.2f}% ({worst:.2f}%) | {toks:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Score live generations and decide, at a risk level, whether to trust each answer.

    python examples/train_probe.py                  # once: writes runs/train-probe/probe
    python examples/score_live.py --probe runs/train-probe/probe --risk 0.7

The decision is *trust* iff the probe's confidence exceeds the risk level u: the cost of
trusting a wrong answer relative to the cost of abstaining on a right one.
"""

from __future__ import annotations

import argparse

import acute
from acute.scoring import DEFAULT_RISK, Scorer
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct", help="the model the probe was trained on")
parser.add_argument("--probe", default="runs/train-probe/probe")
parser.add_argument("--limit", type=int, default=5, help="built-in questions to score")
parser.add_argument("--risk", type=float, default=DEFAULT_RISK)
args = parser.parse_args()

probe = acute.load_probe(args.probe)  # safetensors + JSON, nothing is unpickled
model, tokenizer = acute.load_model(args.model)
# The scorer refuses a probe of another model and asks each question the way the training
# answers were collected (the task prompt and generation settings recorded with the probe).
scorer = Scorer(model, tokenizer, probe)

questions = [ex.question for ex in get_task("default").load(limit=args.limit)]
for s in scorer.generate(questions, risk=args.risk):
    print(f"{s.question}\n  answer {s.answer!r}: raw {s.raw_confidence:.2f}, "
          f"probe {s.confidence:.2f} -> {s.decision}")

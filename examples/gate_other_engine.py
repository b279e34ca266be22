#!/usr/bin/env python
"""Gate answers produced by another serving engine: trust or abstain, without regenerating.

    python examples/train_from_logs.py                   # once: writes runs/train-from-logs/probe
    python examples/gate_other_engine.py --probe runs/train-from-logs/probe --risk 0.7
    python examples/gate_other_engine.py --answers answers.jsonl   # rows of prompt, response

Your engine (vLLM, TGI, llama.cpp, an API) answers; acute feeds the prompt and that answer to
the same model once (teacher forcing) and the probe reads the hidden states the model would
have had while generating it. The decision is *trust* iff the probe's confidence exceeds the
risk level u (the cost of trusting a wrong answer relative to the cost of abstaining on a
right one). The same from the command line:

    acute score --probe runs/train-from-logs/probe "<prompt as sent>" --response "<answer>"

Send the engine the prompt exactly as acute formats it (here ``format_prompt``, the model's
chat template), since the probe was trained on prompts sent that way; messages work too for a
probe trained on ``messages`` rows. Here the "other engine" is plain ``transformers``
``generate`` on the same weights, standing in for an HTTP call.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import acute
from acute.models import format_prompt
from acute.scoring import DEFAULT_RISK, Scorer
from acute.tasks import get_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="smollm2-135m-instruct", help="the model the probe was trained on")
parser.add_argument("--probe", default="runs/train-from-logs/probe")
parser.add_argument("--limit", type=int, default=5, help="built-in questions to ask")
parser.add_argument("--risk", type=float, default=DEFAULT_RISK)
parser.add_argument("--answers", default=None,
                    help="JSONL of the engine's answers (rows with 'prompt' and 'response') instead of asking it")
args = parser.parse_args()

probe = acute.load_probe(args.probe)
model, tokenizer = acute.load_model(args.model)
scorer = Scorer(model, tokenizer, probe)  # refuses a probe of another model


def other_engine(prompts: list[str], max_new_tokens: int = 32) -> list[str]:
    """Stand-in for your serving engine: greedy answers from plain transformers."""
    import torch

    answers = []
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        answers.append(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return answers


if args.answers:
    rows = [json.loads(line) for line in Path(args.answers).read_text(encoding="utf-8").splitlines()
            if line.strip()][: args.limit]
    questions = [str(r.get("id", k)) for k, r in enumerate(rows)]
    prompts, answers = [r["prompt"] for r in rows], [r["response"] for r in rows]
else:
    questions = [ex.question for ex in get_task("default").load(limit=args.limit)]
    prompts = [format_prompt(tokenizer, q) for q in questions]  # sent to the engine as is
    answers = other_engine(prompts)
given = [i for i, a in enumerate(answers) if a.strip()]  # an empty answer has nothing to trust
scored = dict(zip(given, scorer.score_responses([prompts[i] for i in given], [answers[i] for i in given],
                                                risk=args.risk)))
for i, question in enumerate(questions):
    s = scored.get(i)
    print(question)
    print(f"  answer {s.answer!r}: raw {s.raw_confidence:.2f}, probe {s.confidence:.2f} -> {s.decision}"
          if s else "  empty answer -> abstain")

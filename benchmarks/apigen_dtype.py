#!/usr/bin/env python
"""APIGen collection in float32 and in bfloat16, on the same records (a benchmark, issue 26).

The first ``--n`` records of the evidence sample (``examples/evidence.toml``'s APIGen task: seed
0, test + train) are generated and recorded in one batch per dtype: first float32, then the same
weights cast to bfloat16. Reported per dtype are seconds per record and accuracy. Reported
between the two are how many correctness labels and answers differ, the correlation of the raw
confidences, and the mean cosine of the pooled layer means. The decision rule is in
``benchmarks/apigen_dtype.md``, written before the first run.

Usage (the model converted once, ~9 GB peak)::

    OMP_NUM_THREADS=2 python benchmarks/apigen_dtype.py --n 16 --out benchmarks/apigen_dtype.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.collect.records import example_record  # noqa: E402
from acute.extraction import generate_and_record  # noqa: E402
from acute.models import load_model  # noqa: E402
from acute.pipeline.config import load_config  # noqa: E402
from acute.pipeline.plan import select_examples  # noqa: E402
from acute.pipeline.workers import load_task_examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qwen2.5-coder-1.5b-instruct"


def evidence_sample(n: int):
    """``(task, examples)``: the first ``n`` APIGen records ``acute run examples/evidence.toml``
    collects for the 1.5B model."""
    cfg = load_config(ROOT / "examples" / "evidence.toml")
    spec = next(t for t in cfg.tasks if t.key == "apigen")
    task, examples = load_task_examples({**spec.__dict__, "data": list(spec.data)})
    return task, select_examples(examples, n, cfg.seed)


def run(model, tok, task, examples, batch_size: int) -> tuple[list[dict], np.ndarray, float]:
    """Records, layer means [n, L+1, d] and seconds per record of one dtype's pass."""
    prompts = [task.prompt(tok, ex) for ex in examples]
    t0 = time.perf_counter()
    gens = generate_and_record(model, tok, prompts, max_new_tokens=task.max_new_tokens,
                               batch_size=batch_size, stop_strings=tuple(task.stop_strings or ()))
    seconds = (time.perf_counter() - t0) / len(examples)
    records = [example_record(task, ex, p, g) for ex, p, g in zip(examples, prompts, gens)]
    return records, np.stack([g.layer_means for g in gens]), seconds


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over records and layers of the cosine between matching pooled states."""
    num = (a * b).sum(-1)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return float(np.mean(num / np.maximum(den, 1e-12)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="records of the evidence sample (default 16)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None, help="append the result to this markdown file")
    args = ap.parse_args(argv)

    task, examples = evidence_sample(args.n)
    model, tok = load_model(MODEL, dtype="float32")
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        results[dtype] = run(model, tok, task, examples, args.batch_size)
        recs, _, sec = results[dtype]
        print(f"{dtype}: {sec:.2f} s/record, accuracy {np.mean([r['correct'] for r in recs]):.3f}",
              flush=True)

    (r32, m32, s32), (r16, m16, s16) = results[torch.float32], results[torch.bfloat16]
    labels_differ = sum(a["correct"] != b["correct"] for a, b in zip(r32, r16))
    answers_differ = sum(a["generation"].strip() != b["generation"].strip() for a, b in zip(r32, r16))
    raw32 = np.array([r["raw_confidence"] for r in r32])
    raw16 = np.array([r["raw_confidence"] for r in r16])
    speed_ok, labels_ok = s16 <= s32 / 2, labels_differ <= 3
    lines = [
        f"Command: `OMP_NUM_THREADS={torch.get_num_threads()} python benchmarks/apigen_dtype.py "
        f"--n {args.n} --batch-size {args.batch_size}`, {len(examples)} records, one batch per dtype.",
        "",
        "| | float32 | bfloat16 |",
        "|---|---:|---:|",
        f"| seconds per record | {s32:.2f} | {s16:.2f} |",
        f"| accuracy | {np.mean([r['correct'] for r in r32]):.3f} | {np.mean([r['correct'] for r in r16]):.3f} |",
        f"| unparseable replies | {sum(r['parse_error'] for r in r32)} | {sum(r['parse_error'] for r in r16)} |",
        f"| mean answer tokens | {np.mean([r['n_tokens'] for r in r32]):.1f} | {np.mean([r['n_tokens'] for r in r16]):.1f} |",
        "",
        f"- Speed-up: {s32 / s16:.2f}x (rule 1, at least 2x: {'met' if speed_ok else 'NOT met'}).",
        f"- Correctness labels that differ: {labels_differ} of {len(examples)} (rule 2, at most 3: "
        f"{'met' if labels_ok else 'NOT met'}).",
        f"- Answers that differ as text: {answers_differ} of {len(examples)}.",
        f"- Raw confidence: Pearson r {np.corrcoef(raw32, raw16)[0, 1]:.3f}, Spearman rho "
        f"{np.corrcoef(np.argsort(np.argsort(raw32)), np.argsort(np.argsort(raw16)))[0, 1]:.3f}.",
        f"- Pooled layer means: mean cosine float32 vs bfloat16 {cosine(m32, m16):.4f}.",
        "",
        f"**Decision: collect APIGen in {'bfloat16' if speed_ok and labels_ok else 'float32'}.**",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text + "\n")
        print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Collection speed on a CUDA GPU, with and without the hidden-state recorder (a benchmark).

For each batch size, the first ``--n`` built-in questions (the ``default`` task's collection
prompts) are generated twice, in the same length-sorted, left-padded batches and with exactly
``--new-tokens`` tokens per row (``min_new_tokens`` holds EOS back, so both do the same work):

(a) plain ``model.generate`` (greedy, KV cache), batch by batch;
(b) :func:`acute.extraction.generate_and_record`, i.e. ``generate`` with the recorder's hooks
    (pooled means of every layer, raw token log-probs) plus decoding the answers -- a collection
    without the labelling and the store writes.

Runs are interleaved, repeated ``--reps`` times and timed with ``torch.cuda.synchronize()``; the
table gives the median records/s of both, the recorder overhead (time of (b) / time of (a)) and
the peak GPU memory allocated. Before timing, the recorder's pooled means of one batch of 8 are
compared with the same means computed from ``generate(output_hidden_states=True)``.

Usage (needs a CUDA GPU; exits with code 2 and writes nothing without one)::

    python benchmarks/gpu_collect.py --device cuda --dtype bfloat16
    python benchmarks/gpu_collect.py --model qwen2.5-coder-0.5b-instruct --batch-sizes 1 8 32 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch_throughput import (  # noqa: E402
    command_line, interleaved_times, markdown_table, task_prompts, write_report,
)
from extract_overhead import gen_kwargs, run_plain, run_recorder  # noqa: E402

from acute.extraction import generate_and_record  # noqa: E402
from acute.extraction.batching import batch_order  # noqa: E402
from acute.models import load_model  # noqa: E402
from acute.models.prompts import eos_token_ids  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "gpu_collect.md"
EXIT_NO_CUDA = 2


def cuda_problem(device: str) -> str | None:
    """Why ``device`` cannot be benchmarked here, or ``None`` when it is a usable CUDA device."""
    if not str(device).startswith("cuda"):
        return f"--device must be a CUDA device ('cuda' or 'cuda:N'), got {device!r}"
    if not torch.cuda.is_available():
        return ("CUDA is not available (torch.cuda.is_available() is False, torch "
                f"{torch.__version__}); this benchmark needs a GPU")
    return None


def padded_batches(tokenizer, prompts: Sequence[str], batch_size: int, device):
    """The ``(input_ids, attention_mask)`` batches ``generate_and_record`` forms: tokenized
    without special tokens, sorted by length, left-padded; on ``device``."""
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    out = []
    for batch in batch_order([len(e) for e in encoded], batch_size):
        enc = tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, padding=True,
                            return_tensors="pt", padding_side="left")
        out.append((enc["input_ids"].to(device), enc["attention_mask"].to(device)))
    return out


def reference_means(model, ids, mask, kw) -> np.ndarray:
    """Pooled decoding-position means from ``generate(output_hidden_states=True)`` [B, L+1, d]."""
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             return_dict_in_generate=True, **kw)
    steps = [torch.stack([h[:, -1, :].float() for h in step], dim=1) for step in out.hidden_states]
    return torch.stack(steps).mean(0).cpu().numpy()


def cross_check(model, tokenizer, prompts, eos, device) -> float:
    """Max |recorder - output_hidden_states| of the pooled means, one batch of 8, 8 tokens."""
    ids, mask = padded_batches(tokenizer, prompts[:8], 8, device)[0]
    kw = gen_kwargs(tokenizer, eos, 8)
    return float(np.abs(run_recorder(model, ids, mask, kw, eos)
                        - reference_means(model, ids, mask, kw)).max())


def peak_gib(fn) -> float:
    """Peak GPU memory allocated during one call of ``fn``, in GiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def measure_batch_size(model, tokenizer, prompts, eos, bs: int, args):
    """Times (per mode) and peak memory (per mode) of the two modes at one batch size."""
    kw = gen_kwargs(tokenizer, eos, args.new_tokens)
    batches = padded_batches(tokenizer, prompts, bs, args.device)

    def plain():
        for ids, mask in batches:
            run_plain(model, ids, mask, kw)

    def recorded():
        generate_and_record(model, tokenizer, prompts, max_new_tokens=args.new_tokens,
                            min_new_tokens=args.new_tokens, batch_size=bs, eos_token_ids=eos,
                            reuse_prefix=False)  # the same padded batches as (a)

    runs = {"plain": plain, "recorder": recorded}
    memory = {key: peak_gib(fn) for key, fn in runs.items()}  # also the warm-up
    return interleaved_times(runs, args.reps, torch.cuda.synchronize), memory


def report(args, n: int, results, diff: float, argv) -> str:
    rows = []
    for bs, (times, memory) in results.items():
        plain, rec = (statistics.median(times[k]) for k in ("plain", "recorder"))
        rows.append([bs, f"{n / plain:.1f}", f"{n / rec:.1f}", f"{rec / plain:.3f}",
                     f"{n * args.new_tokens / rec:.0f}",
                     f"{memory['plain']:.2f} / {memory['recorder']:.2f}"])
    table = markdown_table(["batch", "records/s plain generate", "records/s with recorder",
                            "recorder overhead (time b / a)", "tokens/s with recorder",
                            "peak GPU GiB (a / b)"], rows)
    gpu = torch.cuda.get_device_name(torch.device(args.device))
    return "\n".join([
        "# Collection speed on a GPU (`benchmarks/gpu_collect.py`)",
        "",
        f"    {command_line(Path(__file__).name, argv)}",
        "",
        f"Model `{args.model}` ({args.dtype}) on {gpu}; the first {n} built-in questions "
        f"(default task prompts), exactly {args.new_tokens} new tokens per record, greedy, "
        f"{args.reps} interleaved repetitions, medians. (a) plain `model.generate` on the same "
        "sorted, left-padded batches; (b) `generate_and_record` (recorder hooks + decoding). "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        f"Recorder vs `output_hidden_states` pooled means (batch 8, 8 tokens): max |difference| "
        f"{diff:.2e}.",
        "",
        table,
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", type=int, default=64, help="number of built-in questions")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    problem = cuda_problem(args.device)
    if problem:
        print(f"gpu_collect: {problem}; nothing measured, nothing written.", file=sys.stderr)
        return EXIT_NO_CUDA

    model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
    prompts, _ = task_prompts(tokenizer, args.n)
    eos = eos_token_ids(model, tokenizer)
    diff = cross_check(model, tokenizer, prompts, eos, args.device)
    print(f"max |recorder - output_hidden_states| pooled difference: {diff:.2e}")
    results = {bs: measure_batch_size(model, tokenizer, prompts, eos, bs, args)
               for bs in args.batch_sizes}
    write_report(args.out, report(args, len(prompts), results, diff, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

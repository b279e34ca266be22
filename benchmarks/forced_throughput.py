#!/usr/bin/env python
"""Records/s of teacher-forced recording vs generating the same records (a benchmark).

For each task, the first ``--n`` examples are prompted as a collection prompts them and
generated with :func:`acute.extraction.generate_and_record` (greedy, the task's
``max_new_tokens`` and stop strings, batch ``--batch-size``, the default shared-prefix path);
the answers' texts are then recorded again with :func:`acute.extraction.record_responses` (what
``acute collect --responses`` runs on logged answers: the text re-tokenized, the most likely EOS
appended, one forward pass per batch). Neither includes labelling or store writes. Both runs
are repeated ``--reps`` times, interleaved; the table gives the median records/s and the ratio.
Target of issue 19: teacher forcing >= 3x the records/s of generating on SciTLDR. It also times
the physical limits (issue 28): a bare forward pass of the model over the same sequences and a
bare ``model.generate``, so each recording path is reported as a ratio to what the model alone
costs.

It also reports how close the forced raw confidences are to the generated ones for the answers
whose text re-tokenizes to the generated tokens and that ended with EOS (the others differ by
construction: a stop string is cut from the text, a non-canonical token sequence re-tokenizes).

Usage (the model is fetched once into ``$ACUTE_HOME``)::

    python benchmarks/forced_throughput.py --threads 2 --n 32 --reps 2 \
        --scitldr ../shared/data/scitldr/test.jsonl

The report goes to ``benchmarks/forced_throughput.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
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
    command_line, interleaved_times, markdown_table, mean_prompt_tokens, task_prompts, write_report,
)

from acute.extraction import generate_and_record, record_responses  # noqa: E402
from acute.extraction.batching import left_pad, padding_id, resolve_eos, tokenize  # noqa: E402
from acute.models import load_model  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "forced_throughput.md"


def length_batches(seqs: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of ``seqs`` sorted by length, in batches of ``batch_size``."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def bare_forward(model, seqs: Sequence[Sequence[int]], batch_size: int, pad_id: int) -> None:
    """One forward pass of the model over every sequence (no hooks, no pooling, no cache), in
    left-padded batches of similar length: the physical limit of teacher forcing them."""
    with torch.no_grad():
        for batch in length_batches(seqs, batch_size):
            ids, mask = left_pad([seqs[i] for i in batch], pad_id)
            model(input_ids=ids, attention_mask=mask, use_cache=False)


def bare_generate(model, prompts: Sequence[Sequence[int]], batch_size: int, pad_id: int, eos: Sequence[int],
                  max_new_tokens: int) -> None:
    """``model.generate`` (greedy, no recorder) over the prompts in left-padded batches."""
    with torch.no_grad():
        for batch in length_batches(prompts, batch_size):
            ids, mask = left_pad([prompts[i] for i in batch], pad_id)
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                           eos_token_id=list(eos), pad_token_id=pad_id)


def measure(model, tokenizer, task_name: str, data: str | None, n: int, batch_size: int, reps: int):
    """``(row, agreement)`` for one task: the table row and the raw-confidence agreement."""
    prompts, task = task_prompts(tokenizer, n, task_name, data)
    kept: dict[str, list] = {}

    def generate():
        kept["gens"] = generate_and_record(model, tokenizer, prompts, max_new_tokens=task.max_new_tokens,
                                           batch_size=batch_size, stop_strings=task.stop_strings)

    generate()  # the answers to force (and a warm-up)
    texts = [g.text for g in kept["gens"]]

    def force():
        kept["forced"] = record_responses(model, tokenizer, prompts, texts, batch_size=batch_size)

    eos = resolve_eos(model, tokenizer)
    pad = padding_id(tokenizer, eos)
    prompt_ids = tokenize(tokenizer, prompts)
    full = [p + r + eos[:1] for p, r in zip(prompt_ids, tokenize(tokenizer, [t or " " for t in texts]))]
    times = interleaved_times({
        "generate": generate, "force": force,
        "bare forward": lambda: bare_forward(model, full, batch_size, pad),
        "bare generate": lambda: bare_generate(model, prompt_ids, batch_size, pad, eos, task.max_new_tokens),
    }, reps)
    med = {k: statistics.median(v) for k, v in times.items()}
    gens, forced = kept["gens"], kept["forced"]
    same = [i for i, g in enumerate(gens) if g.finish_reason == "eos"
            and np.array_equal(forced[i].token_ids, g.token_ids)]
    diff = max((abs(forced[i].raw_confidence - gens[i].raw_confidence) for i in same), default=float("nan"))
    row = [task.name, n, f"{mean_prompt_tokens(tokenizer, prompts):.0f}",
           f"{statistics.fmean(len(g.token_ids) for g in gens):.1f}",
           f"{n / med['generate']:.2f}", f"{n / med['force']:.2f}", f"{med['generate'] / med['force']:.2f}x",
           f"{med['force'] / med['bare forward']:.2f}", f"{med['generate'] / med['bare generate']:.2f}",
           ", ".join(f"{t:.2f}" for t in times["generate"]), ", ".join(f"{t:.2f}" for t in times["force"])]
    agreement = (f"{task.name}: {len(same)} of {n} answers ended with EOS and re-tokenized to the "
                 f"generated tokens; largest |raw confidence forced - generated| among them: {diff:.1e}.")
    return row, agreement, med["generate"] / med["force"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--scitldr", default="../shared/data/scitldr/test.jsonl", help="SciTLDR data file")
    ap.add_argument("--n", type=int, default=32, help="records per task (the first n examples)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    rows, notes, ratios = [], [], {}
    for task_name, data in (("default", None), ("scitldr", args.scitldr)):
        row, note, ratio = measure(model, tokenizer, task_name, data, args.n, args.batch_size, args.reps)
        rows.append(row)
        notes.append(note)
        ratios[task_name] = ratio
    table = markdown_table(["task", "records", "prompt tokens", "generated tokens / record",
                            "generate records/s", "teacher-forced records/s", "speed-up",
                            "forced / bare forward", "generate / bare generate",
                            "generate runs (s)", "forced runs (s)"], rows)
    verdict = (f"SciTLDR: teacher forcing is {ratios['scitldr']:.2f}x the records/s of generating "
               f"(target >= 3x: {'met' if ratios['scitldr'] >= 3 else 'NOT met'}).")
    write_report(args.out, "\n".join([
        "# Teacher-forced recording vs generating (`benchmarks/forced_throughput.py`)",
        "",
        f"    {command_line(Path(__file__).name, argv)}",
        "",
        f"Model `{args.model}` ({args.dtype}, CPU), batch {args.batch_size}, the first {args.n} "
        f"examples of each task (built-in questions; SciTLDR from `{args.scitldr}`), prompted as "
        "a collection prompts them. `generate` = `generate_and_record` (greedy, the task's "
        "max_new_tokens and stop strings, shared-prefix cache, finished rows dropped); `forced` = "
        "`record_responses` of the generated texts (re-tokenized, most likely EOS appended). "
        "The physical limits: `bare forward` = one forward pass of the model over the same "
        "prompt + answer + EOS sequences (no hooks, no pooling, no prefix cache; left-padded batches "
        "of similar length), `bare generate` = `model.generate` (greedy, no recorder) over the same "
        "prompts; the two ratio columns are the recording paths' times over those (target for "
        "teacher forcing <= 1.10; the forced path may beat a bare pass through its shared-prefix cache). "
        f"{args.reps} interleaved repetitions, medians. torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end, "
        f"{time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        table,
        "",
        verdict,
        "",
        *notes,
        "",
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Collection throughput by batch size and batching mode (a benchmark).

Runs :func:`acute.extraction.generate_and_record` -- what :func:`acute.collect.collect` runs on
each chunk of examples, without the labelling and the store writes -- on the first ``--n``
examples of ``--task`` (default: the built-in questions, ``acute/data/questions.jsonl``; other
tasks read ``--data``), prompted and generated as a collection does: the task's prompt (chat template when the tokenizer has one), its
``max_new_tokens`` and stop strings, greedy, stopping at the model's EOS. Each batch size runs in
each mode of :data:`MODES` (shuffled, length-sorted, shared-prefix cache). The runs are
interleaved in a rotating order and repeated ``--reps`` times; the table gives the median
records/s and the speed-up over batch 1. Target of the scale-out issue: batch 8 or 16 reaches at
least 3x the records/s of batch 1.

Usage (on an otherwise idle machine; the model is fetched once into ``$ACUTE_HOME``)::

    python benchmarks/batch_throughput.py --threads 2 --n 64 --reps 3
    python benchmarks/batch_throughput.py --threads 2 --n 64 --reps 3 \
        --task scitldr --data ../shared/data/scitldr/test.jsonl   # long generations

The report goes to ``benchmarks/batch_throughput.md`` (``batch_throughput-<task>.md`` for another
task) unless ``--out`` says otherwise.

``--model`` takes anything :func:`acute.load_model` does (card name, folder, GGUF file).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.extraction import generate_and_record  # noqa: E402
from acute.models import load_model  # noqa: E402
from acute.tasks import get_task  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "batch_throughput.md"


# ----------------------------------------------------------------- shared with gpu_collect.py


def task_prompts(tokenizer, n: int, task_name: str = "default", data: str | None = None):
    """``(prompts, task)``: the collection prompts of the first ``n`` examples of the task (read
    from ``data``, a file or folder, for tasks without built-in examples)."""
    task = get_task(task_name)
    try:
        examples = task.load(data, limit=n)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"task {task_name!r}: {err}") from None
    if len(examples) < n:
        raise SystemExit(f"task {task_name!r} has only {len(examples)} examples; use --n <= that")
    return [task.prompt(tokenizer, ex) for ex in examples], task


def timed(fn: Callable[[], object], sync: Callable[[], None] = lambda: None) -> float:
    """Wall seconds of one call of ``fn``; ``sync`` waits for queued device work first and last."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def interleaved_times(runs: dict[str, Callable[[], object]], reps: int,
                      sync: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Time every run ``reps`` times, rotating their order each repetition (drift is shared)."""
    keys = list(runs)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for rep in range(reps):
        shift = rep % len(keys)
        for key in keys[shift:] + keys[:shift]:
            times[key].append(timed(runs[key], sync))
    return times


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (creating its folder), print it and where it went."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {path}")
    return path


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """How ``benchmarks/<script>`` was invoked, for the report."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", f"benchmarks/{script}", *args])


# ------------------------------------------------------------------------------- this benchmark


#: Modes that run like another one at batch 1 (whose batch-1 run is their baseline).
BATCH1_SAME_AS = {"shuffled": "sorted", "prefix-keep": "prefix"}
#: How a run orders and batches the prompts: keyword arguments of generate_and_record.
MODES = {
    # input (shuffled) order, left padding: no bucketing at all
    "shuffled": {"sort_by_length": False, "reuse_prefix": False},
    # longest first, left padding: the plain path
    "sorted": {"sort_by_length": True, "reuse_prefix": False},
    # grouped by shared prefix, its KV cache reused, but every row runs until the batch's
    # longest answer ends (model.generate): the default before finished rows were dropped
    "prefix-keep": {"sort_by_length": True, "reuse_prefix": True, "drop_finished": False},
    # the default: shared-prefix cache, and each row leaves the batch when it has finished
    "prefix": {"sort_by_length": True, "reuse_prefix": True},
}


def collect_run(model, tokenizer, prompts: Sequence[str], task, batch_size: int, mode: str,
                tokens: list[int]) -> Callable[[], None]:
    """A callable that generates and records all prompts once in ``mode`` (see :data:`MODES`),
    appending the tokens it generated to ``tokens``."""
    def run() -> None:
        gens = generate_and_record(model, tokenizer, prompts, max_new_tokens=task.max_new_tokens,
                                   batch_size=batch_size, stop_strings=task.stop_strings,
                                   **MODES[mode])
        tokens.append(sum(len(g.token_ids) for g in gens if g is not None))

    return run


def configurations(batch_sizes: Sequence[int]) -> list[tuple[int, str]]:
    """``(batch size, mode)`` pairs; at batch 1 "shuffled" equals "sorted" (no padding) and
    "prefix-keep" equals "prefix" (no batch-mates to wait for), so it runs "sorted" and "prefix"
    only, which are the batch-1 baselines of the other two."""
    return [(bs, m) for bs in batch_sizes for m in MODES
            if not (bs == 1 and m in BATCH1_SAME_AS)]


def mean_prompt_tokens(tokenizer, prompts: Sequence[str]) -> float:
    """Mean prompt length in tokens (tokenized as ``generate_and_record`` does)."""
    ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return statistics.fmean(len(i) for i in ids)


def report(args, prompts, task, times, tokens, prompt_tokens: float, argv) -> str:
    n = len(prompts)
    med = {cfg: statistics.median(t) for cfg, t in times.items()}
    base = {m: med[(1, m)] for m in MODES if (1, m) in med}
    for mode, same in BATCH1_SAME_AS.items():
        base.setdefault(mode, base.get(same))
    plain1 = base.get("sorted")
    rows = []
    for (bs, mode), runs in times.items():
        rows.append([bs, mode, f"{n / med[(bs, mode)]:.2f}", f"{med[(bs, mode)]:.2f}",
                     ", ".join(f"{t:.2f}" for t in runs),
                     f"{base[mode] / med[(bs, mode)]:.2f}x" if base.get(mode) else "-",
                     f"{plain1 / med[(bs, mode)]:.2f}x" if plain1 else "-",
                     f"{statistics.median(tokens[(bs, mode)]) / n:.1f}"])
    table = markdown_table(["batch", "mode", "records/s (median)", "seconds (median)", "runs (s)",
                            "vs batch 1, same mode", "vs batch 1 sorted", "generated tokens / record"],
                           rows)
    verdicts = []
    for mode in ("prefix", "sorted"):
        gains = [base[mode] / med[(bs, mode)] for bs in (8, 16) if (bs, mode) in med and base.get(mode)]
        if gains:
            verdicts.append(f"{mode}: best of batch 8 / 16 = {max(gains):.2f}x the records/s of "
                            f"batch 1 (target >= 3x: {'met' if max(gains) >= 3 else 'NOT met'}).")
    return "\n".join([
        "# Collection throughput by batch size (`benchmarks/batch_throughput.py`)",
        "",
        f"    {command_line(Path(__file__).name, argv)}",
        "",
        f"Model `{args.model}` ({args.dtype}, CPU), task `{task.name}`: the first {n} examples"
        f"{f' of `{args.data}`' if args.data else ' (built-in questions)'} "
        f"(prompts of {prompt_tokens:.0f} tokens on average), max_new_tokens "
        f"{task.max_new_tokens}, stop strings "
        f"{list(task.stop_strings)}, greedy; `generate_and_record` over all {n} prompts per run, "
        f"{args.reps} interleaved repetitions. torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end, "
        f"{time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "Modes: `shuffled` = prompts in a random order, left-padded batches; `sorted` = longest "
        "first (the plain path, `reuse_prefix=False`); `prefix` = what collection does by default: "
        "prompts grouped by their shared prefix, which runs once per group and is reused from its "
        "KV cache (`reuse_prefix=True`), and each row leaves the batch once it has finished; "
        "`prefix-keep` = the same with every row kept until the batch's longest answer ends "
        "(`drop_finished=False`, `model.generate`). Every mode but `prefix-keep` drops finished "
        "rows.",
        "",
        table,
        "",
        *verdicts,
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--task", default="default", help="task name (default: built-in questions)")
    ap.add_argument("--data", default=None, help="the task's data file or folder")
    ap.add_argument("--n", type=int, default=64, help="number of examples (the first n)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffled prompt order")
    ap.add_argument("--out", default=None,
                    help="report path (default benchmarks/batch_throughput[-<task>].md)")
    args = ap.parse_args(argv)
    out = args.out or (DEFAULT_OUT if args.task == "default"
                       else DEFAULT_OUT.with_name(f"{DEFAULT_OUT.stem}-{args.task}.md"))
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    prompts, task = task_prompts(tokenizer, args.n, args.task, args.data)
    random.Random(args.seed).shuffle(prompts)  # the "shuffled" order; sorted runs re-sort
    collect_run(model, tokenizer, prompts[:2], task, 2, "prefix", [])()  # warm-up
    tokens: dict[tuple[int, str], list[int]] = {c: [] for c in configurations(args.batch_sizes)}
    runs = {cfg: collect_run(model, tokenizer, prompts, task, *cfg, tokens[cfg]) for cfg in tokens}
    times = interleaved_times(runs, args.reps)
    write_report(out, report(args, prompts, task, times, tokens,
                                  mean_prompt_tokens(tokenizer, prompts), argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

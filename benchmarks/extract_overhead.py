"""Overhead of recording pooled hidden states during generation (a benchmark, not a test).

Compares, in one process and on the same prompts, with exactly ``--new-tokens`` generated tokens
per row (``min_new_tokens`` forces it):

(a) plain ``model.generate`` (greedy, KV cache);
(b) ``model.generate`` inside :class:`acute.extraction.HiddenStateRecorder` (pooled means of all
    layers + raw token log-probs);
(c) ``model.generate(output_hidden_states=True, return_dict_in_generate=True)`` followed by
    pooling the returned per-step states over the decoding positions (the naive way).

Runs are interleaved (a, b, c, then rotated) and repeated; the medians of wall time and of the
peak resident-memory increase over the pre-call baseline (sampled every millisecond from
/proc/self/statm) are reported, with the ratios b/a and c/a. It also reports, for (b) at two
generation lengths, the bytes the recorder itself holds (running sums, masks and the current
log-softmax row; :meth:`HiddenStateRecorder.state_nbytes`, maximum over the steps) and the
peak-RSS increase, which must not grow with the number of generated tokens.

Usage::

    python benchmarks/extract_overhead.py --model smollm2-135m-instruct --reps 5

Needs the model (``acute.models.load_model``); the CPU figures are only meaningful on a machine
that is otherwise idle.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.extraction import HiddenStateRecorder, recorder  # noqa: E402
from acute.extraction.pooler import LayerPooler  # noqa: E402
from acute.models import format_prompt, load_model  # noqa: E402
from acute.models.prompts import eos_token_ids  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Who wrote the play Hamlet?",
    "What is the chemical symbol for gold?",
    "Which planet is known as the Red Planet?",
    "What is the boiling point of water in degrees Celsius?",
    "In which year did the Second World War end?",
    "What is the largest ocean on Earth?",
]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class PeakRSS:
    """Context manager sampling the resident set size in a thread; ``.delta`` = peak - start."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval

    def __enter__(self):
        self.start = _rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.delta = self.peak - self.start


def batch_inputs(tokenizer, size: int):
    prompts = [format_prompt(tokenizer, q) for q in QUESTIONS[:size]]
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt",
                    padding_side="left")
    return enc["input_ids"], enc["attention_mask"]


def gen_kwargs(tokenizer, eos, new_tokens):
    return dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                temperature=None, top_p=None, top_k=None, eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id)


def run_plain(model, ids, mask, kw):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
    assert out.shape[1] - ids.shape[1] == kw["max_new_tokens"]


def run_recorder(model, ids, mask, kw, eos, sizes=None):
    kw = {k: v for k, v in kw.items() if k != "eos_token_id"}
    extra = {}
    if sizes is not None:
        from transformers import LogitsProcessorList

        class Probe:
            def __call__(self, input_ids, scores):
                sizes.append(rec.state_nbytes())
                return scores

        extra["logits_processor"] = LogitsProcessorList([Probe()])
    with HiddenStateRecorder(model) as rec:
        batch = rec.generate(ids, mask, eos_token_ids=eos, **kw, **extra)
    assert batch.counts.tolist() == [kw["max_new_tokens"]] * ids.shape[0]
    return batch.layer_means


#: What "inside the recorder" times: the pooler's per-layer hook, the logits hook and the
#: stopping criterion (which also sets the pooler's weights for the next forward).
TIMED = ((LayerPooler, "_add"), (HiddenStateRecorder, "_logits_hook"),
         (recorder._RecorderStoppingCriteria, "__call__"))


def time_inside_recorder(model, ids, mask, kw, eos):
    """(seconds inside the recorder's hooks + stopping criterion, total seconds) of one run."""
    spent = [0.0]
    originals = [getattr(cls, name) for cls, name in TIMED]

    def stopwatch(fn):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        return timed

    kw = {k: v for k, v in kw.items() if k != "eos_token_id"}
    for (cls, name), fn in zip(TIMED, originals):  # before entering: the hooks bind them then
        setattr(cls, name, stopwatch(fn))
    try:
        t0 = time.perf_counter()
        with HiddenStateRecorder(model) as rec:
            rec.generate(ids, mask, eos_token_ids=eos, **kw)
        total = time.perf_counter() - t0
    finally:
        for (cls, name), fn in zip(TIMED, originals):
            setattr(cls, name, fn)
    return spent[0], total


def run_output_hidden_states(model, ids, mask, kw):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             return_dict_in_generate=True, **kw)
    # out.hidden_states: per step a tuple of L+1 tensors [B, S_step, d]; the decoding state of
    # step s is the last position of that step's forward.
    steps = [torch.stack([h[:, -1, :].float() for h in step], dim=1) for step in out.hidden_states]
    means = torch.stack(steps, dim=0).mean(0)  # [B, L+1, d]
    return means.numpy()


try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


def measure(fn, *args):
    """Return (wall seconds, process CPU seconds, peak RSS increase in bytes) of one call.

    Freed heap memory is handed back to the OS first (glibc ``malloc_trim``) so that the RSS
    increase reflects the call's own transient allocations rather than the allocator's cache.
    """
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    with PeakRSS() as mem:
        c0, t0 = time.process_time(), time.perf_counter()
        fn(*args)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, mem.delta


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--short-tokens", type=int, default=16,
                    help="second generation length for the recorder-memory comparison")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = load_model(args.model)
    eos = eos_token_ids(model, tokenizer)
    cfg = model.config
    print(f"model {args.model}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}")

    # correctness cross-check between (b) and (c) on the smallest batch
    ids, mask = batch_inputs(tokenizer, min(args.batch_sizes))
    kw = gen_kwargs(tokenizer, eos, 8)
    diff = np.abs(run_recorder(model, ids, mask, kw, eos) - run_output_hidden_states(model, ids, mask, kw)).max()
    print(f"max |recorder - output_hidden_states| pooled difference (8 tokens): {diff:.2e}")

    for bs in args.batch_sizes:
        ids, mask = batch_inputs(tokenizer, bs)
        kw = gen_kwargs(tokenizer, eos, args.new_tokens)
        fns = {
            "a": lambda: run_plain(model, ids, mask, kw),
            "b": lambda: run_recorder(model, ids, mask, kw, eos),
            "c": lambda: run_output_hidden_states(model, ids, mask, kw),
        }
        fns["a"]()  # warm-up
        times = {k: [] for k in fns}
        cpus = {k: [] for k in fns}
        mems = {k: [] for k in fns}
        order = list(fns)
        for rep in range(args.reps):
            for k in order[rep % 3:] + order[: rep % 3]:
                wall, cpu, mem = measure(fns[k])
                times[k].append(wall)
                cpus[k].append(cpu)
                mems[k].append(mem)
        med_t = {k: statistics.median(v) for k, v in times.items()}
        med_c = {k: statistics.median(v) for k, v in cpus.items()}
        med_m = {k: statistics.median(v) for k, v in mems.items()}
        print(f"\nbatch {bs}, {args.new_tokens} new tokens, {args.reps} reps (median):")
        for k, name in (("a", "plain generate"), ("b", "generate + recorder"),
                        ("c", "output_hidden_states + pooling")):
            print(f"  ({k}) {name:32s} wall {med_t[k]:7.3f} s  cpu {med_c[k]:7.3f} s  "
                  f"peak RSS +{med_m[k] / 2**20:7.1f} MiB   wall runs: "
                  f"{', '.join(f'{t:.2f}' for t in times[k])}")
        inside = [time_inside_recorder(model, ids, mask, kw, eos) for _ in range(args.reps)]
        frac = statistics.median(a / b for a, b in inside)
        print(f"  time inside the recorder's hooks + stopping criterion: median {frac:.2%} of the "
              f"(b) run ({statistics.median(a for a, _ in inside) * 1e3 / args.new_tokens:.2f} ms per step)")
        print(f"  wall ratio b/a = {med_t['b'] / med_t['a']:.3f}   c/a = {med_t['c'] / med_t['a']:.3f}"
              f"   |  cpu ratio b/a = {med_c['b'] / med_c['a']:.3f}   c/a = {med_c['c'] / med_c['a']:.3f}")

    print("\nrecorder memory vs number of generated tokens (largest batch):")
    bs = max(args.batch_sizes)
    ids, mask = batch_inputs(tokenizer, bs)
    for n in (args.short_tokens, args.new_tokens):
        kw = gen_kwargs(tokenizer, eos, n)
        sizes: list[int] = []
        run_recorder(model, ids, mask, kw, eos, sizes=sizes)
        rss_b = statistics.median(measure(run_recorder, model, ids, mask, kw, eos)[2] for _ in range(3))
        rss_a = statistics.median(measure(run_plain, model, ids, mask, kw)[2] for _ in range(3))
        buffers = ids.shape[0] * (n + 1) * (8 + 4)  # the output token ids + log-probs
        print(f"  {n:3d} tokens: recorder state {max(sizes) / 2**10:8.1f} KiB (max over steps; "
              f"{(max(sizes) - buffers) / 2**10:.1f} KiB without the output token/log-prob buffers); "
              f"peak RSS +{rss_b / 2**20:.1f} MiB with recorder vs +{rss_a / 2**20:.1f} MiB plain")


if __name__ == "__main__":
    main()

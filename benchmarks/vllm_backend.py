"""Records/s and tokens/s of four ways to generate acute's records (issue 44, item 5):

* ``transformers``: acute's recorder (:func:`acute.extraction.generate_and_record`);
* ``vllm-plain``: vLLM alone, no states;
* ``vllm-acute``: vLLM with acute's pooling connector (what ``--engine vllm`` runs), the
  records read back and checked against the recorder's;
* ``vllm-stock``: vLLM with its own connector (every token of every layer written; made to run
  on a CPU, :mod:`acute.engines.vllm_stock`).

Greedy, float32, the task's prompts and stop strings, one engine per row (its load time
reported apart); each vLLM row runs the prompts once to warm up and then ``--repeats`` times.
vLLM needs its own environment (``ACUTE_VLLM_PYTHON`` or ``python -m acute.engines.venv``).

    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind python benchmarks/vllm_backend.py --limit 32
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _prompts(tok, task_name: str, limit: int):
    from acute.tasks import get_task

    task = get_task(task_name)
    examples = task.load()[:limit]
    return task, [task.prompt(tok, ex) for ex in examples]


def _row(name, seconds, records, tokens, **extra):
    return {"engine": name, "seconds": round(seconds, 2), "records_per_s": round(records / seconds, 3),
            "tokens_per_s": round(tokens / seconds, 2), "records": records, "tokens": tokens, **extra}


def run_transformers(model, tok, prompts, stop, max_new_tokens, batch_size, repeats):
    from acute.extraction import generate_and_record

    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        gens = generate_and_record(model, tok, prompts, max_new_tokens=max_new_tokens, stop_strings=stop,
                                   batch_size=batch_size)
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    tokens = sum(len(g.token_ids) for g in gens)
    return gens, _row("transformers (acute recorder)", best, len(prompts), tokens)


def run_vllm(mode, model, tok, prompts, stop, max_new_tokens, repeats, python, reference=None):
    from acute.engines.vllm import VllmEngine, model_folder
    from acute.extraction.batching import resolve_eos, tokenize
    from acute.store.generation import GenerationSettings

    ids = tokenize(tok, prompts)
    eos = resolve_eos(model, tok)
    settings = GenerationSettings(max_new_tokens=max_new_tokens, stop_strings=stop)
    with VllmEngine(model_folder(model), mode=mode, python=python, max_model_len=2048,
                    max_num_seqs=64) as engine:
        load = engine.info.get("load_seconds")

        def once():
            if mode == "acute":
                return engine.generate(tok, prompts, settings, eos_token_ids=eos, model=model)
            return engine.generate_ids(ids, settings, eos_token_ids=eos)

        once()  # warm-up (and the prefix cache: every row below reads the prompts from it)
        before = engine.stats()
        best = None
        for _ in range(repeats):
            start = time.perf_counter()
            out = once()
            seconds = time.perf_counter() - start
            best = seconds if best is None else min(best, seconds)
        after = engine.stats()
    n_written = max(1, after["requests_written"] - before["requests_written"])
    bytes_per_request = (after["bytes_written"] - before["bytes_written"]) / n_written
    if mode == "acute":
        tokens = sum(len(g.token_ids) for g in out)
    else:
        tokens = sum(len(r["token_ids"]) for r in out)
    extra = {"load_seconds": round(load, 1), "bytes_per_request": int(bytes_per_request)}
    if mode == "acute" and reference is not None:
        same = [g.token_ids.tolist() == r.token_ids.tolist() for g, r in zip(out, reference)]
        worst = max(float(np.abs(g.layer_means - r.layer_means).max() / np.abs(r.layer_means).max())
                    for g, r, s in zip(out, reference, same) if s)
        extra.update(same_tokens=f"{sum(same)}/{len(same)}", worst_relative_mean_difference=f"{worst:.1e}")
    return _row(f"vllm-{mode}", best, len(prompts), tokens, **extra)


def main(argv=None) -> int:
    import acute

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--task", default="default")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's")
    parser.add_argument("--batch-size", type=int, default=8, help="the recorder's batch size")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--vllm-python", default=None)
    parser.add_argument("--modes", default="transformers,plain,acute,stock")
    parser.add_argument("--stop", action=argparse.BooleanOptionalAction, default=True,
                        help="the task's stop strings (--no-stop: answers run to EOS or --max-new-tokens)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)

    model, tok = acute.load_model(args.model)
    task, prompts = _prompts(tok, args.task, args.limit)
    stop = tuple(getattr(task, "stop_strings", ()) or ()) if args.stop else ()
    max_new_tokens = args.max_new_tokens or task.max_new_tokens
    modes = args.modes.split(",")
    rows, reference = [], None
    if "transformers" in modes:
        reference, row = run_transformers(model, tok, prompts, stop, max_new_tokens, args.batch_size, args.repeats)
        rows.append(row)
        print(json.dumps(row), flush=True)
    for mode in ("plain", "acute", "stock"):
        if mode in modes:
            rows.append(run_vllm(mode, model, tok, prompts, stop, max_new_tokens, args.repeats,
                                 args.vllm_python, reference))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "task": args.task, "prompts": len(prompts), "stop": list(stop),
                       "max_new_tokens": max_new_tokens, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

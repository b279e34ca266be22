#!/usr/bin/env python
"""Throughput and latency of ``acute serve`` under concurrent clients (a benchmark).

Starts ``python -m acute serve`` (SmolLM2-135M-Instruct via :func:`acute.load_model`, the shipped
probe, default batching: ``--max-batch 16 --max-wait-ms 10``) on a free loopback port, then for
each concurrency level (default 1, 8 and 32 clients) sends the same ``--requests`` short
built-in questions (``acute/data/questions.jsonl``) to ``POST /v1/score`` with
``max_new_tokens=--max-new-tokens``; each client sends its next request when the previous one is
answered (one client = sequential requests). Reported per level: requests/s (requests / wall
time from the first send to the last answer), client-side p50 / p95 latency, failed and lost
requests, and the batch sizes the server formed (from ``/healthz``). Target of the serving
issue: 32 clients reach at least 3x the requests/s of one sequential client, with no request
lost or failed. Bounded: ``--requests`` per level and ``--time-limit`` seconds per level (clients
send nothing new after it).

Usage (the model is fetched once into ``$ACUTE_HOME``; loopback only)::

    python benchmarks/serve_load.py --requests 48 --max-new-tokens 16 --threads 2

The report goes to ``benchmarks/serve_load.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import command_line, markdown_table, write_report  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "serve_load.md"
QUESTIONS = ROOT / "acute" / "data" / "questions.jsonl"


def questions(n: int) -> list[str]:
    """The first ``n`` built-in questions."""
    with open(QUESTIONS, encoding="utf-8") as f:
        out = [json.loads(line)["question"] for line in f if line.strip()]
    if len(out) < n:
        raise SystemExit(f"only {len(out)} built-in questions; use --requests <= that")
    return out[:n]


def launch_server(serve_args: Sequence[str], threads: int, stderr=None, extra_env: dict | None = None,
                  timeout: float = 600) -> tuple[subprocess.Popen, str]:
    """``python -m acute serve --port 0 SERVE_ARGS`` on a free loopback port (no API key, one
    process of ``threads`` threads, stderr to ``stderr``): the process and its base URL once it
    says it is serving; SystemExit when it exits or stays silent for ``timeout`` seconds."""
    cmd = [sys.executable, "-m", "acute", "serve", "--port", "0", *serve_args]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT), **(extra_env or {})}
    env.pop("ACUTE_API_KEY", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=ROOT)
    deadline = time.monotonic() + timeout
    line = ""
    while "serving" not in line:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start ({' '.join(cmd)})")
        line = proc.stdout.readline()
    return proc, line.split(" at ")[1].split("/v1")[0]


def start_server(args) -> tuple[subprocess.Popen, str]:
    """The server this benchmark loads: ``args.model`` (and ``args.probe``) with its batching settings."""
    serve_args = ["--model", args.model, "--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms),
                  "--max-queue", "1024", *(["--probe", args.probe] if args.probe else [])]
    return launch_server(serve_args, args.threads)


def run_level(url: str, prompts: Sequence[str], clients: int, max_new_tokens: int,
              time_limit: float) -> dict:
    """Send ``prompts`` from ``clients`` concurrent clients; timings, failures and batch sizes."""
    before = httpx.get(url + "/healthz", timeout=60).json()["batches"]
    lock = threading.Lock()
    todo = list(enumerate(prompts))
    latencies: dict[int, float] = {}
    failures: list[str] = []
    t0 = time.perf_counter()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=900) as http:
            while True:
                with lock:
                    if not todo or time.perf_counter() - t0 > time_limit:
                        return
                    i, prompt = todo.pop(0)
                start = time.perf_counter()
                try:
                    r = http.post("/v1/score", json={"prompt": prompt, "risk": 0.5,
                                                     "max_new_tokens": max_new_tokens})
                    ok = r.status_code == 200 and "confidence" in r.json()
                    problem = None if ok else f"{i}: HTTP {r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    problem = f"{i}: {type(e).__name__}: {e}"
                with lock:
                    if problem:
                        failures.append(problem)
                    else:
                        latencies[i] = time.perf_counter() - start

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = httpx.get(url + "/healthz", timeout=60).json()["batches"]
    sizes = {int(k): v - before["sizes"].get(k, 0) for k, v in after["sizes"].items()
             if v - before["sizes"].get(k, 0) > 0}
    lat = sorted(latencies.values())
    return {"clients": clients, "sent": len(prompts) - len(todo), "ok": len(lat),
            "failed": len(failures), "lost": len(prompts) - len(todo) - len(lat) - len(failures),
            "unsent": len(todo), "wall_s": wall, "rps": len(lat) / wall,
            "p50_s": statistics.median(lat) if lat else float("nan"),
            "p95_s": lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))] if lat else float("nan"),
            "batches": after["batches"] - before["batches"], "sizes": dict(sorted(sizes.items())),
            "failures": failures[:5]}


def report(args, argv, results: list[dict], torch_version: str, load: tuple) -> str:
    rows = [[r["clients"], f"{r['ok']}/{r['sent']}", r["failed"], r["lost"], f"{r['wall_s']:.1f}",
             f"{r['rps']:.2f}", f"{r['p50_s']:.2f}", f"{r['p95_s']:.2f}", r["batches"],
             ", ".join(f"{k}x{v}" for k, v in r["sizes"].items())] for r in results]
    table = markdown_table(["clients", "answered", "failed", "lost", "wall (s)", "requests/s",
                            "p50 latency (s)", "p95 latency (s)", "batches", "batch sizes (size x count)"],
                           rows)
    by = {r["clients"]: r for r in results}
    lines = [
        "# `acute serve` under concurrent clients (`benchmarks/serve_load.py`)", "",
        "    " + command_line("serve_load.py", argv), "",
        f"Server: `python -m acute serve --model {args.model}` (shipped probe "
        f"`{args.probe or 'models/smollm2-135m-instruct/probe'}`, float32, CPU, "
        f"`--max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms}`) on loopback; "
        f"each level sends the first {args.requests} built-in questions to `POST /v1/score` "
        f"(`max_new_tokens` {args.max_new_tokens}, the probe's few-shot task prompt, stop at a "
        "newline); each client sends its next request when the previous one is answered. "
        f"torch {torch_version}, {args.threads} threads (OMP_NUM_THREADS of the server), "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.2f} before and "
        f"{load[1]:.2f} after, {time.strftime('%Y-%m-%d %H:%M')}.", "",
        table, "",
    ]
    if 1 in by and by[1]["rps"] > 0:
        for c in sorted(by):
            if c != 1:
                ratio = by[c]["rps"] / by[1]["rps"]
                verdict = f" (target >= 3x: {'met' if ratio >= 3 else 'NOT met'})" if c == max(by) else ""
                lines.append(f"{c} clients: {ratio:.2f}x the requests/s of one sequential client{verdict}.")
    bad = sum(r["failed"] + r["lost"] for r in results)
    unsent = sum(r["unsent"] for r in results)
    lines += ["", f"Requests failed or lost: {bad}" + (f"; not sent (time limit): {unsent}" if unsent else "")
              + ".", ""]
    for r in results:
        lines += [f"failures at {r['clients']} clients: {f}" for f in r["failures"]]
    lines += ["Raw results:", "", "```", json.dumps(results, indent=1), "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--probe", default=None, help="default: the shipped probe")
    p.add_argument("--clients", default="1,8,32", help="comma-separated concurrency levels")
    p.add_argument("--requests", type=int, default=48, help="requests per level")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--max-wait-ms", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=2, help="torch threads of the server")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds per level")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    levels = [int(c) for c in args.clients.split(",")]
    prompts = questions(args.requests)
    print(f"results go to {args.out}", flush=True)
    import torch

    load_before = os.getloadavg()[0]
    proc, url = start_server(args)
    results = []
    try:
        httpx.post(url + "/v1/score", json={"prompt": "What is 2+2?", "risk": 0.5,
                                            "max_new_tokens": args.max_new_tokens}, timeout=900)
        for clients in levels:
            r = run_level(url, prompts, clients, args.max_new_tokens, args.time_limit)
            print(json.dumps({k: v for k, v in r.items() if k != "failures"}), flush=True)
            results.append(r)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    print(f"server exited with {code}")
    write_report(args.out, report(args, argv, results, torch.__version__, (load_before, os.getloadavg()[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

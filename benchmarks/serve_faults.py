#!/usr/bin/env python
"""Good clients of ``acute serve`` while hostile clients attack it (a benchmark, issue 32).

Builds a tiny random Llama (``acute.testing.save_tiny_model``, no download) and a probe fitted on
its own activations, starts ``python -m acute serve`` with its default limits on a free loopback
port, and runs three phases of ``--good-clients`` concurrent good clients, each sending
``--requests`` built-in questions to ``POST /v1/score`` one after another:

* ``quiet``: the good clients alone;
* ``hostile``: the same, while hostile clients run until the good clients are done:
  malformed bodies (broken JSON, NaN, 5000-deep nesting, wrong types, ``text/plain``, a foreign
  ``Host``), lone surrogates, oversized token requests (the issue's 16 items asking for 200-215
  new tokens, ``max_tokens`` 4096), slow headers (connections that never finish their head,
  reopened when the server closes them) and disconnects (16 items at the token limit, each of
  its own generation group, abandoned a moment after sending);
* ``quiet again``: the good clients alone, after the attack.

Reported per phase: the good clients' answered / failed / lost requests and their p50 / p95
latency; the ratio of the hostile to the quiet p95 (target of the issue: at most 2x, with no good
request lost); what the hostile clients got back; the server's batch counters (``stopped``: jobs
abandoned mid-generation). Bounded: ``--requests`` per good client and ``--time-limit`` seconds
per phase; hostile clients pause between attempts (``--hostile-pause``); loopback only.

Usage::

    python benchmarks/serve_faults.py --good-clients 4 --requests 100

The report goes to ``benchmarks/serve_faults.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from acute.estimators.inputs import Inputs  # noqa: E402 (after the path: this checkout's acute)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import command_line, markdown_table, write_report  # noqa: E402
from serve_load import launch_server, questions  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "serve_faults.md"


# ------------------------------------------------------------------ the model, the probe, the server
def build_model(folder: Path, max_new_tokens: int, hidden: int, layers: int) -> tuple[Path, Path]:
    """A tiny random Llama (``hidden`` x ``layers``, 1024 positions) and a probe fitted on its
    activations for 40 prompts (hash labels), trained with ``max_new_tokens``."""
    from dataclasses import replace

    import numpy as np

    import acute
    from acute.extraction import generate_and_record
    from acute.estimators import ActivationProbe
    from acute.testing import save_tiny_model

    model_dir = save_tiny_model(folder / "model", hidden_size=hidden, intermediate_size=2 * hidden,
                                num_hidden_layers=layers, max_position_embeddings=1024)
    model, tok = acute.load_model(str(model_dir))
    prompts = [f"Question: what is {i} times {i + 3}?" + " Be brief." * (i % 3) for i in range(40)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=max_new_tokens)
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    y = np.array([hashlib.sha256(p.encode()).digest()[0] % 2 for p in prompts])
    probe = ActivationProbe(view="cosine", n_estimators=10).fit(Inputs.of(X, raw), y)
    generation = {"max_new_tokens": max_new_tokens, "stop_strings": [], "pool": "decoding", "chat": False}
    probe.save(folder / "probe", identity=replace(acute.ModelIdentity.from_model(model), model="tiny"),
               training_summary={"generation": generation, "task": None})
    return model_dir, folder / "probe"


def start_server(model_dir: Path, probe_dir: Path, threads: int, log) -> tuple[subprocess.Popen, str]:
    """``python -m acute serve`` (default limits) on a free loopback port, its log (stderr) to the
    file ``log``: the process and its URL."""
    return launch_server(["--model", str(model_dir), "--probe", str(probe_dir)], threads, stderr=log,
                         extra_env={"HF_HUB_OFFLINE": "1"}, timeout=300)


# ------------------------------------------------------------------ good clients
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_good(url: str, prompts: Sequence[str], clients: int, time_limit: float) -> dict:
    """Each of ``clients`` clients sends every prompt in turn (its next when the previous one is
    answered); latencies of the answered ones, failures and lost requests."""
    before = httpx.get(url + "/healthz", timeout=60).json()["batches"]["sizes"]
    lock = threading.Lock()
    latencies: list[float] = []
    failures: list[str] = []
    sent = [0]
    t0 = time.perf_counter()

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            for i, prompt in enumerate(prompts):
                if time.perf_counter() - t0 > time_limit:
                    return
                with lock:
                    sent[0] += 1
                start = time.perf_counter()
                try:
                    r = http.post("/v1/score", json={"prompt": prompt, "risk": 0.5})
                    problem = None if r.status_code == 200 and "confidence" in r.json() else \
                        f"client {k} #{i}: HTTP {r.status_code} {r.text[:160]}"
                except httpx.HTTPError as e:
                    problem = f"client {k} #{i}: {type(e).__name__}: {e}"
                with lock:
                    (failures.append(problem) if problem else latencies.append(time.perf_counter() - start))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = httpx.get(url + "/healthz", timeout=60).json()["batches"]["sizes"]
    sizes = {int(k): v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    return {"sent": sent[0], "ok": len(latencies), "failed": len(failures),
            "lost": sent[0] - len(latencies) - len(failures), "wall_s": round(wall, 2),
            "p50_s": percentile(latencies, 0.5), "p95_s": percentile(latencies, 0.95),
            "max_s": max(latencies, default=float("nan")), "sizes": dict(sorted(sizes.items())),
            "failures": failures[:5]}


# ------------------------------------------------------------------ hostile clients
def _json_post(path: str, body: bytes, content_type: str = "application/json", host: str = "127.0.0.1") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


MALFORMED = [
    _json_post("/v1/score", b'{"prompt": "Gold is", "risk": '),
    _json_post("/v1/score", b'{"prompt": "Gold is", "risk": NaN}'),
    _json_post("/v1/score", b"[" * 5000),
    _json_post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "Hi"}], "tool_choice": '
               + b"[" * 900 + b"]" * 900 + b"}"),
    _json_post("/v1/score", b'{"prompt": 42, "risk": "high"}'),
    _json_post("/v1/score", b'{"prompt": "Gold is", "risk": 0.5}', content_type="text/plain"),
    _json_post("/v1/models", b"", host="evil.example"),
    _json_post("/v1/score", b'\xff\xfe{"prompt"'),
]
SURROGATES = [
    _json_post("/v1/score", json.dumps({"prompt": "Gold \ud800 is", "risk": 0.5}).encode()),
    _json_post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi \udfff"}]}).encode()),
    _json_post("/v1/score", json.dumps([{"prompt": "Gold is", "risk": 0.5}] * 3
                                       + [{"prompt": "\ud83d", "risk": 0.5}]).encode()),
]
OVERSIZED = [
    _json_post("/v1/score", json.dumps([{"prompt": f"Tell me a story {i}.", "risk": 0.5, "max_new_tokens": 200 + i}
                                        for i in range(16)]).encode()),
    _json_post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Tell me a story."}],
                                                   "max_tokens": 4096}).encode()),
    _json_post("/v1/score", json.dumps([{"prompt": "Gold is", "risk": 0.5}] * 17).encode()),
]


def _exchange(port: int, payload: bytes, timeout: float = 30.0) -> str:
    """Send ``payload`` on a fresh connection; the status code of the answer ("closed" if none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n" not in head and (chunk := s.recv(4096)):
                head += chunk
    return head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "closed"


def _cycle(payloads: Sequence[bytes]) -> Callable[[int, int], str]:
    return lambda port, i: _exchange(port, payloads[i % len(payloads)])


def disconnect(limit: int) -> Callable[[int, int], str]:
    """16 items at the token limit (16 generation groups), abandoned 0.2 s after sending."""
    body = json.dumps([{"prompt": f"Tell me a long story, part {i}.", "risk": 0.5, "max_new_tokens": limit - i}
                       for i in range(16)]).encode()
    payload = _json_post("/v1/score", body)

    def attack(port: int, i: int) -> str:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(payload)
            time.sleep(0.2)
        return "left"
    return attack


class SlowHeaders:
    """Keeps ``n`` connections whose request head never ends (a byte every second); one the
    server closes is counted and reopened."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, port: int, stop: threading.Event, counts: collections.Counter) -> None:
        socks: list[socket.socket] = []
        try:
            while not stop.is_set():
                while len(socks) < self.n:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    s.setblocking(False)
                    socks.append(s)
                    counts["opened"] += 1
                stop.wait(1.0)
                for s in list(socks):
                    try:
                        s.send(b"a")
                        if s.recv(4096) == b"":
                            raise ConnectionResetError
                        counts["answered 408, closed"] += 1
                    except BlockingIOError:
                        continue  # still open, nothing to read
                    except OSError:
                        counts["closed by the server"] += 1
                    socks.remove(s)
                    s.close()
        finally:
            for s in socks:
                s.close()


def run_hostile(port: int, attackers: dict, slow: SlowHeaders, stop: threading.Event, pause: float,
                max_attempts: int) -> tuple[list[threading.Thread], dict]:
    """Start one thread per attacker (each at most ``max_attempts`` attempts, ``pause`` s apart,
    until ``stop``) and the slow-header thread; returns them and their outcome counters."""
    counts = {name: collections.Counter() for name in [*attackers, "slow headers"]}

    def loop(name: str, attack: Callable[[int, int], str]) -> None:
        for i in range(max_attempts):
            if stop.is_set():
                return
            try:
                counts[name][attack(port, i)] += 1
            except OSError as e:
                counts[name][type(e).__name__] += 1
            stop.wait(pause)

    threads = [threading.Thread(target=loop, args=(n, a), daemon=True) for n, a in attackers.items()]
    threads.append(threading.Thread(target=slow, args=(port, stop, counts["slow headers"]), daemon=True))
    for t in threads:
        t.start()
    return threads, counts


# ------------------------------------------------------------------ the report
def report(args, argv, phases: dict, hostile: dict, stats: dict, load: tuple, torch_version: str) -> str:
    rows = [[name, f"{r['ok']}/{r['sent']}", r["failed"], r["lost"], f"{r['wall_s']:.1f}",
             f"{r['p50_s'] * 1000:.0f}", f"{r['p95_s'] * 1000:.0f}", f"{r['max_s'] * 1000:.0f}",
             ", ".join(f"{k}x{v}" for k, v in r["sizes"].items())]
            for name, r in phases.items()]
    table = markdown_table(["phase", "good answered", "failed", "lost", "wall (s)", "p50 (ms)",
                            "p95 (ms)", "max (ms)", "batches run (size x count, all clients)"], rows)
    attack_rows = [[name, sum(c.values()), ", ".join(f"{k}: {v}" for k, v in sorted(c.items()))]
                   for name, c in hostile.items()]
    ratio = phases["hostile"]["p95_s"] / phases["quiet"]["p95_s"]
    lost = sum(r["failed"] + r["lost"] for r in phases.values())
    verdict = "met" if ratio <= 2 and lost == 0 else "NOT met"
    lines = [
        "# Good clients of `acute serve` under hostile clients (`benchmarks/serve_faults.py`)", "",
        "    " + command_line("serve_faults.py", argv), "",
        f"Server: `python -m acute serve` with its default limits, a tiny random Llama (hidden "
        f"{args.hidden}, {args.layers} layers, {args.threads} torch thread(s)) and a probe trained "
        f"with {args.max_new_tokens} new tokens (so the token limit is {4 * args.max_new_tokens}); "
        f"{args.good_clients} good clients x {args.requests} built-in questions per phase, "
        f"each sending its next request when the previous one is answered. Hostile clients pause "
        f"{args.hostile_pause} s between attempts; {args.slow} slow-header connections are kept open. "
        f"torch {torch_version}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} before and {load[1]:.2f} after, {time.strftime('%Y-%m-%d %H:%M')}.", "",
        table, "",
        f"Hostile p95 / quiet p95: **{ratio:.2f}x**; good requests failed or lost: **{lost}** "
        f"(target: at most 2x and none lost: {verdict}).", "",
        "What the hostile clients got (HTTP status, or what happened to the connection):", "",
        markdown_table(["attack", "attempts", "outcomes"], attack_rows), "",
        f"Server batch counters after the run, and its log (stderr, all phases): `{json.dumps(stats)}`", "",
    ]
    for name, r in phases.items():
        lines += [f"failure ({name}): {f}" for f in r["failures"]]
    lines += ["Raw results:", "", "```", json.dumps({"phases": phases, "hostile": hostile}, indent=1), "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--good-clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=100, help="questions per good client and phase")
    p.add_argument("--max-new-tokens", type=int, default=16, help="the probe's training setting")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    p.add_argument("--slow", type=int, default=100, help="slow-header connections held open")
    p.add_argument("--hostile-pause", type=float, default=0.2, help="seconds between a hostile client's attempts")
    p.add_argument("--time-limit", type=float, default=300.0, help="seconds per phase")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    prompts = questions(args.requests)
    import torch

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, probe_dir = build_model(Path(tmp), args.max_new_tokens, args.hidden, args.layers)
        log = open(Path(tmp) / "server.log", "w+", encoding="utf-8")
        proc, url = start_server(model_dir, probe_dir, args.threads, log)
        port = int(url.rsplit(":", 1)[1])
        try:
            httpx.post(url + "/v1/score", json={"prompt": "What is 2+2?", "risk": 0.5}, timeout=120)
            phases = {"quiet": run_good(url, prompts, args.good_clients, args.time_limit)}
            print("quiet", json.dumps(phases["quiet"]), flush=True)
            attackers = {"malformed bodies": _cycle(MALFORMED), "lone surrogates": _cycle(SURROGATES),
                         "oversized token requests": _cycle(OVERSIZED),
                         "disconnects": disconnect(4 * args.max_new_tokens)}
            stop = threading.Event()
            threads, hostile = run_hostile(port, attackers, SlowHeaders(args.slow), stop,
                                           args.hostile_pause, max_attempts=100_000)
            time.sleep(1.0)  # the slow connections are open before the good clients start
            phases["hostile"] = run_good(url, prompts, args.good_clients, args.time_limit)
            stop.set()
            for t in threads:
                t.join(60)
            print("hostile", json.dumps(phases["hostile"]), flush=True)
            time.sleep(1.0)
            phases["quiet again"] = run_good(url, prompts, args.good_clients, args.time_limit)
            print("quiet again", json.dumps(phases["quiet again"]), flush=True)
            stats = httpx.get(url + "/healthz", timeout=60).json()["batches"]
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(120)
            log.seek(0)
            lines = [line for line in log.read().splitlines() if line.strip() and "Loading weights" not in line]
            log.close()
    print(f"server exited with {code}")
    stats["server log lines"] = len(lines)
    stats["tracebacks in the log"] = sum(line.startswith("Traceback") for line in lines)
    stats["first log lines"] = lines[:5]
    hostile = {name: dict(c) for name, c in hostile.items()}
    write_report(args.out, report(args, argv, phases, hostile, stats, (load_before, os.getloadavg()[0]),
                                  torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())

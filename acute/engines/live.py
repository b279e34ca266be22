"""Stopping early on vLLM: the stop rule read at live checkpoints.

acute's pooling connector (:mod:`acute.engines.vllm_connector`) writes, while a request runs,
one file per checkpoint ``k`` of a schedule the request asks for (its layer means over the first
``k`` pooled positions, ``<name>.k<k>.safetensors``), and only when its ``k``-th token was not its
last: the checkpoints at which acute's transformers recorder asks its ``on_checkpoint`` callback.
:class:`LiveStops` reads them for one generation call: the engine (:class:`~acute.engines.vllm.VllmEngine`
stepping vLLM in its worker, :class:`~acute.engines.upstream.UpstreamEngine` streaming from a vLLM
server) hands it each written checkpoint with the row's first ``k`` token log-probs, the callback
(:class:`acute.scoring.stop_early.StopDecisions`) decides, and a row it stops is aborted in
vLLM. Its answer is its first ``k`` tokens, recorded from that checkpoint's file (mean, last
answer and last prompt states, and the earlier checkpoints), with the finish reason ``"stopped"``,
as the recorder gives it. vLLM may have generated a token or two past ``k`` before the abort
arrives; they are dropped, and the decisions are those the recorder takes on the same states.

:func:`stop_early_refusal` says why an engine cannot stop early (None when it can): a connector
from before live checkpoints writes none, and is refused rather than waited for.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import EngineError
from ..store.checkpoints import Schedule, checkpoint_counts

__all__ = ["LIVE_CHECKPOINTS_KEY", "LiveStops", "live_checkpoint_path", "live_counts", "stop_early_refusal",
           "stream_live"]


def live_checkpoint_path(path: str, k: int) -> str:
    """The live checkpoint ``k``'s file beside a request's pooled file ``path``
    (:func:`acute.engines.vllm_connector.live_checkpoint_path`, which imports vLLM)."""
    stem = path[:-len(".safetensors")] if path.endswith(".safetensors") else path
    return f"{stem}.k{int(k)}.safetensors"


def stop_early_refusal(engine: Any) -> str | None:
    """Why ``engine`` cannot stop generations early, for people (None when it can: transformers,
    or a vLLM engine whose connector writes live checkpoints)."""
    if engine is None or isinstance(engine, str) and engine == "transformers":
        return None
    if getattr(engine, "live_checkpoints", False):
        return None
    return ("stopping early on vLLM needs acute's pooling connector with live checkpoints, and this "
            "vLLM's connector writes none (an older acute on the vLLM server's PYTHONPATH?): start vLLM "
            "with this acute's connector (`acute vllm-args` prints the command), or serve with "
            "acute's transformers recorder (no --engine vllm / --upstream)")


class LiveStops:
    """The live-checkpoint side of one generation call (see the module docstring).

    ``keep``: the prompt index of each request (the engine's rows), ``schedule``: the checkpoints (the stop model's,
    :meth:`acute.scoring.Scorer._stop_settings`), ``on_checkpoint``: the recorder's callback
    ``(k, prompt indices, means [b, L+1, d], prefix confidences [b]) -> stop [b]``, ``read``:
    :func:`acute.engines.pooled.read_pooled` (reads and removes a pooled file).
    """

    def __init__(self, keep: Sequence[int], schedule: Schedule, on_checkpoint: Callable, read: Callable):
        self.keep = list(keep)
        self.read_pooled = read
        self.schedule = schedule
        self.on_checkpoint = on_checkpoint
        self.read: dict[int, dict[int, dict]] = {}  # row -> {k: pooled states of its live file}

    @property
    def live(self) -> dict:
        """The schedule's JSON, as a request asks the connector for it."""
        return self.schedule.to_json()

    def __call__(self, k: int, rows: Sequence[int], paths: Sequence[str], logprobs: Sequence[Sequence[float]]) -> list[int]:
        """The rows (of ``rows``) to stop at checkpoint ``k``, from their live files ``paths``
        (read and removed) and their first ``k`` token log-probs."""
        pooled = [self.read_pooled(p, f"prompts[{self.keep[j]}]", int(k)) for j, p in zip(rows, paths)]
        for j, p in zip(rows, pooled):
            self.read.setdefault(int(j), {})[int(k)] = p
        means = np.stack([p["layer_means"] for p in pooled])
        confidence = np.array([np.exp(np.sum(np.asarray(lp, dtype=np.float64)[:k])) for lp in logprobs])
        stop = np.asarray(self.on_checkpoint(int(k), np.asarray([self.keep[j] for j in rows], dtype=np.int64), means,
                                             confidence), dtype=bool).reshape(-1)
        return [int(j) for j, s in zip(rows, stop) if s]

    def stopped(self, row: int, result: dict, with_checkpoints: bool) -> dict:
        """The pooled states of row ``row``, stopped at ``result["stopped_at"]`` tokens: those of
        its live file there, and with ``with_checkpoints`` its earlier live checkpoints (the
        recorder's ``checkpoint_tokens`` and ``checkpoint_means``)."""
        k = int(result["stopped_at"])
        seen = self.read[row]
        out = dict(seen[k])
        if with_checkpoints:
            want = checkpoint_counts(k, self.schedule)
            out.update(checkpoint_tokens=want, checkpoint_means=np.stack([seen[int(c)]["layer_means"] for c in want]))
        return out

    def after(self, path: str, k: int) -> list[str]:
        """The live files of the request with pooled file ``path`` past its stop at ``k`` (vLLM may
        write one before the abort arrives): for the engine to discard."""
        return [live_checkpoint_path(path, c) for c in self.schedule.first if c > k]


#: The kv_transfer_params key of a request's live-checkpoint schedule
#: (:data:`acute.engines.vllm_connector.LIVE_CHECKPOINTS_KEY`, which imports vLLM).
LIVE_CHECKPOINTS_KEY = "acute_live_checkpoints"
#: Seconds to wait for a finished request's live checkpoints (written with its final file).
LIVE_WAIT_S = 60.0


def live_counts(schedule: Schedule, max_new_tokens: int) -> list[int]:
    """The schedule's counts below ``max_new_tokens``: where a request may be asked."""
    return [int(k) for k in checkpoint_counts(max_new_tokens, schedule)[:-1]]


async def stream_live(client: Any, body: dict, path: str, where: str, ask: Callable[[int, list], bool],
                      schedule: Schedule, check: Callable[[Any, str], dict]) -> dict:
    """One completion streamed from a vLLM server (``client``: an ``httpx.AsyncClient``; ``body``
    asks for live checkpoints at ``schedule``, its pooled file is ``path``), asking
    ``ask(k, first k log-probs) -> stop`` at each live checkpoint once its file is written and
    its ``k`` tokens have arrived. A stop closes the stream (vLLM aborts the request). Returns
    the raw result :meth:`acute.engines.pooled.PooledEngine.generate_ids` gives, with
    ``stopped_at`` for a stopped one. ``check(response, where)``: the JSON of an error answer,
    raising (:func:`acute.engines.upstream._json`)."""
    tokens: list[int] = []
    logprobs: list[float] = []
    finish = stop_reason = None
    pending = live_counts(schedule, int(body["max_tokens"]))
    stopped = None

    def due(limit: int) -> int | None:
        """Ask at every pending checkpoint whose file is there (and ``< limit`` tokens); the stop, if any."""
        while pending and pending[0] <= limit and os.path.exists(live_checkpoint_path(path, pending[0])):
            k = pending.pop(0)
            if ask(k, logprobs[:k]):
                return k
        return None

    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as answer:
        if answer.status_code != 200:
            await answer.aread()
            check(answer, where)
        async for line in answer.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line[6:].strip() == "[DONE]":
                break
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            tokens += [int(t) for t in choice.get("token_ids") or []]
            logprobs += [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
            if choice.get("finish_reason"):
                finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
            stopped = due(len(tokens))
            if stopped is not None:
                break  # leaving the stream closes it: vLLM aborts the request
    if len(logprobs) != len(tokens):
        raise EngineError(f"{where}: vLLM's streamed answer has no token ids or log-probs per token (is it "
                          "vLLM >= 0.10?)")
    deadline = asyncio.get_running_loop().time() + LIVE_WAIT_S
    while stopped is None and pending and pending[0] < len(tokens):  # written with the request's final file
        stopped = due(len(tokens) - 1)
        if stopped is None and pending and pending[0] < len(tokens):
            if asyncio.get_running_loop().time() > deadline:
                raise EngineError(f"{where}: vLLM's live checkpoint at {pending[0]} tokens never arrived")
            await asyncio.sleep(0.005)
    if stopped is not None:
        return {"token_ids": tokens[:stopped], "logprobs": logprobs[:stopped], "finish_reason": "stopped",
                "stop_reason": None, "path": path, "stopped_at": stopped}
    return {"token_ids": tokens, "logprobs": logprobs, "finish_reason": finish, "stop_reason": stop_reason,
            "path": path}

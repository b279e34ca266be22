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

import contextlib
import os
from typing import Any, Callable, Sequence

import numpy as np

from ..store.checkpoints import Schedule, checkpoint_counts

__all__ = ["LiveStops", "live_checkpoint_path", "stop_early_refusal"]


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

    def leftovers(self, paths: Sequence[str]) -> list[str]:
        """Live files that may still appear for rows past their stop (removed where they exist)."""
        gone = []
        for path in paths:
            for k in self.schedule.first:
                candidate = live_checkpoint_path(path, k)
                with contextlib.suppress(OSError):
                    os.remove(candidate)
                    gone.append(candidate)
        return gone

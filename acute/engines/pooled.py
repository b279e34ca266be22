"""What every vLLM engine shares: acute's records from vLLM's raw results and the pooled files
acute's connector writes (:mod:`acute.engines.vllm_connector`).

:class:`PooledEngine` turns ``generate_ids`` (one engine's raw results: tokens, log-probs, finish
and stop reasons, the path of each request's pooled file) into
:func:`acute.extraction.generate_and_record`'s :class:`~acute.extraction.Generation` objects
(:meth:`PooledEngine.generate`) and the question-only probe's last-prompt states
(:meth:`PooledEngine.prompt_states`). Its engines: :class:`acute.engines.vllm.VllmEngine`
(vLLM in a worker process, offline) and :class:`acute.engines.upstream.UpstreamEngine` (a vLLM
OpenAI server, started by acute or by its user).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import EngineError, InputError
from ..store.checkpoints import Schedule, checkpoint_counts
from ..store.generation import GenerationSettings
from .live import LiveStops, stop_early_refusal

__all__ = ["POOLED_WAIT_S", "PooledEngine", "finish_reason", "read_pooled"]

#: Seconds to wait for a finished request's pooled file (it is written one engine step after
#: the request finishes).
POOLED_WAIT_S = 60.0


def finish_reason(vllm_reason: str | None, stop_reason: Any) -> str:
    """acute's finish reason of a vLLM completion: ``"length"``, ``"stop"`` (a stop string) or
    ``"eos"`` (an end-of-sequence or stop token)."""
    if vllm_reason == "length":
        return "length"
    return "stop" if isinstance(stop_reason, str) else "eos"


def read_pooled(path: str, where: str, n_tokens: int, wait_s: float = POOLED_WAIT_S,
                checkpoints: Schedule | None = None) -> dict[str, np.ndarray]:
    """A request's pooled states, from the file acute's connector writes one engine step after the
    request finished (waited for up to ``wait_s`` seconds; removed once read): ``layer_means``,
    ``last_answer`` and ``last_prompt`` of its ``n_tokens`` generated tokens, float32 ``[L+1, d]``
    each, and with ``checkpoints`` (the schedule the request asked the connector for) its
    ``checkpoint_tokens`` and ``checkpoint_means`` (:mod:`acute.store.checkpoints`: the last is
    ``layer_means``). A request the front end aborted (a stop string) may have run past its last
    kept token: those positions come off the sum, and checkpoints past it are dropped.
    :class:`EngineError` naming ``where`` and the file's name (not its folder) when it never
    arrives, does not hold ``n_tokens`` positions or lacks the checkpoints asked for."""
    from safetensors.numpy import load_file  # lazy: import time

    name = os.path.basename(path)
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise EngineError(f"{where}: vLLM's pooled states never arrived ({name} in its pooled folder, "
                              f"{wait_s:.0f} s after the request finished)")
        time.sleep(0.01)
    try:
        pooled = load_file(path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
    count, tail = int(pooled["count"][0]), pooled["tail"]
    extra = count - n_tokens  # positions pooled past the last kept token
    if extra < 0 or extra + 1 > len(tail):
        raise EngineError(f"{where}: vLLM pooled {count} positions for {n_tokens} generated "
                          f"tokens and kept the last {len(tail)}; cannot take {max(extra, 0)} off")
    total = pooled["sum"].astype(np.float64)
    if extra:
        total = total - tail[len(tail) - extra:].astype(np.float64).sum(axis=0)
    mean = (total / n_tokens).astype(np.float32)
    out = {"layer_means": mean, "last_answer": tail[len(tail) - extra - 1].astype(np.float32),
           "last_prompt": pooled["last_prompt"].astype(np.float32)}
    if checkpoints is not None:
        want = checkpoint_counts(n_tokens, checkpoints)
        counts = pooled.get("checkpoint_counts", np.zeros(0, np.int64))
        keep = counts < n_tokens
        if not np.array_equal(counts[keep], want[:-1]):
            raise EngineError(f"{where}: vLLM pooled checkpoints at {counts.tolist()} tokens, the schedule "
                              f"{checkpoints.to_json()} needs {want[:-1].tolist()} (an older pooling connector?)")
        sums = pooled["checkpoint_sums"][keep].astype(np.float64) if keep.any() else np.zeros((0, *mean.shape))
        means = (sums / want[:-1, None, None]).astype(np.float32)
        out.update(checkpoint_tokens=want, checkpoint_means=np.concatenate([means, mean[None]]))
    return out


class PooledEngine:
    """acute's records from a vLLM engine with acute's pooling connector (see the module).

    A subclass gives :meth:`generate_ids`; :meth:`generate` and :meth:`prompt_states` are the
    records. Thread-safe where ``generate_ids`` is (:class:`~acute.engines.upstream.UpstreamEngine`
    is; :class:`~acute.engines.vllm.VllmEngine` serves one caller at a time).
    """

    #: what :meth:`generate` needs the engine to record (``VllmEngine`` can run without it)
    pooling = True
    #: the engine's context in positions, when it is known and may be below the model's
    max_model_len: int | None = None
    #: whether its connector writes live checkpoints (:mod:`acute.engines.live`: stopping early)
    live_checkpoints = False

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], settings: GenerationSettings, *,
                     eos_token_ids: Sequence[int] = (), checkpoints: dict | None = None,
                     live: dict | None = None, on_live: Callable | None = None) -> list[dict]:
        """vLLM's raw results for token-id prompts (greedy, ``settings.max_new_tokens`` new
        tokens at most, stopping at ``settings.stop_strings``): per prompt ``token_ids``,
        ``logprobs``, ``finish_reason``, ``stop_reason`` and ``path`` (its pooled file);
        ``checkpoints`` (a schedule's JSON) asks the connector for prefix checkpoints. An engine
        with :attr:`live_checkpoints` also takes ``live`` (a schedule's JSON) and
        ``on_live(k, rows, paths, logprobs) -> rows to stop`` (:class:`acute.engines.live.LiveStops`):
        a stopped row's result has its first ``k`` tokens and ``stopped_at``."""
        raise NotImplementedError

    @contextlib.contextmanager
    def stopping(self, check: Callable[[], object]) -> Iterator[None]:
        """While the context lasts, this thread's requests are aborted once ``check()`` raises
        (and its error is raised); an engine that cannot abort ignores it."""
        yield

    def discard(self, paths: Sequence[str]) -> None:
        """Remove the pooled files of requests whose records will not be read."""
        for path in paths:
            with contextlib.suppress(OSError):
                os.remove(path)

    def generate(self, tokenizer: Any, prompts: Sequence[str], settings: GenerationSettings, *,
                 eos_token_ids: Sequence[int] | None = None, model: Any = None, on_too_long: str = "skip",
                 on_batch=None, checkpoints: Schedule | None = None, on_checkpoint=None, **_ignored: Any) -> list:
        """:func:`acute.extraction.generate_with`'s result for ``settings``, generated by vLLM.

        ``model`` (the transformers model, optional) sets the context window prompts must fit
        (skipped or refused as the recorder does); only ``pool="decoding"`` is supported.
        ``checkpoints`` (a :class:`~acute.store.checkpoints.Schedule`) also keeps each answer's
        prefix checkpoints, pooled by the connector; with ``on_checkpoint`` (the recorder's stop
        callback) they are read live and a row it stops ends there (:mod:`acute.engines.live`;
        InputError, :func:`~acute.engines.live.stop_early_refusal`, when the connector cannot).
        """
        from ..extraction import Generation  # heavy: torch
        from ..extraction.batching import check_strings, cut_at_stop  # heavy: torch

        if settings.pool != "decoding":
            raise InputError(f"the vLLM engine pools the 'decoding' positions only, got pool={settings.pool!r}")
        if not self.pooling:
            raise InputError("generate needs acute's pooling connector; this engine runs without it")
        prompts = check_strings(prompts, "prompts")
        settings = dataclasses.replace(settings, max_new_tokens=settings.max_new_tokens or 64,
                                       stop_strings=settings.stop_strings or ())
        stop_strings = settings.stop_strings
        encoded, keep, eos_token_ids = self._encode(tokenizer, prompts, model, settings.max_new_tokens, on_too_long,
                                                    eos_token_ids)
        ask = {} if checkpoints is None else {"checkpoints": checkpoints.to_json()}
        live = None
        if on_checkpoint is not None:  # stopping early (acute.engines.live)
            refused = stop_early_refusal(self)
            if refused or checkpoints is None:
                raise InputError(refused or "on_checkpoint needs a checkpoint schedule (checkpoints=)")
            live = LiveStops(keep, checkpoints, on_checkpoint, read_pooled)
            ask.update(live=live.live, on_live=live)
        raw = [] if not keep else self.generate_ids([encoded[i] for i in keep], settings,
                                                    eos_token_ids=eos_token_ids, **ask)
        out: list = [None] * len(prompts)
        for k, (i, result) in enumerate(zip(keep, raw)):
            tokens = np.asarray(result["token_ids"], dtype=np.int64)
            if result.get("stopped_at") is not None:
                # the request's own file and live ones past the stop, written (if ever) after it
                self.discard([result["path"], *live.after(result["path"], result["stopped_at"])])
                text = tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
                out[i] = Generation(text=text, token_ids=tokens,
                                    token_logprobs=np.asarray(result["logprobs"], dtype=np.float32),
                                    prompt_tokens=len(encoded[i]), finish_reason="stopped",
                                    **live.stopped(k, result, checkpoints is not None))
                continue
            try:
                pooled = read_pooled(self._path(result, i), f"prompts[{i}]", len(tokens), checkpoints=checkpoints)
            except BaseException:
                self.discard([r["path"] for r in raw[k + 1:] if r.get("path")])
                raise
            reason = finish_reason(result["finish_reason"], result["stop_reason"])
            text = tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
            if reason == "stop":
                text = cut_at_stop(text, stop_strings)
            out[i] = Generation(text=text, token_ids=tokens,
                                token_logprobs=np.asarray(result["logprobs"], dtype=np.float32),
                                prompt_tokens=len(encoded[i]), finish_reason=reason, **pooled)
        if on_batch is not None:
            on_batch(len(keep))
        return out

    def prompt_states(self, tokenizer: Any, prompts: Sequence[str], *, model: Any = None,
                      on_too_long: str = "error") -> tuple[np.ndarray, list[int]]:
        """``(states, prompt lengths)``: float32 ``[n, L+1, d]``, the states at each prompt's last
        token (what the question-only probe reads, equal to
        :func:`acute.extraction.record_prompt_states`' up to float rounding), from one prefill
        and one generated token each (vLLM caches a position's states once it is fed)."""
        from ..extraction.batching import check_strings  # heavy: torch

        prompts = check_strings(prompts, "prompts")
        encoded, keep, _ = self._encode(tokenizer, prompts, model, 0, on_too_long, None)
        if len(keep) != len(prompts):
            raise InputError(f"prompts[{min(set(range(len(prompts))) - set(keep))}] does not fit the "
                             "context window")
        raw = self.generate_ids(encoded, GenerationSettings(max_new_tokens=1)) if encoded else []
        states = []
        for i, r in enumerate(raw):
            try:
                states.append(read_pooled(self._path(r, i), f"prompts[{i}]", len(r["token_ids"]))["last_prompt"])
            except BaseException:
                self.discard([x["path"] for x in raw[i + 1:] if x.get("path")])
                raise
        if not states:
            return np.zeros((0, 0, 0), dtype=np.float32), []
        return np.stack(states), [len(ids) for ids in encoded]

    def _encode(self, tokenizer, prompts, model, reserve: int, on_too_long: str, eos_token_ids):
        """Token ids, the indices that fit and the EOS ids, as the transformers recorder has them;
        a prompt that fits the model's context window but not the engine's (``max_model_len``)
        is skipped or refused likewise."""
        from ..extraction.batching import encode_prompts, resolve_eos, tokenize  # heavy: torch

        if eos_token_ids is None:
            eos_token_ids = (resolve_eos(model, tokenizer) if model is not None
                             else [t for t in [getattr(tokenizer, "eos_token_id", None)] if t is not None])
        if model is not None:
            encoded, keep = encode_prompts(model, tokenizer, prompts, reserve, on_too_long)
        else:
            encoded, keep = tokenize(tokenizer, prompts), list(range(len(prompts)))
        limit = self.max_model_len
        too_long = [i for i in keep if limit and len(encoded[i]) + reserve > limit]
        if too_long and on_too_long == "error":
            i = too_long[0]
            raise InputError(f"prompts[{i}] has {len(encoded[i])} tokens"
                             + (f"; with max_new_tokens={reserve} it exceeds" if reserve else ", more than")
                             + f" vLLM's context of {limit} positions (its max_model_len)")
        return encoded, [i for i in keep if i not in too_long], list(eos_token_ids)

    @staticmethod
    def _path(result: dict, index: int) -> str:
        path = result.get("path")
        if not path:
            raise EngineError(f"prompts[{index}]: vLLM was started without acute's pooling connector")
        return path

"""acute's pooling connector: runs *inside* vLLM's processes and writes only what a store keeps.

vLLM's ``extract_hidden_states`` speculative method caches, for every token a request feeds, the
hidden states of the layers named in ``eagle_aux_hidden_state_layer_ids`` in a KV-cache group of
its own; a KV-transfer connector reads them when the request finishes, before its blocks are
freed. vLLM's ``ExampleHiddenStatesConnector`` writes all of them (every token of every layer,
through pinned CUDA memory). :class:`AcutePoolingConnector` keeps its scheduler bookkeeping and
replaces the worker side: when a request finishes it reduces, on the device that holds the
cache, the positions acute pools and writes one small file per request, O(L x d):

* ``sum``: the sum over the positions acute's recorder pools in ``"decoding"`` mode, the
  prompt's last token and every generated token but the final one (positions ``P-1 .. N-2`` of
  the ``N`` tokens, ``P`` the prompt's), ``[L+1, d]`` in ``sum_dtype``;
* ``count``: the number of positions summed (the number of generated tokens);
* ``last_prompt``: position ``P-1``, float32 ``[L+1, d]``;
* ``checkpoint_sums`` and ``checkpoint_counts``, for a request that asks for prefix checkpoints
  (``kv_transfer_params["acute_checkpoints"]``: a schedule, :data:`CHECKPOINTS_KEY`): the sums
  over the first ``k`` pooled positions, ``[C, L+1, d]`` in ``sum_dtype``, at each count ``k``
  of the schedule below the number of positions summed;
* ``tail``: the last pooled positions, float32 ``[k, L+1, d]``: ``k = 1`` (position ``N-2``, the
  last answer state) for a request the engine finished itself (EOS, a stop token, its length),
  up to ``tail_positions`` (default 4) for one the front end aborted. vLLM matches stop
  *strings* in its front end and aborts the request, by which time the engine may have run a
  step or two past the token that completed the string; the reader knows how many tokens it
  kept and takes the positions past them off the sum with ``tail``.

Live checkpoints (early stopping): a request that names its file and asks for them
(``kv_transfer_params["acute_live_checkpoints"]``: a schedule, :data:`LIVE_CHECKPOINTS_KEY`) also
gets, while it runs, one file per checkpoint ``k`` of the schedule, ``<name>.k<k>.safetensors``,
in the format above (``sum`` and ``count`` over its first ``k`` pooled positions, ``last_prompt``,
``tail``: position ``k``), written in the engine step after the one that computed those positions
(the scheduler knows them computed by then, also when a speculative token was accepted), and, for
the checkpoints it had passed when it finished, with its final file. So its file for ``k``
exists exactly when its ``k``-th token was not its last: when acute's recorder would ask the stop
rule at ``k``. A request aborted mid-way gets no further ones. :data:`LIVE_CHECKPOINTS` says a
connector writes them (:meth:`AcuteWorkerExtension.acute_connector_stats`).

Layer ids: vLLM's aux id ``i < L`` is transformers' ``hidden_states[i]``, id ``L`` the last
decoder layer's output *before* the final norm. acute's index ``L`` is the final norm's output,
so the connector applies the model's own norm module to each position's id-``L`` state before
pooling it (:class:`AcuteWorkerExtension` hands the norm to the connector after the model
loads). The file is written to a temporary name and renamed, so a reader that sees it sees all
of it (no lock files).

This module imports only torch, safetensors and vLLM: it is what vLLM's processes import
(``kv_connector_module_path``, ``worker_extension_cls``), in the environment that has vLLM.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    ExampleHiddenStatesConnectorMetadata,
)

__all__ = ["AcutePoolingConnector", "AcuteWorkerExtension", "CHECKPOINTS_KEY", "POOLED_NAME_KEY",
           "POOLED_PATH_KEY"]

logger = logging.getLogger(__name__)

#: The kv_transfer_params key under which a finished request names its pooled file.
POOLED_PATH_KEY = "acute_pooled_path"
#: The kv_transfer_params key a request names its file with: a plain name (:data:`NAME_PATTERN`),
#: written as ``<shared_storage_path>/<name>.safetensors``. The client knows the path before the
#: request ends, so it needs no answer to carry it (a streamed answer, or one a stop string
#: aborted, carries none), and no client can make vLLM write outside that folder (vLLM's own
#: ``hidden_states_path`` needs ``allow_custom_save_path``, which lets a client write anywhere).
POOLED_NAME_KEY = "acute_pooled_name"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: The kv_transfer_params key of a request's prefix-checkpoint schedule
#: (``{"first": [4, 8, ...], "every": 32}``, as :mod:`acute.store.checkpoints` has it).
CHECKPOINTS_KEY = "acute_checkpoints"
#: The kv_transfer_params key of a request's live-checkpoint schedule (same form as
#: :data:`CHECKPOINTS_KEY`): files written while it runs, for early stopping (see the module).
LIVE_CHECKPOINTS_KEY = "acute_live_checkpoints"
#: This connector writes live checkpoints (what a client checks before asking for them).
LIVE_CHECKPOINTS = True


def live_checkpoint_path(filename: str, k: int) -> str:
    """The live checkpoint ``k``'s file beside a request's pooled file ``filename``
    (``<dir>/<name>.safetensors`` -> ``<dir>/<name>.k<k>.safetensors``)."""
    stem = filename[:-len(".safetensors")] if filename.endswith(".safetensors") else filename
    return f"{stem}.k{int(k)}.safetensors"


def schedule_up_to(schedule: dict | None, top: int) -> list[int]:
    """The schedule's token counts up to and including ``top`` (none for a malformed schedule)."""
    return schedule_counts(schedule, top + 1)


def valid_schedule(schedule: Any) -> bool:
    """Whether ``schedule`` is a checkpoint schedule (``{"first": [positive ints], "every": positive int}``)."""
    if not isinstance(schedule, dict):
        return False
    first, every = schedule.get("first"), schedule.get("every")
    return isinstance(first, list) and all(isinstance(k, int) and k > 0 for k in first) \
        and isinstance(every, int) and every >= 1


def schedule_counts(schedule: dict | None, count: int) -> list[int]:
    """The schedule's token counts below ``count`` (none for no schedule or a malformed one)."""
    if not valid_schedule(schedule):
        return []
    first, every = schedule["first"], schedule["every"]
    top = max(first, default=0)
    return sorted({k for k in first if k < count} | set(range(top + every, count, every)))


@dataclass
class PendingPool:
    """What the worker pools for one finished request (built on the scheduler side)."""

    req_id: str
    filename: str
    block_ids: list[int]
    prompt_len: int  #: P
    num_positions: int  #: N - 1: the positions whose states are cached (the final token's is not)
    tail: int = 1  #: how many of the last pooled positions to write one by one
    checkpoints: dict | None = None  #: the request's prefix-checkpoint schedule, if it asked for one
    live: bool = False  #: a live checkpoint (its own file, not the request's final one)


@dataclass
class LiveRequest:
    """Scheduler-side state of a running request that asked for live checkpoints."""

    filename: str
    prompt_len: int
    block_ids: list[int]
    schedule: dict
    written: set = field(default_factory=set)  #: the counts already handed to the worker


@dataclass
class AcuteConnectorMetadata(ExampleHiddenStatesConnectorMetadata):
    """The stock metadata and this step's live checkpoints (:class:`PendingPool` with ``live``)."""

    live_checkpoints: list = field(default_factory=list)


class AcutePoolingConnector(ExampleHiddenStatesConnector):
    """Pools hidden states per request inside vLLM and writes ``[L+1, d]`` arrays (see module).

    Extra config (``kv_connector_extra_config``): ``shared_storage_path`` (where the per-request
    files go), ``sum_dtype`` (``"float32"``, default, or ``"float64"``: the dtype of the
    reduction, as acute's recorder's ``dtype``), ``tail_positions`` (default 4: the positions
    kept one by one for an aborted request, see the module docstring). A request names its file
    with ``kv_transfer_params={"acute_pooled_name": NAME}`` (:data:`POOLED_NAME_KEY`: a plain
    name, written in ``shared_storage_path``); one that names none gets the stock connector's
    default, ``<shared_storage_path>/<request id>.safetensors``.
    """

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        name = self._kv_transfer_config.get_from_extra_config("sum_dtype", "float32")
        self.sum_dtype = {"float32": torch.float32, "float64": torch.float64}[name]
        self.tail_positions = int(self._kv_transfer_config.get_from_extra_config("tail_positions", 4))
        self.final_norm: Any = None  # set by AcuteWorkerExtension.acute_attach_norm
        self.bytes_written = 0
        self.requests_written = 0
        self.checkpoints_written = 0
        self._live: dict[str, LiveRequest] = {}  # scheduler side: requests with live checkpoints
        self._live_left: list[PendingPool] = []  # live checkpoints of finished requests, for the next step

    # -- scheduler side ----------------------------------------------------------------------

    def _named(self, request) -> str | None:
        """``<shared_storage_path>/<name>.safetensors`` for a request that names its file
        (:data:`POOLED_NAME_KEY`); None when it names none or a name that is not plain."""
        name = (request.kv_transfer_params or {}).get(POOLED_NAME_KEY)
        if name is None:
            return None
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            logger.warning("acute: request %s names its pooled file %r, not a plain name "
                           "([A-Za-z0-9_-], 1 to 128): the default name is used", request.request_id, name)
            return None
        return os.path.join(self._storage_path, name + ".safetensors")

    def build_connector_meta(self, scheduler_output) -> AcuteConnectorMetadata:
        """The stock metadata and the live checkpoints whose positions are computed by now."""
        stock = super().build_connector_meta(scheduler_output)
        meta = AcuteConnectorMetadata(pending_saves=stock.pending_saves, new_req_filenames=stock.new_req_filenames)
        meta.live_checkpoints, self._live_left = self._live_left, []
        group = self._cache_kv_group_id
        for new in scheduler_output.scheduled_new_reqs:
            params = (new.sampling_params.extra_args or {}).get("kv_transfer_params") if new.sampling_params else None
            schedule = (params or {}).get(LIVE_CHECKPOINTS_KEY)
            name = (params or {}).get(POOLED_NAME_KEY)
            if not valid_schedule(schedule) or not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                continue
            self._live[new.req_id] = LiveRequest(os.path.join(self._storage_path, name + ".safetensors"),
                                                 len(new.prompt_token_ids or ()), list(new.block_ids[group]), schedule)
            self._due(new.req_id, new.num_computed_tokens, meta.live_checkpoints)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            live = self._live.get(req_id)
            if live is None:
                continue
            ids = cached.new_block_ids[i]
            if ids is not None:
                live.block_ids = list(ids[group]) if req_id in cached.resumed_req_ids \
                    else live.block_ids + list(ids[group])
            self._due(req_id, cached.num_computed_tokens[i], meta.live_checkpoints)
        return meta

    def _due(self, req_id: str, num_computed: int, out: list, below: int | None = None) -> None:
        """Append to ``out`` the live checkpoints of ``req_id`` whose positions are computed
        (``num_computed`` of its tokens; with ``below``, only counts below it) not yet written."""
        live = self._live[req_id]
        pooled = num_computed - (live.prompt_len - 1)
        top = pooled if below is None else min(pooled, below - 1)
        for k in schedule_up_to(live.schedule, top):
            if k in live.written:
                continue
            live.written.add(k)
            out.append(PendingPool(req_id, live_checkpoint_path(live.filename, k), list(live.block_ids),
                                   live.prompt_len, live.prompt_len - 1 + k, live=True))

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._finish_live(request, block_ids)
        req_id = request.request_id
        filename = self._request_filenames.pop(req_id, None)
        if filename is None or request.prompt_token_ids is None:
            self._pending_saves.pop(req_id, None)
            return False, None
        filename = self._named(request) or filename
        from vllm.v1.request import RequestStatus  # optional: vllm

        prompt_len = len(request.prompt_token_ids)
        # positions whose states are cached: all but the final token, and none the engine has
        # not computed yet (an abort can come between steps)
        num_positions = min(len(request.all_token_ids) - 1, request.num_computed_tokens)
        if num_positions < prompt_len:  # nothing generated (aborted early)
            return False, None
        aborted = request.status == RequestStatus.FINISHED_ABORTED
        self._pending_saves[req_id] = PendingPool(req_id, filename, list(block_ids), prompt_len,
                                                  num_positions, self.tail_positions if aborted else 1,
                                                  (request.kv_transfer_params or {}).get(CHECKPOINTS_KEY))
        return True, {POOLED_PATH_KEY: filename}

    def _finish_live(self, request, block_ids: list[int]) -> None:
        """A finished request's live checkpoints below its last token, written with its final
        file (none for an aborted one: nobody waits for them)."""
        from vllm.v1.request import RequestStatus

        live = self._live.pop(request.request_id, None)
        if live is None or request.status == RequestStatus.FINISHED_ABORTED:
            return
        live.block_ids = list(block_ids)
        self._live[request.request_id] = live
        count = min(len(request.all_token_ids) - 1, request.num_computed_tokens) - (live.prompt_len - 1)
        self._due(request.request_id, request.num_computed_tokens, self._live_left, below=count)
        del self._live[request.request_id]

    # -- worker side -------------------------------------------------------------------------

    def wait_for_save(self) -> None:
        pass  # nothing to lock: files appear whole (written, then renamed)

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """The stock registration, then the final norm taken from the model runner that
        registers the caches (its caller), so that a plain ``vllm serve`` / api_server started
        with this connector needs no ``collective_rpc`` (:class:`AcuteWorkerExtension` remains
        for the offline engine, and to check)."""
        super().register_kv_caches(kv_caches)
        frame = sys._getframe(1)
        for _ in range(4):  # the runner's initialize_kv_cache, or a helper it calls
            if frame is None:
                break
            runner = frame.f_locals.get("self")
            if callable(getattr(runner, "get_model", None)):
                try:
                    self.final_norm = _final_norm(runner.get_model())
                except RuntimeError as e:
                    logger.warning("acute: %s", e)
                break
            frame = frame.f_back

    def _states(self, pending: PendingPool) -> torch.Tensor:
        """``[N-1 - (P-1), L+1, d]`` cached states of the pooled positions, in the model dtype."""
        positions = torch.arange(pending.prompt_len - 1, pending.num_positions, dtype=torch.long)
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)[positions // self._block_size]
        offsets = positions % self._block_size
        device = self._kv_cache.device
        # the cache is [num_blocks, L+1 (one "head" per layer), block_size, d]
        return self._kv_cache[blocks.to(device), :, offsets.to(device)]

    def _pool(self, pending: PendingPool) -> dict[str, torch.Tensor]:
        states = self._states(pending)  # [T, L+1, d]
        if self.final_norm is None:
            raise RuntimeError("acute's pooling connector has no final norm: load vLLM with "
                               "worker_extension_cls=acute.engines.vllm_connector.AcuteWorkerExtension "
                               "and call collective_rpc('acute_attach_norm') once")
        with torch.no_grad():
            normed = self.final_norm(states[:, -1, :].contiguous())
        states = torch.cat([states[:, :-1, :], normed.unsqueeze(1).to(states.dtype)], dim=1)
        count = states.shape[0]
        summed = states.to(self.sum_dtype)
        counts = schedule_counts(pending.checkpoints, count)
        checkpoints = {}
        if counts:
            at = torch.tensor(counts, dtype=torch.long, device=summed.device) - 1
            checkpoints = {"checkpoint_sums": summed.cumsum(dim=0)[at].cpu(),
                           "checkpoint_counts": torch.tensor(counts, dtype=torch.int64)}
        return {
            **checkpoints,
            "sum": summed.sum(dim=0).cpu(),
            "count": torch.tensor([count], dtype=torch.int64),
            # copies: for a one-token answer the tail is the last prompt position itself, and
            # safetensors refuses tensors that share memory
            "last_prompt": states[0].float().cpu().clone(),
            "tail": states[-min(pending.tail, count):].float().cpu().clone(),
        }

    def _write(self, pending: PendingPool) -> None:
        tensors = self._pool(pending)
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        tmp = pending.filename + ".tmp"
        save_file(tensors, tmp)
        os.replace(tmp, pending.filename)
        self.bytes_written += os.path.getsize(pending.filename)
        if pending.live:
            self.checkpoints_written += 1
        else:
            self.requests_written += 1

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        done: set[str] = set()
        if self.has_connector_metadata():
            metadata = self._get_connector_metadata()
            if isinstance(metadata, ExampleHiddenStatesConnectorMetadata):
                # live checkpoints first: a finished request's are written before its blocks go
                for pending in getattr(metadata, "live_checkpoints", ()):
                    if self._is_tp_rank_zero:
                        try:
                            self._write(pending)
                        except Exception:  # one request's failure must not stop the engine
                            logger.exception("acute: live checkpoint of request %s failed", pending.req_id)
                for pending in metadata.pending_saves:
                    if self._is_tp_rank_zero:
                        try:
                            self._write(pending)
                        except Exception:  # one request's failure must not stop the engine
                            logger.exception("acute: pooling request %s failed", pending.req_id)
                    done.add(pending.req_id)
        return done or None, None


class AcuteWorkerExtension:
    """Mixed into vLLM's worker (``worker_extension_cls``): hands the model's final norm to the
    pooling connector, and reports what it wrote."""

    def acute_attach_norm(self) -> dict:
        from vllm.distributed.kv_transfer import get_kv_transfer_group  # optional: vllm

        model = self.model_runner.get_model()
        inner = getattr(model, "model", model)
        norm = _final_norm(model)
        connector = get_kv_transfer_group()
        connector.final_norm = norm
        return {"model": type(model).__name__, "norm": type(norm).__name__,
                "num_layers": len(getattr(inner, "layers", []))}

    def acute_connector_stats(self) -> dict:
        from vllm.distributed.kv_transfer import get_kv_transfer_group  # optional: vllm

        connector = get_kv_transfer_group()
        return {"bytes_written": connector.bytes_written,
                "requests_written": connector.requests_written,
                "checkpoints_written": connector.checkpoints_written, "live_checkpoints": LIVE_CHECKPOINTS}


def _final_norm(model):
    """The decoder's final norm module (``model.model.norm``); RuntimeError when there is none."""
    inner = getattr(model, "model", model)
    norm = getattr(inner, "norm", None)
    if norm is None:
        raise RuntimeError(f"{type(model).__name__} has no final norm at .model.norm")
    return norm

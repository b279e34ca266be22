"""vLLM's ``ExampleHiddenStatesConnector`` made to run on a CPU, for comparison only
(``benchmarks/vllm_backend.py``): it writes every cached token of every requested layer, as the
stock connector does, but copies synchronously (the stock one pins memory and uses CUDA streams
and events). Imported by vLLM's processes; imports only torch, safetensors and vLLM.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    ExampleHiddenStatesConnectorMetadata,
)

__all__ = ["CpuHiddenStatesConnector"]


class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
    """The stock connector, synchronous: one safetensors file of ``[N-1, L+1, d]`` per request."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.final_norm = None  # set by AcuteWorkerExtension; unused here
        self.bytes_written = 0
        self.requests_written = 0

    def wait_for_save(self) -> None:
        pass

    def get_finished(self, finished_req_ids):
        done = set()
        if self.has_connector_metadata():
            metadata = self._get_connector_metadata()
            if isinstance(metadata, ExampleHiddenStatesConnectorMetadata):
                for pending in metadata.pending_saves:
                    self._write(pending)
                    done.add(pending.req_id)
        return done or None, None

    def _write(self, pending) -> None:
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        slots = (torch.arange(self._block_size)[None, :] + blocks[:, None] * self._block_size).flatten()
        n = pending.token_ids.shape[0]
        states = self._kv_cache[slots // self._block_size, :, slots % self._block_size][:n].cpu()
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        tmp = pending.filename + ".tmp"
        save_file({"hidden_states": states.contiguous(), "token_ids": pending.token_ids.clone()}, tmp)
        os.replace(tmp, pending.filename)
        self.bytes_written += os.path.getsize(pending.filename)
        self.requests_written += 1

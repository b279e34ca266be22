"""The layer pooler: forward hooks that pool every layer's hidden states over chosen positions.

One pooler serves generation and teacher forcing: a decoding step (or the prefill) is weights
over the one position it adds, a teacher-forced pass weights over every position it feeds.
:class:`LayerPooler` only attaches its hooks, records and always detaches them; what to pool in
the next forward is set from outside (:meth:`LayerPooler.set_weights`), by the recorder's
stopping criterion while generating (:mod:`acute.extraction.recorder`) or by
:func:`acute.extraction.record_responses`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import InputError
from .layers import LayerMap, find_layers, hook_layer_outputs

__all__ = ["LayerPooler", "check_dtype", "stack_layers"]

#: The accumulation dtypes of the pooled states.
DTYPES = (torch.float32, torch.float64)


def check_dtype(dtype: torch.dtype) -> None:
    """Raise :class:`InputError` unless ``dtype`` is an accumulation dtype (:data:`DTYPES`)."""
    if dtype not in DTYPES:
        raise InputError(f"dtype must be torch.float32 or torch.float64, got {dtype}")


def stack_layers(states: Sequence[torch.Tensor]) -> torch.Tensor:
    """float64 [B, L+1, d] on the CPU from one [B, d] tensor per layer, wherever each lives."""
    return torch.stack([s.to("cpu", torch.float64) for s in states], dim=1)


class LayerPooler:
    """Context manager that pools every layer's hidden states over chosen positions of a forward.

    Hooks the first decoder layer's input (index 0), each decoder layer's output but the last
    (``i + 1`` for layer ``i``) and the final norm's output (index ``L``), as in
    :func:`~acute.extraction.layers.hook_layer_outputs`. Before a forward,
    :meth:`set_weights` says what to pool from it:

    - ``weights`` (``[b, k]``) weigh the *last* ``k`` fed positions of each row and are added
      to :attr:`sums` (teacher forcing passes the ``k = s`` fed positions, a decoding step or
      the prefill ``k = 1``); ``None`` sums nothing;
    - each of ``picks`` (a name and int64[b]: one position of that window per row, ``k = 1``
      without weights) keeps that position's state in :attr:`picked` under the name, replacing
      the row's earlier state; a negative position keeps the earlier one;
    - ``rows`` (int64[b]): the batch rows a forward over a subset of the batch holds (``None``:
      all :attr:`batch_size` rows, in order).

    States live on each layer's device in ``dtype`` (float32 or float64, whatever the model's
    dtype; the window is sliced before it is cast); per forward the weights and picks are copied
    to each device at most once. The hooks do nothing while nothing is set and are removed on
    exit, also when an exception is raised.

    Use::

        with LayerPooler(model) as pooler:
            pooler.reset(batch_size=2)
            pooler.set_weights(mask.float(), picks={"last": last_positions})
            model(input_ids, attention_mask=mask)
            pooler.set_weights(None)
            means, last = pooler.means(mask.sum(1).tolist()), pooler.states("last")
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.float32):
        self.model = model
        self.dtype = dtype
        self.layer_map: LayerMap | None = None
        self.batch_size = 0
        self.sums: list[torch.Tensor | None] = []
        self.picked: dict[str, list[torch.Tensor | None]] = {}
        self._weights: torch.Tensor | None = None
        self._picks: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._rows: torch.Tensor | None = None
        self._copies: dict[tuple[str, torch.device], torch.Tensor] = {}
        self._handles: list[Any] = []

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> "LayerPooler":
        check_dtype(self.dtype)
        if self._handles:
            raise RuntimeError("LayerPooler is already active (not re-entrant)")
        self.layer_map = find_layers(self.model)
        self.sums = [None] * (self.layer_map.num_layers + 1)
        self._handles = hook_layer_outputs(self.layer_map, self._add, self._armed)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.set_weights(None)

    @property
    def active(self) -> bool:
        """Whether the hooks are attached."""
        return bool(self._handles)

    # -- what to pool ------------------------------------------------------------------------

    def reset(self, batch_size: int) -> None:
        """Start the sums and picked states of a new batch of ``batch_size`` rows."""
        self.batch_size = batch_size
        self.sums = [None] * len(self.sums)
        self.picked = {}

    def set_weights(self, weights: torch.Tensor | None, rows: torch.Tensor | None = None,
                    picks: Mapping[str, torch.Tensor] | None = None) -> None:
        """What the next forward pools (see the class docstring); ``set_weights(None)`` stops."""
        self._weights = None if weights is None else weights.to(self.dtype)
        # per pick: (the position, clamped to the window, and whether it replaces the state)
        self._picks = {name: (p.clamp(min=0), (p >= 0).unsqueeze(1)) for name, p in (picks or {}).items()}
        self._rows = rows
        self._copies = {}

    def _armed(self) -> bool:
        return self._weights is not None or bool(self._picks)

    def _on(self, name: str, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``tensor`` on ``device``: itself there, else its copy kept until the next weights."""
        if tensor.device == device:
            return tensor
        key = (name, device)
        if key not in self._copies:
            self._copies[key] = tensor.to(device)
        return self._copies[key]

    def _slot(self, states: list[torch.Tensor | None], index: int, like: torch.Tensor) -> torch.Tensor:
        """``states[index]``, first allocated as zeros [batch_size, d] on ``like``'s device."""
        if states[index] is None:
            states[index] = torch.zeros((self.batch_size, like.shape[-1]), dtype=self.dtype,
                                        device=like.device)
        return states[index]

    # -- the hook ----------------------------------------------------------------------------

    def _add(self, index: int, hidden: torch.Tensor) -> None:
        device = hidden.device
        k = 1 if self._weights is None else self._weights.shape[1]
        hidden = hidden[:, -k:, :].to(self.dtype)  # [b, k, d] on this layer's device
        rows = None if self._rows is None else self._on("rows", self._rows, device)
        if self._weights is not None:
            w = self._on("weights", self._weights, device)  # [b, k]
            pooled = hidden[:, 0] * w if k == 1 else torch.bmm(w.unsqueeze(1), hidden).squeeze(1)
            total = self._slot(self.sums, index, hidden)
            if rows is None:
                total += pooled
            else:
                total.index_add_(0, rows, pooled)
        for name, (at, take) in self._picks.items():
            if k == 1:
                state = hidden[:, 0]
            else:
                at = self._on(name, at, device)[:, None, None].expand(-1, 1, hidden.shape[-1])
                state = hidden.gather(1, at).squeeze(1)  # [b, d]
            kept = self._slot(self.picked.setdefault(name, [None] * len(self.sums)), index, hidden)
            take = self._on(name + ":take", take, device)
            if rows is None:
                kept.copy_(torch.where(take, state, kept))
            else:
                kept.index_copy_(0, rows, torch.where(take, state, kept[rows]))

    # -- results -----------------------------------------------------------------------------

    def means(self, counts: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 [batch_size, L+1, d]: the sums divided by each row's number of pooled positions."""
        if any(s is None for s in self.sums):
            raise RuntimeError("some layers were never reached by a forward pass")
        count = torch.as_tensor(np.asarray(counts), dtype=torch.float64)[:, None, None]
        return (stack_layers(self.sums) / count).numpy().astype(np.float32)

    def snapshot(self, rows: torch.Tensor) -> np.ndarray:
        """float64 [len(rows), L+1, d] on the CPU: the current sums of the batch rows ``rows``."""
        if any(s is None for s in self.sums):
            raise RuntimeError("some layers were never reached by a forward pass")
        return stack_layers([s[rows.to(s.device)] for s in self.sums]).numpy()

    def states(self, name: str) -> np.ndarray:
        """float32 [batch_size, L+1, d]: the states picked under ``name``."""
        picked = self.picked.get(name)
        if picked is None or any(s is None for s in picked):
            raise RuntimeError(f"no states were picked as {name!r} in every layer")
        return stack_layers(picked).numpy().astype(np.float32)

    def nbytes(self) -> int:
        """Bytes of the pooled states and of what is set for the next forward (not the copies
        on other devices)."""
        tensors = [s for s in self.sums if s is not None]
        tensors += [s for states in self.picked.values() for s in states if s is not None]
        tensors += [t for pair in self._picks.values() for t in pair]
        tensors += [t for t in (self._weights, self._rows) if t is not None]
        return int(sum(t.numel() * t.element_size() for t in tensors))

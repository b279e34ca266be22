"""The recorder: generation with per-row stopping, token log-probs and finish reasons, the
hidden states pooled by a :class:`~acute.extraction.pooler.LayerPooler` while the model generates."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.stopping_criteria import EosTokenCriteria


from ..errors import InputError
from ..store.checkpoints import Schedule, checkpoint_counts
from ..store.pooling import POOLS, PoolMode
from .decoding import plain_greedy, greedy_decode
from .layers import LayerMap, model_device
from .pooler import LayerPooler, check_dtype

__all__ = ["CheckpointCallback", "HiddenStateRecorder"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# The recorder
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RecordedBatch:
    """What :meth:`HiddenStateRecorder.generate` recorded for one batch (rows in input order).

    ``token_ids[r]`` (int64[T_r]) and ``token_logprobs[r]`` (float32[T_r]) are row ``r``'s
    generated tokens up to and including the one that finished it; ``layer_means``,
    ``last_prompt`` and ``last_answer`` are float32[B, L+1, d]: the mean over the pooled
    positions, the state at the prompt's last token and the state at the last pooled position
    (see the module docstring of :mod:`acute.extraction`); ``counts`` int64[B] the number of
    pooled states per row (== T_r); ``finish_reasons[r]`` is ``"eos"``, ``"stop"`` or
    ``"length"``. With a checkpoint schedule, ``checkpoint_tokens[r]`` (int64[C_r]) and
    ``checkpoint_means[r]`` (float32[C_r, L+1, d]) are row ``r``'s prefix checkpoints
    (:mod:`acute.store.checkpoints`: the means over its first ``k`` pooled states, the last
    one equal to ``layer_means[r]``); None without a schedule.
    """

    token_ids: list[np.ndarray]
    token_logprobs: list[np.ndarray]
    layer_means: np.ndarray
    last_prompt: np.ndarray
    last_answer: np.ndarray
    counts: np.ndarray
    finish_reasons: list[str]
    checkpoint_tokens: list[np.ndarray] | None = None
    checkpoint_means: list[np.ndarray] | None = None


_REASON_NONE, _REASON_EOS, _REASON_STOP, _REASON_LENGTH, _REASON_STOPPED = 0, 1, 2, 3, 4
_REASON_NAMES = {_REASON_EOS: "eos", _REASON_STOP: "stop", _REASON_LENGTH: "length", _REASON_STOPPED: "stopped"}
#: ``on_checkpoint(k, rows, means, confidence) -> stop``: at a checkpoint of ``k`` generated
#: tokens, the batch rows (int [b]) still generating, their prefix means (float32 [b, L+1, d])
#: and prefix confidences (float64 [b]); returns which of them to stop (bool [b]).
CheckpointCallback = Callable[[int, np.ndarray, np.ndarray, np.ndarray], Any]


class _Run:
    """Mutable state of one recorded ``generate`` call: what is about generation (tokens,
    log-probs, finish reasons, which rows are pooled); the states are the pooler's."""

    def __init__(self, pooler: LayerPooler, batch_size: int, device: torch.device, pool: str,
                 max_new_tokens: int, eos_ids: Sequence[int], stop_strings: Sequence[str],
                 tokenizer: Any, checkpoints: Schedule | None = None,
                 on_checkpoint: CheckpointCallback | None = None):
        self.pooler = pooler
        self.batch_size = batch_size
        self.device = device
        self.pool = pool
        self.max_new_tokens = max_new_tokens
        self.stop_strings = tuple(stop_strings)
        self.tokenizer = tokenizer
        self.eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
        self.counts = torch.zeros(batch_size, dtype=torch.long, device=device)
        # The rows the *next* forward pools ([B] bool) and whether it pools at all. "decoding":
        # every row is pooled in the prefill; "generated": nothing, the prefill only keeps the
        # prompt's last state. The prefill is the only forward that keeps it.
        self.pooled = torch.full((batch_size,), pool == "decoding", dtype=torch.bool, device=device)
        self.pooling = pool == "decoding"
        self.prefill = True
        self.done = torch.zeros(batch_size, dtype=torch.bool, device=device)
        self.n_tokens = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.reason = torch.zeros(batch_size, dtype=torch.long, device=device)
        # Preallocated so that nothing long-lived is allocated per step (no heap fragmentation
        # between the growing KV-cache blocks); generate runs at most max_new_tokens + 1 steps.
        self.step = 0
        self.tokens = torch.zeros(batch_size, max_new_tokens + 1, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(batch_size, max_new_tokens + 1, dtype=torch.float32, device=device)
        self.logits_next: torch.Tensor | None = None  # raw logits of the latest forward [B, V]
        self.logsumexp_next: torch.Tensor | None = None  # their log-normaliser [B] (float32)
        self.cpu_tokens: list[list[int]] | None = [[] for _ in range(batch_size)] if stop_strings else None
        # Batch rows of the current forward (original indices) when finished rows were dropped
        # from it (the recorder's own greedy loop); None = every row.
        self.rows: torch.Tensor | None = None
        # Prefix checkpoints: every row a forward pools has pooled as many states as there were
        # pooling forwards, so the schedule is checked against that host-side count (no sync).
        self.checkpoints = checkpoints
        self.pooling_forwards = 0
        self.snapshots: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(batch_size)]
        self.on_checkpoint = on_checkpoint
        self.fresh: tuple[int, np.ndarray] | None = None  # (k, rows) snapshotted by the latest forward
        pooler.reset(batch_size)
        self.arm()

    def arm(self) -> None:
        """Tell the pooler what the next forward pools: weight 1 at its one new position for
        the pooled rows, whose last pooled state it replaces (the others keep theirs)."""
        pooled = self.pooled if self.rows is None else self.pooled[self.rows]
        picks = {}
        if self.prefill:
            picks["last_prompt"] = torch.zeros(pooled.shape[0], dtype=torch.long, device=self.device)
        weights = None
        if self.pooling:
            weights = pooled.unsqueeze(1)
            picks["last_answer"] = pooled.long() - 1  # 0 (the new position) or -1 (keep)
        self.pooler.set_weights(weights, rows=self.rows, picks=picks)

    def set_pooled(self, mask: torch.Tensor) -> None:
        """Pool the rows of ``mask`` in the next forward."""
        self.pooled = mask.clone()
        self.pooling = True
        self.arm()

    def set_rows(self, rows: torch.Tensor | None) -> None:
        self.rows = None if rows is None or rows.numel() == self.batch_size else rows
        self.arm()

    def snapshot(self, k: int) -> None:
        """Keep the running means of the rows this forward pooled, each now over ``k`` states."""
        rows = self.pooled.nonzero().squeeze(1)
        if rows.numel() == 0:
            return
        means = (self.pooler.snapshot(rows) / k).astype(np.float32)  # as LayerPooler.means
        for r, mean in zip(rows.tolist(), means):
            self.snapshots[r].append((k, mean))
        self.fresh = (k, rows.cpu().numpy())

    def stop_at_checkpoint(self, finishing: torch.Tensor) -> torch.Tensor | None:
        """bool [B]: the rows ``on_checkpoint`` stops at the checkpoint the latest forward took
        (rows finishing at this token anyway are not asked); None when it stops none (no
        callback, no checkpoint at this token, or no row stopped), so a step without a stop
        allocates nothing."""
        fresh, self.fresh = self.fresh, None
        if self.on_checkpoint is None or fresh is None:
            return None
        k, rows = fresh
        rows = rows[~finishing[torch.as_tensor(rows, device=self.device)].cpu().numpy()]
        if rows.size == 0:
            return None
        means = np.stack([dict(self.snapshots[r])[k] for r in rows])
        logprobs = self.logprobs[torch.as_tensor(rows, device=self.device), :k].double().sum(1)
        confidence = torch.exp(logprobs).cpu().numpy()
        decided = np.asarray(self.on_checkpoint(k, rows, means, confidence), dtype=bool).reshape(-1)
        if decided.shape != rows.shape:
            raise InputError(f"on_checkpoint returned {decided.size} decisions for {rows.size} rows")
        if not decided.any():
            return None
        stop = torch.zeros(self.batch_size, dtype=torch.bool, device=self.device)
        stop[torch.as_tensor(rows[decided], dtype=torch.long, device=self.device)] = True
        return stop

    def forward_done(self) -> None:
        """After each forward (the logits hook): count the rows it pooled."""
        if self.pooling:
            self.counts += self.pooled
            self.pooling_forwards += 1
            if self.checkpoints is not None and self.pooling_forwards in self.checkpoints:
                self.snapshot(self.pooling_forwards)
        if self.prefill:
            self.prefill = False
            self.arm()


class _DropEosPrecedenceNotice(logging.Filter):
    """Drops transformers' notice that our (never-firing) EosTokenCriteria replaces its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("EosTokenCriteria" in message and "take precedence" in message)


@contextlib.contextmanager
def _quiet_eos_notice():
    logger = logging.getLogger("transformers.generation.utils")
    notice_filter = _DropEosPrecedenceNotice()
    logger.addFilter(notice_filter)
    try:
        yield
    finally:
        logger.removeFilter(notice_filter)


class _RecorderStoppingCriteria(StoppingCriteria):
    """Per-row termination on EOS ids, stop strings and ``max_new_tokens``, kept by the recorder.

    Called once per step (by ``generate`` or the recorder's greedy loop), after the new token is
    appended; it also gathers the token's raw log-probability and sets which rows the hooks pool
    in the next forward.
    """

    def __init__(self, recorder: "HiddenStateRecorder"):
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        run = self.recorder._run
        if run is None:
            raise RuntimeError("recorder stopping criterion called outside HiddenStateRecorder.generate")
        token = input_ids[:, -1].to(run.device)
        if run.logits_next is None:
            raise RuntimeError("no logits were captured for this step; the model's forward hook did not run")
        logits = run.logits_next  # [rows in the forward, V]
        own = token if run.rows is None else token[run.rows]
        picked = logits.gather(1, own.to(logits.device).unsqueeze(1)).squeeze(1).float()
        logprob = (picked - run.logsumexp_next).to(run.device)
        if run.rows is not None:  # rows dropped from the forward are done: log-prob unused
            logprob = torch.zeros(run.batch_size, dtype=logprob.dtype,
                                  device=run.device).index_copy_(0, run.rows, logprob)
        run.logits_next = run.logsumexp_next = None
        active = ~run.done  # rows for which this token is a real generated token
        if run.step < run.tokens.shape[1]:
            run.tokens[:, run.step] = token
            run.logprobs[:, run.step] = logprob
        run.step += 1
        run.n_tokens += active

        is_eos = active & torch.isin(token, run.eos) if run.eos.numel() else torch.zeros_like(active)
        is_stop = torch.zeros_like(active)
        if run.stop_strings:
            stop_flags = [False] * run.batch_size
            tokens_now = token.tolist()
            active_now = active.tolist()
            eos_now = is_eos.tolist()
            for r in range(run.batch_size):
                if not active_now[r]:
                    continue
                run.cpu_tokens[r].append(tokens_now[r])
                if eos_now[r]:
                    continue
                text = run.tokenizer.decode(run.cpu_tokens[r], skip_special_tokens=True)
                stop_flags[r] = any(s in text for s in run.stop_strings)
            is_stop = torch.tensor(stop_flags, dtype=torch.bool, device=run.device)
        is_len = active & (run.n_tokens >= run.max_new_tokens)
        finishing = is_eos | is_stop | is_len
        stopped = run.stop_at_checkpoint(finishing)
        if stopped is not None:
            stopped &= active
            run.reason.masked_fill_(stopped, _REASON_STOPPED)
            finishing = finishing | stopped
        run.reason.masked_fill_(is_len, _REASON_LENGTH)
        run.reason.masked_fill_(is_stop, _REASON_STOP)
        run.reason.masked_fill_(is_eos, _REASON_EOS)
        run.done |= finishing

        if run.pool == "decoding":
            # The next forward decodes the next token of every still-running row.
            run.set_pooled(~run.done)
            return run.done.clone()
        # "generated": the next forward feeds this step's token; pool it for rows where it is real
        # and keep those rows alive for generate until that forward has happened.
        run.set_pooled(active)
        return ~active


class HiddenStateRecorder:
    """Context manager that pools every layer's hidden states inside ``model.generate``.

    ``pool`` is ``"decoding"`` or ``"generated"`` (see :mod:`acute.extraction`); ``dtype`` is the
    accumulation dtype of the running sums and of the last-prompt and last-answer states (float32
    or float64, also for half-precision models); each lives on the device of the layer it pools
    (models split with a ``device_map`` work). ``checkpoints`` (a
    :class:`~acute.store.checkpoints.Schedule`) also keeps each row's running means at the
    schedule's token counts (:attr:`RecordedBatch.checkpoint_means`; O(L x d) per row and
    checkpoint, taken as the answer is written); with ``on_checkpoint``
    (:data:`CheckpointCallback`, ``pool="decoding"`` only) a row it stops at a checkpoint ends
    there with the finish reason ``"stopped"``.
    On entering, a :class:`~acute.extraction.pooler.LayerPooler` hooks the first decoder layer
    (its input is index 0 and its output index 1), the other decoder layers but the last
    (indices 2..L-1) and the final norm (index L), and a forward hook on the model itself takes
    the raw logits. They are removed on exit, also when an exception is raised. Outside
    :meth:`generate` the hooks do nothing. The recorder itself only decides what is about
    generation: when each row stops, its tokens' log-probs and finish reason, and which rows the
    pooler pools in the next forward.

    Use::

        with HiddenStateRecorder(model) as rec:
            batch = rec.generate(input_ids, attention_mask, max_new_tokens=32, eos_token_ids=[2])
    """

    def __init__(self, model: nn.Module, pool: PoolMode = "decoding", dtype: torch.dtype = torch.float32,
                 checkpoints: Schedule | None = None, on_checkpoint: CheckpointCallback | None = None):
        self.model = model
        self.pool = pool
        self.dtype = dtype
        self.checkpoints = checkpoints
        self.on_checkpoint = on_checkpoint
        self._pooler: LayerPooler | None = None
        self._logits_handle: Any = None
        self._run: _Run | None = None
        self.layer_map: LayerMap | None = None

    # -- hooks -------------------------------------------------------------------------------

    def _logits_hook(self, module, args, output):
        run = self._run
        if run is None:
            return
        logits = getattr(output, "logits", None)
        if logits is None:
            logits = output[0] if isinstance(output, (tuple, list)) else output
        last = logits[:, -1, :]
        # Keep a view of the model's own logits (generate frees them after this step anyway) and
        # their log-normaliser; the token's log-prob is gathered once the token is known.
        run.logits_next = last
        run.logsumexp_next = torch.logsumexp(last.float(), dim=-1)
        run.forward_done()

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> "HiddenStateRecorder":
        if self.pool not in POOLS:
            raise InputError(f"pool must be one of {POOLS}, got {self.pool!r}")
        check_dtype(self.dtype)
        if self._pooler is not None:
            raise RuntimeError("HiddenStateRecorder is already active (not re-entrant)")
        if self.on_checkpoint is not None and (self.checkpoints is None or self.pool != "decoding"):
            raise InputError("on_checkpoint needs a checkpoint schedule and pool='decoding'")
        pooler = LayerPooler(self.model, dtype=self.dtype).__enter__()
        try:
            self._logits_handle = self.model.register_forward_hook(self._logits_hook)
        except BaseException:
            pooler.__exit__(None, None, None)
            raise
        self._pooler, self.layer_map = pooler, pooler.layer_map
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._remove()

    def _remove(self) -> None:
        if self._logits_handle is not None:
            self._logits_handle.remove()
            self._logits_handle = None
        if self._pooler is not None:
            self._pooler.__exit__(None, None, None)
            self._pooler = None
        self._run = None

    @property
    def active(self) -> bool:
        """Whether the hooks are attached."""
        return self._pooler is not None

    # -- generation --------------------------------------------------------------------------

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 max_new_tokens: int, eos_token_ids: Iterable[int] = (),
                 stop_strings: Sequence[str] = (), tokenizer: Any = None,
                 drop_finished: bool = True, **generate_kwargs: Any) -> RecordedBatch:
        """Generate for a left-padded batch and return what was recorded.

        ``eos_token_ids`` and ``stop_strings`` end a row (its final token is kept); stop strings
        are matched in the row's generated text decoded with ``skip_special_tokens=True`` and need
        ``tokenizer``. Other keyword arguments go to ``model.generate`` (``num_beams`` and
        ``num_return_sequences`` must be 1; ``max_length`` is not accepted).

        With ``drop_finished`` (default), plain greedy decoding (no sampling, no other
        ``generate`` arguments than the cache, ``pad_token_id`` and unset sampling parameters, and
        a model ``generation_config`` that sets nothing else, see :func:`plain_greedy`) runs in
        the recorder's own loop, which drops each row from the batch once it has finished: a
        batch then costs its rows' tokens rather than its longest row's tokens times the batch
        size. Tokens and recorded states are those of ``model.generate`` up to floating-point
        rounding. Anything else runs through ``model.generate``. Returns a
        :class:`RecordedBatch`. Raises ``RuntimeError`` if the recorder is not entered or if the
        hooks saw a different number of pooled states than generated tokens.
        """
        if self._pooler is None:
            raise RuntimeError("use HiddenStateRecorder as a context manager: `with HiddenStateRecorder(model) as rec:`")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        for key in ("num_beams", "num_return_sequences"):
            if generate_kwargs.get(key, 1) != 1:
                raise InputError(f"{key} must be 1 for recording, got {generate_kwargs[key]}")
        for key in ("max_length", "stop_strings", "stopping_criteria", "max_time",
                    "return_dict_in_generate", "output_hidden_states"):
            if key in generate_kwargs:
                raise InputError(f"{key!r} cannot be passed to HiddenStateRecorder.generate "
                                 "(the recorder decides when each row stops)")
        stop_strings = tuple(stop_strings)
        if stop_strings and tokenizer is None:
            raise InputError("stop_strings need a tokenizer")
        if any(not isinstance(s, str) or not s for s in stop_strings):
            raise InputError(f"stop_strings must be non-empty strings, got {stop_strings!r}")
        if input_ids.ndim != 2 or input_ids.shape[1] == 0:
            raise InputError(f"input_ids must be [batch, length>0], got shape {tuple(input_ids.shape)}")
        eos_ids = [int(i) for i in eos_token_ids]
        # The recorder decides EOS itself. An EosTokenCriteria that never fires replaces the one
        # generate would build from eos_token_id (user-given criteria of the same type take
        # precedence), so that logits processors such as min_new_tokens still know the EOS ids
        # while a row can be kept alive one step past its EOS in the "generated" mode.
        never = EosTokenCriteria(eos_token_id=torch.zeros(0, dtype=torch.long))
        criteria = StoppingCriteriaList([_RecorderStoppingCriteria(self), never])
        if eos_ids:
            generate_kwargs.setdefault("eos_token_id", eos_ids)
        if generate_kwargs.get("pad_token_id") is None:
            pad = (getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None)
            generate_kwargs["pad_token_id"] = pad if pad is not None else (eos_ids[0] if eos_ids else 0)

        device = model_device(self.model)
        input_ids = input_ids.to(device)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = attention_mask.to(device)
        self._run = _Run(self._pooler, input_ids.shape[0], device, self.pool, max_new_tokens,
                         eos_ids, stop_strings, tokenizer, self.checkpoints, self.on_checkpoint)
        extra = 1 if self.pool == "generated" else 0
        try:
            if drop_finished and plain_greedy(self.model, generate_kwargs):
                greedy_decode(self.model, self._run, input_ids, attention_mask, max_new_tokens + extra,
                              criteria[0], generate_kwargs)
            else:
                with torch.no_grad(), _quiet_eos_notice():
                    self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                        max_new_tokens=max_new_tokens + extra,
                                        stopping_criteria=criteria, **generate_kwargs)
            return self._collect()
        finally:
            self._pooler.set_weights(None)
            self._run = None

    def _collect(self) -> RecordedBatch:
        run, pooler = self._run, self._pooler
        assert run is not None and pooler is not None
        n_tokens = run.n_tokens.cpu().numpy()
        counts = run.counts.cpu().numpy()
        if not np.array_equal(n_tokens, counts):
            raise RuntimeError(
                f"recorder pooled {counts.tolist()} states for {n_tokens.tolist()} generated tokens; "
                "generate did not run the expected decoding steps (unsupported generation mode?)"
            )
        tokens = run.tokens.cpu().numpy()
        logprobs = run.logprobs.cpu().numpy()
        reasons = run.reason.cpu().tolist()
        layer_means = pooler.means(counts)
        ckpt_tokens = ckpt_means = None
        if run.checkpoints is not None:
            ckpt_tokens, ckpt_means = _checkpoints(run, counts, layer_means)
        # The only gathers: each layer's states, wherever they live, to the CPU in float64.
        return RecordedBatch(
            token_ids=[tokens[r, : n_tokens[r]].copy() for r in range(run.batch_size)],
            token_logprobs=[logprobs[r, : n_tokens[r]].copy() for r in range(run.batch_size)],
            layer_means=layer_means,
            last_prompt=pooler.states("last_prompt"),
            last_answer=pooler.states("last_answer"),
            counts=counts.astype(np.int64),
            finish_reasons=[_REASON_NAMES.get(c, "length") for c in reasons],
            checkpoint_tokens=ckpt_tokens,
            checkpoint_means=ckpt_means,
        )

    def state_nbytes(self) -> int:
        """Bytes of the tensors the recorder holds for the current batch: running sums, last
        prompt and last pooled states and the pooler's weights and picks, counts, masks, the
        latest log-normaliser and the preallocated [B, max_new_tokens + 1] token and log-prob
        buffers (the logits it references belong to the model's output). Fixed for a given
        batch and ``max_new_tokens``, i.e. it does not grow while tokens are generated; 0
        outside a generate call."""
        run = self._run
        if run is None:
            return 0
        tensors = [run.counts, run.pooled, run.done, run.n_tokens, run.reason, run.eos,
                   run.tokens, run.logprobs]
        if run.logsumexp_next is not None:
            tensors.append(run.logsumexp_next)
        return run.pooler.nbytes() + int(sum(t.numel() * t.element_size() for t in tensors))


def _checkpoints(run: _Run, counts: np.ndarray, layer_means: np.ndarray) -> tuple[list, list]:
    """Each row's checkpoint token counts and means: the snapshots the schedule took below its
    length, then its final means (the snapshot at the final token, when one was taken, is the
    same sum over the same states)."""
    tokens, means = [], []
    for r in range(run.batch_size):
        want = checkpoint_counts(int(counts[r]), run.checkpoints)
        taken = {k: m for k, m in run.snapshots[r]}
        if any(int(k) not in taken for k in want[:-1]):
            raise RuntimeError(f"row {r}: the recorder took checkpoints at {sorted(taken)} but its "
                               f"{int(counts[r])} pooled states need {want.tolist()}")
        rows = [taken[int(k)] for k in want[:-1]] + [layer_means[r]]
        tokens.append(want)
        means.append(np.stack(rows) if rows else np.zeros((0, *layer_means.shape[1:]), np.float32))
    return tokens, means

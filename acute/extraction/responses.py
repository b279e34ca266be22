"""Teacher-forced recording: the recorder's pooled states, token log-probs and raw confidence for
responses produced elsewhere (another serving engine, logs), from one forward pass per record.

The states the recorder pools while a model generates are those a single causal forward pass
over ``prompt + response`` computes at the same positions: the KV cache only saves recomputing
the prefix. :func:`record_responses` runs that pass in batches (prompts sharing a prefix start
from one KV cache of it, as in :func:`acute.extraction.generate_and_record`) with the
recorder's :class:`~acute.extraction.pooler.LayerPooler` (weights over the fed positions), and
returns the recorder's :class:`Generation` objects. For the tokens the model generated greedily
the result equals what the recorder returned while generating, up to float rounding (tested on
every tiny architecture and on SmolLM2).

Responses as text or as token ids
    A token-id response (a 1-D integer array or list) is taken as the complete generated
    sequence, its final EOS / stop-string token included, exactly as in ``Generation.token_ids``;
    nothing is appended. A text response is tokenized on its own (``add_special_tokens=False``,
    as the model would have generated it after the prompt's last token) and, by default, the
    EOS token the model finds most likely after it is appended (``append_eos``), because a
    finished answer ends with EOS in the recorder's records too (its log-prob is part of the raw
    confidence; the text has it stripped). For a greedy answer that ended with EOS this is the
    EOS the recorder recorded.

When a text re-tokenizes differently
    A text has many tokenizations and the tokenizer returns its canonical one. A sampled
    answer, or one from an engine with another tokenizer, may have been produced as other
    tokens; the forced record then holds the canonical tokens: other positions are pooled and
    the raw confidence is that of the canonical sequence (usually close, not equal). Pass the
    engine's token ids when they are this model's ids and known. A tokenizer that cannot
    represent the text (decoding the ids does not give the text back, e.g. characters its
    vocabulary lacks) is logged as a warning with the number of such responses.
    ``acute rerecord`` uses the token ids stores record; for older stores without them it
    re-tokenizes and counts the records whose tokens changed.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from torch import nn

from ..fileio import progress as _progress
from ..errors import InputError
from ..store.generation import BATCH_SIZE
from .batching import (
    MIN_SHARED_PREFIX,
    cache_keyword,
    check_strings,
    cut_at_stop,
    left_pad,
    pad_after_prefix,
    padding_id,
    prefill,
    prefix_batches,
    resolve_eos,
    split_batches,
    tokenize,
    window_allows_prefix_cache,
    within_context_window,
)
from .generate import Generation
from ..store.pooling import POOLS, PoolMode
from .layers import forward_accepts, model_device
from .pooler import LayerPooler, check_dtype

logger = logging.getLogger(__name__)

__all__ = ["record_responses", "response_token_ids"]


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def response_token_ids(tokenizer: Any, responses: Sequence[Any]) -> tuple[list[list[int]], list[bool]]:
    """``(ids, given)``: each response's token ids and whether they were given as ids.

    A ``str`` is tokenized with ``add_special_tokens=False``; a 1-D integer array or list is
    taken as is. Raises :class:`InputError` naming the index for anything else.
    """
    if isinstance(responses, str):
        raise InputError("responses must be a list of strings or token-id arrays, not a single string")
    responses = list(responses)
    texts = {i: r for i, r in enumerate(responses) if isinstance(r, str)}
    encoded = dict(zip(texts, tokenize(tokenizer, list(texts.values()))))
    ids: list[list[int]] = []
    given: list[bool] = []
    for i, r in enumerate(responses):
        if i in encoded:
            ids.append(encoded[i])
            given.append(False)
            continue
        arr = np.asarray(r)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InputError(f"responses[{i}] must be a str or a 1-D array of token ids, got "
                             f"{type(r).__name__} {getattr(arr, 'shape', '')}")
        ids.append([int(t) for t in arr])
        given.append(True)
    return ids, given


def _append_flags(append_eos: bool | Sequence[bool] | None, given: Sequence[bool],
                  ids: Sequence[Sequence[int]], eos_ids: Sequence[int]) -> list[bool]:
    """Per response: whether the most likely EOS is appended (never after an EOS id)."""
    if append_eos is None:
        flags = [not g for g in given]
    elif isinstance(append_eos, (bool, np.bool_)):
        flags = [bool(append_eos)] * len(given)
    else:
        flags = [bool(a) for a in append_eos]
        if len(flags) != len(given):
            raise InputError(f"append_eos has {len(flags)} entries for {len(given)} responses")
    eos = set(eos_ids)
    if any(flags) and not eos:
        raise InputError("append_eos needs EOS ids: the model and tokenizer name none; pass "
                         "eos_token_ids or append_eos=False")
    return [f and not (seq and seq[-1] in eos) for f, seq in zip(flags, ids)]


def _warn_lossy(tokenizer: Any, responses: Sequence[Any], ids: Sequence[Sequence[int]],
                given: Sequence[bool]) -> None:
    lossy = [i for i, (r, seq, g) in enumerate(zip(responses, ids, given))
             if not g and tokenizer.decode(seq, skip_special_tokens=False) != r]
    if lossy:
        logger.warning("%d response text(s) do not decode back from their tokens (first: "
                       "responses[%d]); the tokenizer cannot represent them exactly, so the record "
                       "is of the tokens it produced", len(lossy), lossy[0])


def _plan(p_ids: Sequence[Sequence[int]], total: Sequence[int], keep: Sequence[int],
          batch_size: int, reuse_prefix: bool) -> list[tuple[list[int], list[int] | None]]:
    """Batches (longest first, see :func:`split_batches`) and the prompt prefix each may start from.

    With ``reuse_prefix`` prompts are grouped by their shared prefix as in
    :func:`generate_and_record` (:func:`prefix_batches`; the prefix always leaves each prompt an
    own token, where pooling starts); within a group records are re-sorted by prompt + response
    length, since the whole record runs in one pass.
    """
    if not reuse_prefix:
        order = sorted(keep, key=lambda i: -total[i])
        return [(batch, None) for batch in split_batches(order, total, batch_size)]
    runs: list[tuple[list[int], list[int]]] = []
    for batch, prefix in prefix_batches(p_ids, keep, batch_size):
        if runs and runs[-1][0] == prefix:
            runs[-1][1].extend(batch)
        else:
            runs.append((prefix, list(batch)))
    planned: list[tuple[list[int], list[int] | None]] = []
    for prefix, members in runs:
        members.sort(key=lambda i: -total[i])
        own = {i: total[i] - len(prefix) for i in members}  # the positions a batch computes
        planned += [(batch, prefix) for batch in split_batches(members, own, batch_size)]
    return planned


# --------------------------------------------------------------------------------------------
# the forward pass of one batch
# --------------------------------------------------------------------------------------------


class _Prefix:
    """The KV cache of the latest shared prefix (consecutive batches often share it)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.ids: list[int] = []
        self.cache = None

    def copy_for(self, prefix: Sequence[int], rows: int):
        if list(prefix) != self.ids:
            self.ids, self.cache = list(prefix), prefill(self.model, prefix)
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(rows)
        return cache


def _batch_positions(known: Sequence[int], pending: Sequence[bool], width: int, past: int,
                     pool: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(weights, picks)`` over the fed columns (``width - past``) of right-aligned rows.

    Row ``r`` feeds ``prompt + known[r]`` tokens ending at column ``width - 1``. ``weights``
    [b, width - past] of 0/1: ``"decoding"`` pools the states that decode each token: the last
    prompt position and every response position before the final token (the final known
    token's own position when an EOS follows it). ``"generated"`` pools the known tokens' own
    positions (a pending EOS is fed and pooled in one more step). ``picks``: int64[b] columns of
    ``"last_prompt"`` (the prompt's last token) and ``"last_answer"`` (the row's last pooled
    column; for a pending EOS in ``"generated"`` the step feeding it replaces it).
    """
    w = torch.zeros((len(known), width - past))
    last = []
    for r, (n, p) in enumerate(zip(known, pending)):
        if pool == "decoding":
            start, stop = width - n - 1, width - 1 + int(p)
        else:
            start, stop = width - n, width
        w[r, start - past: stop - past] = 1.0
        last.append(stop - 1 - past)
    prompt = [width - n - 1 - past for n in known]
    return w, {"last_prompt": torch.tensor(prompt), "last_answer": torch.tensor(last)}


def _forced_batch(model: nn.Module, pooler: LayerPooler, seqs: Sequence[tuple[list[int], list[int], bool]],
                  prefix: list[int] | None, prefixes: _Prefix, pad_id: int, eos_ids: Sequence[int],
                  pool: str) -> list[tuple[np.ndarray, ...]]:
    """Record one batch of ``(prompt ids, known response ids, pending EOS)`` rows.

    Returns, per row, ``(token_ids int64[T], token_logprobs float32[T], layer_means,
    last_prompt, last_answer)`` (the last three float32[L+1, d]).
    One forward pass over ``prompt + known`` (from a copy of the prefix's KV cache when
    ``prefix``), plus, for ``pool="generated"`` rows whose EOS is appended, one step feeding it.
    """
    device = model_device(model)
    key = cache_keyword(model)
    rows = len(seqs)
    full = [p + k for p, k, _ in seqs]
    known = [len(k) for _, k, _ in seqs]
    pending = [e for _, _, e in seqs]
    cache = None
    if prefix:
        ids, mask = pad_after_prefix(full, len(prefix), pad_id)
        cache = prefixes.copy_for(prefix, rows)
    else:
        ids, mask = left_pad(full, pad_id)
    past = len(prefix) if prefix else 0
    width = ids.shape[1]
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    extra_step = pool == "generated" and any(pending)
    keep = max(n + 1 for n in known)  # logits predicting each known token and a pending EOS
    kwargs: dict[str, Any] = {"input_ids": ids[:, past:], "attention_mask": mask,
                              "use_cache": cache is not None or extra_step}
    if cache is not None:
        kwargs[key] = cache
    if forward_accepts(model, "position_ids"):
        kwargs["position_ids"] = positions[:, past:]
    if forward_accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = keep
    pooler.reset(rows)
    weights, picks = _batch_positions(known, pending, width, past, pool)
    pooler.set_weights(weights.to(device), picks={k: v.to(device) for k, v in picks.items()})
    with torch.no_grad():
        out = model(**kwargs)
        pooler.set_weights(None)
        logits = out.logits[:, -keep:, :]
        tokens, logprobs = [], []
        for r, (_, k, p) in enumerate(seqs):
            n = len(k)
            span = logits[r, keep - n - 1: keep - 1 + int(p)]  # [T, V]; row j predicts token j
            seq = list(k)
            if p:  # the EOS this model finds most likely after the response
                eos_logits = span[-1, list(eos_ids)]
                seq.append(int(eos_ids[int(torch.argmax(eos_logits))]))
            target = torch.tensor(seq, dtype=torch.long, device=span.device)
            picked = span.gather(1, target[:, None]).squeeze(1).float()
            lp = picked - torch.logsumexp(span.float(), dim=-1)
            tokens.append(np.asarray(seq, dtype=np.int64))
            logprobs.append(lp.cpu().numpy().astype(np.float32))
        if extra_step:
            _feed_eos(model, pooler, out, key, mask, positions, tokens, pending)
    means = pooler.means([len(t) for t in tokens])
    last_prompt, last_answer = pooler.states("last_prompt"), pooler.states("last_answer")
    return [(tokens[r], logprobs[r], means[r], last_prompt[r], last_answer[r]) for r in range(rows)]


def _feed_eos(model: nn.Module, pooler: LayerPooler, out: Any, key: str, mask: torch.Tensor,
              positions: torch.Tensor, tokens: Sequence[np.ndarray], pending: Sequence[bool]) -> None:
    """``pool="generated"``: feed the appended EOS of the ``pending`` rows with the KV cache and
    pool its states, also these rows' last pooled ones (the recorder's extra decoding step)."""
    device = mask.device
    cache = out.cache if key == "cache" else out.past_key_values
    sel = torch.tensor([r for r, p in enumerate(pending) if p], dtype=torch.long, device=device)
    if sel.numel() < len(pending):
        cache.batch_select_indices(sel)
    step = torch.tensor([[int(tokens[r][-1])] for r in sel.tolist()], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {"input_ids": step, key: cache, "use_cache": True,
                              "attention_mask": torch.cat([mask[sel], mask.new_ones((len(sel), 1))], 1)}
    if forward_accepts(model, "position_ids"):
        kwargs["position_ids"] = positions[sel, -1:] + 1
    if forward_accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    pooler.set_weights(torch.ones((len(sel), 1), device=device), rows=sel,
                       picks={"last_answer": torch.zeros(len(sel), dtype=torch.long, device=device)})
    try:
        model(**kwargs)
    finally:
        pooler.set_weights(None)


# --------------------------------------------------------------------------------------------
# the public function
# --------------------------------------------------------------------------------------------


def _finish(tokenizer: Any, tokens: np.ndarray, eos: set, stop_strings: Sequence[str]) -> tuple[str, str]:
    """``(text, finish_reason)`` as the recorder reports them for these tokens."""
    text = tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
    if tokens.size and int(tokens[-1]) in eos:
        return text, "eos"
    if stop_strings and any(s in text for s in stop_strings):
        return cut_at_stop(text, stop_strings), "stop"
    return text, "length"


# Long because of its docstring and argument checks; the pass itself is _forced_batch.
def record_responses(model: nn.Module, tokenizer: Any, prompts: Sequence[str], responses: Sequence[Any], *,
                     pool: PoolMode = "decoding", batch_size: int = BATCH_SIZE,
                     append_eos: bool | Sequence[bool] | None = None,
                     eos_token_ids: Sequence[int] | None = None, stop_strings: Sequence[str] = (),
                     on_too_long: Literal["skip", "error"] = "skip", reuse_prefix: bool = True,
                     progress: bool = False, on_batch: Callable[[int], None] | None = None,
                     dtype: torch.dtype = torch.float32) -> list[Generation | None]:
    """Record given responses as the recorder records generations, by teacher forcing.

    ``prompts`` are fully formatted prompts (tokenized with ``add_special_tokens=False``, as in
    :func:`generate_and_record`); ``responses`` are texts or token-id arrays (see the module
    docstring). ``append_eos``: ``None`` (default) appends the most likely EOS id to text
    responses and nothing to token ids; a bool or one bool per response decides for each (never
    after a response that already ends with an EOS id). ``eos_token_ids`` default to
    ``acute.models.prompts.eos_token_ids(model, tokenizer)``; ``stop_strings`` only decide the
    ``"stop"`` finish reason and the text cut, as in the recorder.

    Returns one :class:`Generation` per pair in input order (``None`` for skipped ones):
    ``token_ids`` (the response's tokens, the appended EOS included), ``token_logprobs`` (raw
    ``log_softmax`` of the model's logits at each token), ``layer_means`` pooled over exactly
    the recorder's positions for ``pool`` (``"decoding"`` or ``"generated"``; index 0 = the
    embedding output, ``L`` = the final norm's output), ``last_prompt`` and ``last_answer`` (the
    states at the prompt's last token and at the last pooled position, as the recorder keeps
    them), ``raw_confidence``, ``prompt_tokens``,
    ``finish_reason`` (``"eos"`` when the tokens end with an EOS id, ``"stop"`` when their text
    holds a stop string, else ``"length"``) and ``text`` (decoded with special tokens skipped).

    Batches of at most ``batch_size`` records (longest first, closed early rather than padded
    beyond :data:`MAX_PADDING`) run one forward pass each; with ``reuse_prefix``
    prompts sharing a prefix of at least :data:`MIN_SHARED_PREFIX` tokens start from one KV cache
    of it (not when a sliding attention window is shorter than the record). A pair longer than
    the context window is skipped (``None``, one warning) or, with ``on_too_long="error"``, an
    :class:`InputError` naming its index before anything runs. Raises :class:`InputError` for an
    empty prompt, a response with no tokens (an empty text with ``append_eos=False``),
    mismatched lengths or a bad argument.
    """
    prompts = check_strings(prompts, "prompts")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if pool not in POOLS:
        raise InputError(f"pool must be one of {POOLS}, got {pool!r}")
    check_dtype(dtype)
    stop_strings = tuple(check_strings(stop_strings, "stop_strings"))
    r_ids, given = response_token_ids(tokenizer, responses)
    if len(r_ids) != len(prompts):
        raise InputError(f"prompts ({len(prompts)}) and responses ({len(r_ids)}) differ in length")
    eos_ids = list(eos_token_ids) if eos_token_ids is not None else resolve_eos(model, tokenizer)
    pending = _append_flags(append_eos, given, r_ids, eos_ids)
    p_ids = tokenize(tokenizer, prompts)
    for i, (p, k, e) in enumerate(zip(p_ids, r_ids, pending)):
        if not p:
            raise InputError(f"prompts[{i}] is empty; the first response token needs a context")
        if not k and not e:
            raise InputError(f"responses[{i}] is empty (no tokens, and no EOS is appended)")
    total = [len(p) + len(k) + int(e) for p, k, e in zip(p_ids, r_ids, pending)]
    keep = within_context_window(
        model, total, on_too_long,
        lambda i, limit: (f"prompts[{i}] + responses[{i}] has {total[i]} tokens, more than the "
                          f"context window of {limit}"))
    _warn_lossy(tokenizer, responses, r_ids, given)
    planned = _plan(p_ids, total, keep, batch_size, reuse_prefix)
    pad_id = padding_id(tokenizer, eos_ids)
    eos = set(eos_ids)
    prefixes = _Prefix(model)
    results: list[Generation | None] = [None] * len(prompts)
    with LayerPooler(model, dtype=dtype) as pooler:
        for batch, prefix in _progress(planned, len(planned), progress, "record"):
            use_prefix = (prefix is not None and len(prefix) >= MIN_SHARED_PREFIX
                          and window_allows_prefix_cache(model, max(total[i] for i in batch)))
            recorded = _forced_batch(model, pooler, [(p_ids[i], r_ids[i], pending[i]) for i in batch],
                                     prefix if use_prefix else None, prefixes, pad_id, eos_ids, pool)
            for i, (tokens, logprobs, means, last_prompt, last_answer) in zip(batch, recorded):
                text, reason = _finish(tokenizer, tokens, eos, stop_strings)
                results[i] = Generation(text=text, token_ids=tokens, token_logprobs=logprobs,
                                        layer_means=means, last_prompt=last_prompt,
                                        last_answer=last_answer, prompt_tokens=len(p_ids[i]),
                                        finish_reason=reason)
            if on_batch is not None:
                on_batch(len(batch))
    return results

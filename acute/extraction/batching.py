"""Batch planning: left padding, length-sorted batches, shared-prompt-prefix groups and their KV cache."""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..errors import InputError
from ..models.prompts import eos_token_ids
from .layers import context_window, forward_accepts, model_device

__all__ = ["MAX_PADDING", "MIN_SHARED_PREFIX", "batch_order", "cache_keyword", "check_strings", "cut_at_stop",
           "encode_prompts", "left_pad", "length_blocks", "pad_after_prefix", "padding_id", "prefill",
           "prefix_batches", "resolve_eos", "shared_prefix", "split_batches", "tokenize",
           "window_allows_prefix_cache", "within_context_window"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# High-level API
# --------------------------------------------------------------------------------------------




def batch_order(lengths: Sequence[int], batch_size: int, sort_by_length: bool = True
                ) -> list[list[int]]:
    """Split the indices of ``lengths`` into batches of ``batch_size`` (the last may be shorter).

    With ``sort_by_length`` the indices are ordered longest first (ties keep input order), so each
    batch holds prompts of similar length and little padding; otherwise they keep input order.
    """
    order = list(range(len(lengths)))
    if sort_by_length:
        order.sort(key=lambda i: -lengths[i])
    return [order[k: k + batch_size] for k in range(0, len(order), batch_size)]


#: Shortest shared token prefix that :func:`generate_and_record` runs once and reuses.
MIN_SHARED_PREFIX = 8
#: Tokens after the common prefix of all prompts that decide a prompt's batching group.
PREFIX_GROUP_DEPTH = 32


def shared_prefix(seqs: Sequence[Sequence[int]]) -> list[int]:
    """The longest common token prefix of ``seqs``, leaving every sequence at least one own token
    (its last prompt position is where pooling and the first generated token start)."""
    if not seqs:
        return []
    first = seqs[0]
    n = min(len(s) for s in seqs) - 1
    for s in seqs[1:]:
        k = 0
        while k < n and s[k] == first[k]:
            k += 1
        n = k
    return list(first[:max(n, 0)])


def prefix_batches(encoded: Sequence[Sequence[int]], keep: Sequence[int],
                    batch_size: int) -> list[tuple[list[int], list[int]]]:
    """``(batch, prefix)`` pairs for the shared-prefix path of :func:`generate_and_record`.

    Prompts (indices ``keep`` into ``encoded``) that agree on the first
    :data:`PREFIX_GROUP_DEPTH` tokens after the prefix all of them share form a group (e.g. one
    subject's few-shot demonstrations); every group of two or more gets its own batches, the
    remaining prompts are batched together. Within each, prompts run longest first (little
    padding) and every batch caches the prefix its whole group shares, so a group needs one
    prefill however many batches it spans.
    """
    depth = len(shared_prefix([encoded[i] for i in keep])) + PREFIX_GROUP_DEPTH
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in keep:
        groups.setdefault(tuple(encoded[i][:depth]), []).append(i)
    runs = [g for g in groups.values() if len(g) > 1]
    runs.append([i for g in groups.values() if len(g) == 1 for i in g])
    planned = []
    for run in runs:
        if not run:
            continue
        prefix = shared_prefix([encoded[i] for i in run])
        run = sorted(run, key=lambda i: -len(encoded[i]))
        planned += [(run[k: k + batch_size], prefix) for k in range(0, len(run), batch_size)]
    return planned


def window_allows_prefix_cache(model: nn.Module, length: int) -> bool:
    """False when a sliding attention window shorter than ``length`` would see the padding placed
    after the shared prefix (it counts positions, not real tokens)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    window = getattr(config, "sliding_window", None)
    return not (isinstance(window, int) and 0 < window < length)


def cache_keyword(model: nn.Module) -> str:
    """transformers >= 5.2x names the KV cache argument ``cache``; older releases
    ``past_key_values``."""
    return "cache" if forward_accepts(model, "cache") else "past_key_values"


#: ``generation_config`` fields that leave greedy decoding as it is (ids, output switches,
#: sampling-only settings); any other field set makes the recorder use ``model.generate``.


def prefill(model: nn.Module, prefix: Sequence[int]):
    """The KV cache of one forward pass over ``prefix`` (batch of one)."""
    ids = torch.tensor([list(prefix)], dtype=torch.long, device=model_device(model))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True,
                    **({"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}))
    return out.cache if cache_keyword(model) == "cache" else out.past_key_values


def pad_after_prefix(seqs: Sequence[Sequence[int]], n_prefix: int,
                      pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``prefix + padding + own tokens`` (the prefix is cached, the own tokens end aligned,
    as with left padding) as ``(input_ids, attention_mask)``."""
    ids, mask = left_pad([s[n_prefix:] for s in seqs], pad_id)
    head = torch.tensor([list(seqs[0][:n_prefix])], dtype=torch.long).expand(len(seqs), -1)
    return (torch.cat([head, ids], 1),
            torch.cat([torch.ones((len(seqs), n_prefix), dtype=torch.long), mask], 1))


def resolve_eos(model: nn.Module, tokenizer: Any) -> list[int]:
    return eos_token_ids(model, tokenizer)


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)`` long tensors."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[r, width - len(s):] = 1
    return ids, mask


def padding_id(tokenizer: Any, eos_ids: Sequence[int]) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return int(eos_ids[0]) if eos_ids else 0


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def check_strings(values: Any, name: str) -> list[str]:
    if isinstance(values, str):
        raise InputError(f"{name} must be a list of strings, not a single string")
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InputError(f"{name}[{i}] must be a str, got {type(v).__name__}")
    return values


#: What to do with a record longer than the model's context window: skip it or fail.
ON_TOO_LONG = ("skip", "error")


def within_context_window(model: nn.Module, lengths: Sequence[int], on_too_long: str,
                          describe: Callable[[int, int], str], stacklevel: int = 3) -> list[int]:
    """The indices of ``lengths`` (positions each record needs) that fit the model's context
    window (:func:`~acute.extraction.layers.context_window`; all of them when it is unknown).

    For a record that does not fit, ``describe(index, window)`` says why: with
    ``on_too_long="skip"`` it is left out with a ``UserWarning`` of that message (pointing at
    the caller's caller, i.e. the public function's), with ``"error"`` the first one raises
    :class:`InputError` with it. Raises :class:`InputError` for another ``on_too_long``.
    ``stacklevel``: the warning's, for callers one level deeper.
    """
    if on_too_long not in ON_TOO_LONG:
        raise InputError(f"on_too_long must be 'skip' or 'error', got {on_too_long!r}")
    limit = context_window(model)
    keep: list[int] = []
    for i, n in enumerate(lengths):
        if limit is not None and n > limit:
            message = describe(i, limit)
            if on_too_long == "error":
                raise InputError(message)
            warnings.warn(message + "; skipped (None in the result)", UserWarning, stacklevel=stacklevel)
            continue
        keep.append(i)
    return keep


def cut_at_stop(text: str, stop_strings: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop_strings if s in text]
    return text[: min(cuts)] if cuts else text


#: Largest share of padding in a batch's positions: a forced pass computes every position, so a
#: batch is closed early rather than padding its rows beyond this (measured on SciTLDR with
#: SmolLM2 on a CPU: 16 rows of 160-400 tokens in one batch took 1.7x as long as in batches
#: within this bound).
MAX_PADDING = 0.2


def split_batches(order: Sequence[int], length: Sequence[int], batch_size: int) -> list[list[int]]:
    """Consecutive batches of ``order`` (longest first) of at most ``batch_size`` rows whose
    padded positions exceed their tokens by at most :data:`MAX_PADDING` (a row longer than
    that allows starts a new batch)."""
    batches: list[list[int]] = []
    tokens = 0
    for i in order:
        batch = batches[-1] if batches else None
        if (batch is None or len(batch) == batch_size
                or (len(batch) + 1) * length[batch[0]] > (1 + MAX_PADDING) * (tokens + length[i])):
            batches.append([i])
            tokens = length[i]
        else:
            batch.append(i)
            tokens += length[i]
    return batches


#: What one more forward pass costs beyond its positions, in positions: a CPU reads every weight
#: once per pass, 30-40 positions' worth for SmolLM2 on one thread (a decoding step's time minus
#: its rows' share). :func:`length_blocks` weighs padding against it.
PASS_OVERHEAD = 32


def length_blocks(widths: Sequence[int], overhead: int = PASS_OVERHEAD) -> list[list[int]]:
    """Split rows of ``widths`` (sorted longest first) into consecutive blocks, each padded to
    its first row's width, minimising the positions computed plus ``overhead`` per block
    (dynamic programming over the cut points; :func:`split_batches` is the rule for
    whole records, whose batches also cap the rows). Returns lists of row indices, in order."""
    n = len(widths)
    if any(widths[j] < widths[j + 1] for j in range(n - 1)):
        raise InputError("length_blocks: widths must be sorted longest first")
    best = [0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for k in range(1, n + 1):
        for j in range(k):
            cost = best[j] + overhead + (k - j) * widths[j]
            if cost < best[k]:
                best[k], cut[k] = cost, j
    blocks: list[list[int]] = []
    k = n
    while k > 0:
        blocks.append(list(range(cut[k], k)))
        k = cut[k]
    return blocks[::-1]


def encode_prompts(model: nn.Module, tokenizer: Any, prompts: Sequence[str], reserve: int,
                   on_too_long: str) -> tuple[list[list[int]], list[int]]:
    """``(token ids of every prompt, indices of those that fit)``: each prompt tokenized
    (:func:`tokenize`), an empty one refused naming its index, and the ones whose length plus
    ``reserve`` positions (the new tokens to come) exceed the context window skipped or refused
    as :func:`within_context_window` does, the message naming the index, its length and the window."""
    encoded = tokenize(tokenizer, prompts)
    for i, ids in enumerate(encoded):
        if not ids:
            raise InputError(f"prompts[{i}] is empty (tokenizes to no tokens)")
    keep = within_context_window(
        model, [len(ids) + reserve for ids in encoded], on_too_long,
        lambda i, limit: (f"prompts[{i}] has {len(encoded[i])} tokens"
                          + (f"; with max_new_tokens={reserve} it exceeds" if reserve else ", more than")
                          + f" the context window of {limit} positions"), stacklevel=4)
    return encoded, keep

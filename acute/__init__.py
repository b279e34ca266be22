"""acute: can this language-model answer be trusted?

Public entry points are imported lazily so that ``import acute`` stays fast:
``load_model``, ``format_prompt``, ``model_fingerprint``, ``weights_digest`` (models),
``generate_and_record``, ``HiddenStateRecorder`` (extraction), ``open_store``, ``verify_store``,
``StoreWriter``, ``ModelIdentity`` (store), ``get_task`` (tasks), ``ActivationProbe``, ``load_probe``
(estimators), ``Scorer`` (scoring), and the packages ``metrics`` and ``protocol``. These
shortcuts are the only names with two public homes (``acute.open_store`` is
``acute.store.open_store``); docs/api.md lists every package's public names.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "load_model": "models",
    "format_prompt": "models",
    "model_fingerprint": "models",
    "weights_digest": "models",
    "verify_store": "store",
    "generate_and_record": "extraction",
    "HiddenStateRecorder": "extraction",
    "open_store": "store",
    "StoreWriter": "store",
    "ModelIdentity": "store",
    "get_task": "tasks",
    "ActivationProbe": "estimators",
    "load_probe": "estimators",
    "Scorer": "scoring",
}
#: attribute -> subpackage, loaded on first use (``acute.metrics``)
_SUBMODULES = {"metrics": "metrics", "protocol": "protocol"}

__all__ = sorted(_LAZY) + sorted(_SUBMODULES)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    raise AttributeError(f"module 'acute' has no attribute {name!r}")

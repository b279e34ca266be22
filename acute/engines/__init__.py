"""Inference engines that generate acute's records: transformers (acute's own recorder,
:mod:`acute.extraction`) or vLLM (:mod:`acute.engines.vllm`, its pooling connector running
inside vLLM's processes, :mod:`acute.engines.vllm_connector`).

:func:`open_engine` gives one ``generate(prompts, **settings)`` for either, returning
:func:`acute.extraction.generate_and_record`'s list of :class:`~acute.extraction.Generation`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from ..errors import InputError

__all__ = ["DEFAULT_ENGINE", "ENGINES", "check_engine", "open_engine"]

#: The engines a collection can run on.
ENGINES: tuple[str, ...] = ("transformers", "vllm")
DEFAULT_ENGINE = "transformers"


def check_engine(engine: Any) -> Any:
    """``engine`` if it is one of :data:`ENGINES` or a started engine (a
    :class:`~acute.engines.vllm.VllmEngine`), else :class:`InputError` naming them."""
    if isinstance(engine, str) and engine in ENGINES:
        return engine
    if not isinstance(engine, str) and callable(getattr(engine, "generate", None)):
        return engine
    raise InputError(f"engine must be one of {', '.join(ENGINES)} or a started VllmEngine, got {engine!r}")


@contextlib.contextmanager
def open_engine(engine: Any, model: Any, tokenizer: Any,
                options: dict | None = None) -> Iterator[Callable[..., list]]:
    """A ``generate(prompts, **settings)`` on ``engine`` for ``model`` (a loaded transformers
    model: what transformers runs, and for vLLM where its saved folder is and its context
    window); ``options`` go to :class:`acute.engines.vllm.VllmEngine`. The vLLM worker process
    lives as long as the context; a started engine (``engine`` a ``VllmEngine``) is used as it
    is and left running."""
    check_engine(engine)
    if not isinstance(engine, str):
        yield lambda prompts, **settings: engine.generate(tokenizer, prompts, model=model, **settings)
        return
    if engine == "transformers":
        from ..extraction import generate_and_record

        yield lambda prompts, **settings: generate_and_record(model, tokenizer, prompts, **settings)
        return
    from .vllm import VllmEngine, model_folder

    dtype = str(getattr(model, "dtype", "float32")).replace("torch.", "")
    with VllmEngine(model_folder(model), dtype=dtype, **(options or {})) as vllm_engine:
        yield lambda prompts, **settings: vllm_engine.generate(tokenizer, prompts, model=model, **settings)

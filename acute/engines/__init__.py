"""Inference engines that generate acute's records: transformers (acute's own recorder,
:mod:`acute.extraction`) or vLLM (:mod:`acute.engines.vllm`, its pooling connector running
inside vLLM's processes, :mod:`acute.engines.vllm_connector`).

:func:`open_engine` gives one ``generate(prompts, settings, **options)`` for either
(``settings``: :class:`~acute.store.generation.GenerationSettings`), returning
:func:`acute.extraction.generate_with`'s list of :class:`~acute.extraction.Generation`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..errors import InputError
from ..store.identity import DEFAULT_ENGINE  # the one default: a store or probe without an engine ran on it
from .vllm import VllmEngine, model_folder

__all__ = ["DEFAULT_ENGINE", "ENGINES", "Generator", "open_engine"]

#: The engines a collection can run on.
ENGINES: tuple[str, ...] = ("transformers", "vllm")


def check_engine(engine: Any) -> Any:
    """``engine`` if it is one of :data:`ENGINES` or a started engine (a
    :class:`~acute.engines.vllm.VllmEngine`), else :class:`InputError` naming them."""
    if isinstance(engine, str) and engine in ENGINES:
        return engine
    if not isinstance(engine, str) and callable(getattr(engine, "generate", None)):
        return engine
    raise InputError(f"engine must be one of {', '.join(ENGINES)} or a started VllmEngine, got {engine!r}")


def transformers_version() -> str:
    """The version of the transformers engine as a validity domain records it: transformers' and
    torch's (``"4.57.1 (torch 2.8.0)"``): the kernels that compute the states are torch's."""
    import torch  # heavy: torch
    import transformers  # heavy: transformers

    return f"{transformers.__version__} (torch {torch.__version__})"


def engine_record(engine: Any = None) -> dict:
    """``{"engine", "engine_version"}`` of what generates: None for acute's transformers recorder
    (:func:`transformers_version`), else a started vLLM engine (its ``info["vllm_version"]``;
    None until it has started)."""
    if engine is None or engine == "transformers":
        return {"engine": "transformers", "engine_version": transformers_version()}
    return {"engine": "vllm", "engine_version": (getattr(engine, "info", None) or {}).get("vllm_version")}


@dataclass(frozen=True)
class Generator:
    """A started engine's ``generate(prompts, settings, **options)`` (call it), with what runs it:
    ``engine`` (``"transformers"``, ``"vllm"``) and ``version`` (None when unknown); ``record``
    is how a store manifest names them. ``sample(prompts, keys, settings, **options)``, when the
    engine draws samples (:func:`acute.extraction.sampling.sample_answers`' result), else None."""

    generate: Callable[..., list]
    engine: str
    version: str | None
    sample: Callable[..., list] | None = None

    def __call__(self, prompts, settings, **options) -> list:
        return self.generate(prompts, settings, **options)

    @property
    def record(self) -> dict:
        """``{"engine", "engine_version"}`` for a store manifest."""
        return {"engine": self.engine, "engine_version": self.version}


@contextlib.contextmanager
def open_engine(engine: Any, model: Any, tokenizer: Any,
                options: dict | None = None) -> Iterator[Generator]:
    """A :class:`Generator` (``generate(prompts, settings, **options)``) on ``engine`` for ``model`` (a
    loaded transformers model: what transformers runs, and for vLLM where its saved folder is
    and its context window); ``options`` go to :class:`acute.engines.vllm.VllmEngine`. The vLLM
    worker process lives as long as the context; a started engine (``engine`` a ``VllmEngine``)
    is used as it is and left running."""
    check_engine(engine)
    if not isinstance(engine, str):
        yield Generator(lambda prompts, settings, **kw: engine.generate(tokenizer, prompts, settings, model=model,
                                                                        **kw),
                        *engine_record(engine).values(), sample=_vllm_sampler(engine, model, tokenizer))
        return
    if engine == "transformers":
        from ..extraction import generate_with  # heavy: torch
        from ..extraction.sampling import sample_answers  # heavy: torch

        yield Generator(lambda prompts, settings, **kw: generate_with(model, tokenizer, prompts, settings, **kw),
                        *engine_record().values(),
                        sample=lambda prompts, keys, settings, **kw: sample_answers(model, tokenizer, prompts, keys,
                                                                                    settings, **kw))
        return

    dtype = str(getattr(model, "dtype", "float32")).replace("torch.", "")
    with VllmEngine(model_folder(model), dtype=dtype, **(options or {})) as vllm_engine:
        yield Generator(lambda prompts, settings, **kw: vllm_engine.generate(tokenizer, prompts, settings,
                                                                             model=model, **kw),
                        "vllm", vllm_engine.info.get("vllm_version"),
                        sample=_vllm_sampler(vllm_engine, model, tokenizer))


def can_sample(engine: Any) -> bool:
    """Whether ``engine`` (a name or a started engine) draws samples: transformers, and a vLLM
    engine with a worker that samples (:class:`~acute.engines.vllm.VllmEngine`, not a server)."""
    return engine in ENGINES if isinstance(engine, str) else callable(getattr(engine, "sample_ids", None))


def _vllm_sampler(engine: Any, model: Any, tokenizer: Any) -> Callable[..., list] | None:
    """``sample(prompts, keys, settings, **options)`` on a started vLLM engine (None when it cannot)."""
    if not can_sample(engine):
        return None
    from .vllm_sampling import sample_answers  # lazy: imports torch

    return lambda prompts, keys, settings, **kw: sample_answers(engine, tokenizer, prompts, keys, settings,
                                                                model=model, **kw)

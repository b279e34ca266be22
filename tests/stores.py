"""A test helper (imported by the tests that collect with a tiny random model): a store copied with
labels that depend on each record's id alone, so that its folds hold both classes (the tiny
model answers every question wrong)."""

from __future__ import annotations

from pathlib import Path

from acute.store import StoreWriter, open_store
from acute.testing import hash_label


def relabel(src: Path, dst: Path) -> Path:
    """Copy the store ``src`` to ``dst`` (the same activations, log-probs, poolings and prefix
    checkpoints, in its storage dtype) with each record labelled by :func:`hash_label` of its id."""
    st = open_store(src)
    records = [dict(r, correct=hash_label(r["id"])) for r in st.records]
    with StoreWriter(dst, dict(st.manifest), dtype=st.manifest["dtype"]) as w:
        w.add(records, st.layer_means, st.token_logprobs, last_prompt=st.states("last-prompt"),
              last_answer=st.states("last-answer"),
              checkpoints=(st.checkpoint_tokens, st.checkpoint_means) if st.checkpoints else None)
    return dst

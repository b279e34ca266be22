"""Whether a writer may add to a store: the manifest keys that must agree on resume, the weights
digest, and the poolings and prefix checkpoints a store keeps for all of its records or for none."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from ..errors import IncompatibleStoreError, InputError
from . import checkpoints as ckpt
from .format import COMPAT_KEYS, MEAN_ONLY, REMEDY, RUN_KEYS, WEIGHTS_KEY
from .identity import ModelIdentity

__all__ = ["check_compatible", "check_poolings", "merge_weights", "resolve_checkpoints"]

logger = logging.getLogger(__name__)


def check_poolings(path: Path, stored: Sequence[str] | None, given: Sequence[str] | None,
                   error: type = InputError) -> None:
    """``error`` naming the store and both choices when records with the poolings ``given`` would
    go into a store that holds ``stored`` (None on either side: not decided yet)."""
    if stored is None or given is None or tuple(stored) == tuple(given):
        return
    hint = f"; or {REMEDY}, then add to the new store" if tuple(stored) == MEAN_ONLY else ""
    raise error(
        f"{path}: the store holds the poolings {list(stored)} for all of its records, these records "
        f"come with {list(given)}; a store keeps last_prompt/last_answer for all of its records or "
        f"for none: write them to another store{hint}")


def resolve_checkpoints(path: Path, stored: dict, new: dict, has_records: bool) -> dict | None:
    """The checkpoint schedule (a manifest's ``checkpoints``) of a resumed store: the stored one
    when it has records (a store keeps checkpoints for all of its records or for none: one begun
    without them goes on without, and says so in the log), else the new one.
    IncompatibleStoreError naming both when a store with checkpoints is resumed with another
    schedule or without one."""
    old, given = stored.get("checkpoints"), new.get("checkpoints")
    if not has_records:
        return given
    if old is None:
        if given is not None:
            logger.info("%s keeps no prefix checkpoints (begun without them): its new records will not "
                        "either; to have them, %s", path, ckpt.REMEDY)
        return None
    if given != old:
        raise IncompatibleStoreError(
            f"{path}: the store keeps prefix checkpoints {old} for every record, these records come "
            f"with {given}; collect with the stored schedule, or into another folder")
    return old


def check_compatible(mpath: Path, old: dict, new: dict, allow_other_weights: bool = False) -> None:
    """IncompatibleStoreError naming the fields on which the stored manifest ``old`` and a
    writer's ``new`` one disagree, each with both values: the identities of both
    (:meth:`~acute.store.identity.ModelIdentity.from_manifest`) compared on
    :data:`COMPAT_KEYS`, the engine, the weights digest (``model_weights``) when both record one,
    unless ``allow_other_weights``, and ``generation``/``task_settings`` when the stored manifest
    records them (``num_layers``/``hidden_size`` only when both know them)."""
    # a shape unknown on one side adopts the known one; a store from before RUN_KEYS has none
    fields = list(COMPAT_KEYS) + ["engine", WEIGHTS_KEY] + [key for key in RUN_KEYS if key in old]
    found = ModelIdentity.from_manifest(old).diff(
        ModelIdentity.from_manifest(new), ("stored", "new"), fields=fields,
        optional=("num_layers", "hidden_size", WEIGHTS_KEY), allow_other_weights=allow_other_weights)
    if not found:
        return
    if WEIGHTS_KEY in found:
        raise IncompatibleStoreError(
            f"{mpath}: cannot resume with other weights (same architecture, another checkpoint "
            f"or dtype?): {found}; use another folder, or allow_other_weights=True (--allow-other-weights) "
            "to add this model's records to the store anyway")
    raise IncompatibleStoreError(f"{mpath}: cannot resume the store: {found}; collect into another "
                                 "folder, or with the stored settings")


def merge_weights(merged: dict, old: dict, new: dict, path: Path) -> None:
    """The resumed manifest's weights: the stored digest stays (gaining the entries an older
    acute did not compute, e.g. ``bf16_sha256``, when the ones both have agree); a different one
    (allowed by the caller) is added to ``model_weights_also``; a store without one adopts the new one."""
    ow, nw = old.get(WEIGHTS_KEY), new.get(WEIGHTS_KEY)
    if ow is None:
        if nw is not None and old.get("num_records"):
            logger.warning("%s records no weights digest (written by an older acute): its %s records "
                           "cannot be checked against this model; recording this model's digest",
                           path, old.get("num_records"))
        return
    merged[WEIGHTS_KEY] = ow
    if nw is not None and all(ow.get(k) == v for k, v in nw.items() if k in ow):
        merged[WEIGHTS_KEY] = {**nw, **ow}  # the same weights: a digest an older acute lacked is added
    elif nw is not None:
        also = [w for w in old.get("model_weights_also", []) if w != nw]
        merged["model_weights_also"] = also + [nw]

"""The groups an evaluation keeps together: the metadata field whose values the folds and
resamples keep apart (the task's ``default_group_by``, a user's ``group_by``, or record ids)
and the groups of the within-group AUROC."""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import InputError
from ..tasks import TASKS

__all__ = ["RECORD_IDS", "groups_of", "record_field", "resolve_group_by", "store_groups"]


#: ``group_by`` value for folds and resamples of single records, whatever the task declares
RECORD_IDS = "id"


def resolve_group_by(store, group_by: str | None) -> str | None:
    """The metadata field whose values the cross-validation keeps apart: ``group_by`` when given,
    :data:`RECORD_IDS` for none (records one by one), else the store's task's
    ``default_group_by`` (APIGen and BFCL: ``toolset``), None when it declares none."""
    if group_by == RECORD_IDS:
        return None
    if group_by is not None:
        return group_by
    task = (getattr(store, "manifest", None) or {}).get("task")
    cls = TASKS.get(task) if isinstance(task, str) else None
    return getattr(cls, "default_group_by", None) if cls is not None else None


def store_groups(store, group_by: str | None, ids: Sequence[Any] | None = None) -> tuple[str | None, list[str] | None]:
    """``(field, values)``: :func:`resolve_group_by`'s field and its value on each record of
    ``ids`` (default: the store's, in order), or ``(None, None)`` for records one by one. An error
    names the first record without the field, and for the task's own field how to group by
    record id instead."""
    field = resolve_group_by(store, group_by)
    if field is None:
        return None, None
    try:
        return field, record_field(store, field, list(store.ids) if ids is None else ids)
    except InputError as e:
        hint = "" if group_by is not None else (f" (the task groups by {field!r}; group_by={RECORD_IDS!r} / "
                                                f"--group-by {RECORD_IDS} treats records one by one)")
        raise InputError(f"{e}{hint}") from None


def record_field(store, field: str, ids: Sequence[Any]) -> list[str]:
    """``meta[field]`` of the records ``ids`` (in that order); an error names the store (its
    folder, when it has one) and the first record without it."""
    path = getattr(store, "path", None)
    label = "the store" if path is None else str(path)
    records = getattr(store, "records", None)
    if records is None:
        raise InputError(f"{label} has no records: cannot read the metadata field {field!r}")
    by_id = {str(r.get("id")): r for r in records}
    out = []
    for rid in ids:
        meta = (by_id.get(str(rid)) or {}).get("meta") or {}
        if meta.get(field) is None:
            raise InputError(f"{label}: record {rid!r} has no metadata field {field!r}")
        out.append(str(meta[field]))
    return out


def groups_of(store, field: str | None, ids: Sequence[Any]) -> tuple[list[str] | None, dict | None]:
    """The groups of the within-group AUROC (``field`` of every evaluated record) and a note of
    them (field, number of groups, the groups with one class, which have no AUROC); ``(None,
    note)`` with the reason when some record lacks the field."""
    if field is None:
        return None, None
    try:
        groups = record_field(store, field, ids)
    except InputError as e:
        return None, {"field": field, "left_out": str(e)}
    return groups, {"field": field, "n_groups": len(set(groups))}

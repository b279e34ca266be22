"""The certified trust thresholds a probe carries (``certificates`` in ``probe.json``).

Each entry is a :class:`acute.metrics.certify.Certificate` (``to_dict``) plus where its
calibration records came from::

    {"alpha": 0.1, "delta": 0.1, "valid": true, "threshold": 0.62, "n_calibration": 2041,
     "calibration_coverage": 0.31, "calibration_precision": 0.93, "p_value": ..., "method": ...,
     "fwer": "quantile_sequence", "n_thresholds": 96, "reason": ..., "n_needed": null,
     "rule": "trust iff confidence >= threshold",     # fwer: the procedure
     "backend": "binomial",                    # certify_threshold's backend
     "source": "out-of-fold",                  # or "calibration-store"
     "folds": {"n_splits": 5, "seed": 0, "from": "auto's cross-validation"},   # out-of-fold
     "calibration_store": "/abs/path/store"}   # calibration-store

At most one entry per alpha (``max_error``). An invalid entry (no threshold could be certified)
is kept with its ``reason`` and ``n_needed``: a probe says what it could not certify. A probe
file without ``certificates`` (older releases) carries none.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..errors import InputError, ProbeFormatError
from ..metrics.certify import BACKENDS, Certificate

__all__ = ["SOURCES", "certificate_entry", "certificate_of", "certificate_summary",
           "check_certificates", "find_certificate"]

#: where a certificate's calibration records came from
SOURCES = ("out-of-fold", "calibration-store")
_DETAILS = ("backend", "source", "folds", "calibration_store")


def certificate_entry(certificate: Certificate, *, backend: str, source: str,
                      folds: Mapping[str, Any] | None = None,
                      calibration_store: str | None = None) -> dict[str, Any]:
    """The ``probe.json`` entry of ``certificate`` (see the module doc)."""
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if source not in SOURCES:
        raise InputError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    entry = {**certificate.to_dict(), "backend": backend, "source": source}
    if folds is not None:
        entry["folds"] = dict(folds)
    if calibration_store is not None:
        entry["calibration_store"] = str(calibration_store)
    return entry


def certificate_of(entry: Mapping[str, Any]) -> Certificate:
    """The :class:`Certificate` of a ``probe.json`` entry (its calibration details left out)."""
    return Certificate.from_dict({k: v for k, v in entry.items() if k not in _DETAILS})


def check_certificates(entries: Any, where: str) -> list[dict[str, Any]]:
    """The ``certificates`` of a probe manifest, checked: a list of entries, each a valid
    certificate with a known backend and source, at most one per alpha. ``ProbeFormatError``
    naming ``where`` (the manifest file) and the entry otherwise; ``None`` is an empty list."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ProbeFormatError(f"{where}: 'certificates' must be a list, got {type(entries).__name__}")
    out, seen = [], []
    for i, entry in enumerate(entries):
        name = f"{where}: certificates[{i}]"
        if not isinstance(entry, dict):
            raise ProbeFormatError(f"{name} must be an object")
        if entry.get("backend") not in BACKENDS or entry.get("source") not in SOURCES:
            raise ProbeFormatError(f"{name}: backend must be one of {list(BACKENDS)} and source one "
                                   f"of {list(SOURCES)}, got {entry.get('backend')!r}, "
                                   f"{entry.get('source')!r}")
        try:
            cert = certificate_of(entry)
        except InputError as exc:
            raise ProbeFormatError(f"{name}: {exc}") from None
        if any(_same_alpha(cert.alpha, a) for a in seen):
            raise ProbeFormatError(f"{name}: a second certificate at max_error={cert.alpha:g}")
        seen.append(cert.alpha)
        out.append(dict(entry))
    return out


def _same_alpha(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=1e-9)


def find_certificate(entries: Sequence[Mapping[str, Any]], max_error: float, *,
                     name: str = "max_error") -> dict[str, Any]:
    """The valid entry at ``max_error`` among a probe's ``entries``. :class:`InputError` naming
    ``name`` when the probe carries none at that alpha (listing those it carries and how to make
    one) or when its certificate there is invalid (with its reason and the records it would need)."""
    entry = next((e for e in entries if _same_alpha(e["alpha"], max_error)), None)
    if entry is None:
        carried = ", ".join(f"{e['alpha']:g}" + ("" if e["valid"] else " (invalid)") for e in entries)
        raise InputError(
            f"{name}={max_error:g}: this probe carries no certificate for that max_error "
            f"({'it carries ' + carried if carried else 'it carries none'}); export it with "
            f"`acute export --max-error {max_error:g} --delta DELTA`, or decide by a risk level")
    if not entry["valid"]:
        need = entry.get("n_needed")
        more = (f"; about {need} calibration records would be needed (projected)" if need
                else "; more records like these would not help")
        raise InputError(
            f"{name}={max_error:g}: this probe's certificate at max_error={max_error:g}, "
            f"delta={entry['delta']:g} is invalid: no threshold could be certified from its "
            f"{entry['n_calibration']} calibration records ({entry['reason']}){more}; nothing can "
            f"be trusted under that guarantee: decide by a risk level, or export with more labels")
    return dict(entry)


def certificate_summary(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What an answer decided by ``entry`` shows of it: ``alpha``, ``delta``, ``n_calibration``,
    the ``calibration_coverage`` and ``calibration_precision`` it gave, ``fwer``, ``backend``
    and ``source`` (never a file location)."""
    keys = ("alpha", "delta", "n_calibration", "calibration_coverage", "calibration_precision",
            "fwer", "backend", "source")
    return {k: entry.get(k) for k in keys}

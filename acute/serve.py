"""``acute.serve``: the trust-gate service's public names, kept importable here; the code lives in
the :mod:`acute.serving` package (one module per concept)."""

from __future__ import annotations

from .serving import *  # noqa: F401,F403
from .serving import __all__  # noqa: F401

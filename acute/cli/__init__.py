"""The ``acute`` command line. Each command parses its arguments, calls the library and prints;
only this package prints (library code logs)."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]

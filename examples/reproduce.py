#!/usr/bin/env python
"""The reproduction pipeline now lives in the package: ``acute run CONFIG`` (see
:mod:`acute.pipeline`). This script is kept for old command lines: it runs the same thing.

    python examples/reproduce.py examples/reproduce.toml   # = acute run examples/reproduce.toml
"""

import sys

from acute.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))

"""``python -m acute.cli``: the command line (as ``python -m acute``)."""

import sys

from .main import main

if __name__ == "__main__":
    sys.exit(main())

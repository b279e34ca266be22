"""``python -m acute`` runs the command-line interface (also what ``accelerate launch -m acute``
starts in every process)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m acute.pipeline _worker JOB RESULT``: one stage of ``acute run`` in its own process."""

import sys

from .driver import main

if __name__ == "__main__":
    sys.exit(main())

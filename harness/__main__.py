"""``python -m harness``: see ``harness.cli``."""

import sys

from harness.cli import main

if __name__ == "__main__":  # not when a worker process re-imports the main module
    sys.exit(main())

"""A plug-in module that ends the process at import: the harness must refuse it (exit 2)."""

import sys

sys.exit(3)

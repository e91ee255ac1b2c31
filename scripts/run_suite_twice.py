"""Run the test suite twice in one process: the second run must pass as the first did.

Leaked global state (RNG, default dtype or device, environment, patched modules)
shows up as a second run that differs. Arguments are passed to both pytest runs.
"""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str]) -> int:
    codes = []
    for run in (1, 2):
        print(f"== run {run} of 2 ==", flush=True)
        codes.append(int(pytest.main(["-p", "no:cacheprovider", *argv])))
    print(f"exit codes: {codes}")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

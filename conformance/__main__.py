"""``python -m conformance`` (run from the repository root)."""

import sys

from conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.limits``: this machine's floor (``bench.perf.limits``), by the name
issue 29 gives it."""
import sys

from bench.perf.limits import main

if __name__ == "__main__":
    sys.exit(main())

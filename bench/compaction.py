"""``python -m bench.compaction``: the log compaction benchmark (``bench.perf.compaction``)."""
import sys

from bench.perf.compaction import main

if __name__ == "__main__":
    sys.exit(main())

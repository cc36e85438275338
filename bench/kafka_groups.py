"""``python -m bench.kafka_groups``: the consumer-groups benchmark
(``bench.perf.kafka_groups``)."""
import sys

from bench.perf.kafka_groups.run import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.kafka_clients``: the clients benchmark (``bench.perf.kafka_clients``)."""
import sys

from bench.perf.kafka_clients.run import main

if __name__ == "__main__":
    sys.exit(main())

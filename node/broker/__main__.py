"""``python -m node.broker --config server.properties``."""
import sys

from node.broker.server import main

if __name__ == "__main__":
    sys.exit(main())

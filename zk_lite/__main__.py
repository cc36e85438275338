"""``python -m zk_lite --port 2181 --data-dir DIR``: run the coordinator."""
import sys

from .server import main

if __name__ == "__main__":
    sys.exit(main())

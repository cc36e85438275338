"""A group member as its own process, for tests: subscribes, polls, commits after each
poll, and appends every record it reads as a JSON line ({member, partition, offset,
value}) to --out. SIGTERM closes it cleanly. ``--group-protocol``: zookeeper (the
paper's groups, the default here) or consumer (the brokers' coordinator)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys


class _Stop(Exception):
    pass


def _stop(*_):
    raise _Stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--bootstrap", "--group", "--topic", "--out", "--name"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--zookeeper")
    parser.add_argument("--group-protocol", default="zookeeper")
    args = parser.parse_args()
    from node.client import Consumer
    consumer = Consumer(args.bootstrap, group_id=args.group, zookeeper_connect=args.zookeeper,
                        group_protocol=args.group_protocol,
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        fetch_max_wait_ms=100)
    signal.signal(signal.SIGTERM, _stop)

    def dump(*_):     # SIGUSR1: the consumer's view, for a test that fails
        with open(args.out + ".dump", "w") as f:
            for tp, st in consumer._states.items():
                f.write(f"{tp} position {st.position} fetch {st.fetch_offset} reset "
                        f"{st.reset} buffered {len(st.buffered)} hw {st.high_watermark}\n")
            f.write(f"fetches {consumer._fetches} core {consumer._group.core}\n")
            f.write(f"in flight {consumer.net.in_flight} backlog {consumer.net.backlog}\n")
    signal.signal(signal.SIGUSR1, dump)
    try:
        consumer.subscribe([args.topic])
        named = False
        with open(args.out, "a") as out:
            while True:
                if not named and consumer.member_id():   # a classic member's comes
                    with open(args.out + ".id.tmp", "w") as f:   # with its JoinGroup
                        f.write(consumer.member_id())
                    os.replace(args.out + ".id.tmp", args.out + ".id")
                    named = True
                records = consumer.poll(100)
                for r in records:
                    out.write(json.dumps({"member": consumer.member_id(),
                                          "partition": r.partition, "offset": r.offset,
                                          "value": r.value.decode()}) + "\n")
                out.flush()
                if records:
                    consumer.commit()
    except _Stop:
        pass
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

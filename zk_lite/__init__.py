"""zk_lite: a single-node coordinator that speaks the ZooKeeper wire protocol.

Pure cores, thin shell (see /work/shared/STYLE.md):

* ``jute``     sans-I/O codec: frames, jute primitives, every request/response record
* ``errors``   the one registry of ZooKeeper error codes
* ``tree``     the data tree: znodes, stats, ACLs, ephemerals, txns (pure)
* ``watches``  data/child watch tables with ZooKeeper 3.8's modes (pure)
* ``core``     sessions, connections, watches; effects returned as data (pure)
* ``requests`` the request processors, checked then applied (a mixin of core; pure)
* ``session``  a connection's and a session's state (pure)
* ``persist``  txn log (length + CRC, group-committed fdatasync) and snapshots
* ``server``   the asyncio TCP shell: ``python -m zk_lite --port 2181 --data-dir DIR``

Known differences from Apache ZooKeeper 3.8 (standalone):

* zxids start at ``epoch << 32`` with epoch = Unix seconds at each start, so they never
  go backwards across restarts and a client that saw a high zxid is never refused.
* A ``check`` (13) sent outside a multi gets a reply; 3.8 leaves it unanswered.
* Child names are returned sorted (3.8 returns hash order; both are allowed).
* TTL nodes are refused with Unimplemented (-6), as a 3.8 server without
  ``zookeeper.extendedTypesEnabled``; quotas are not enforced; SASL is not supported;
  ``reconfig`` answers ReconfigDisabled (-123).
* A failed multi does not consume a zxid (3.8 spends one on the error txn).
* ``getChildren`` replies are not capped at 1 MiB; catch-up events sent in reply to
  ``setWatches`` are not filtered by ACL.
* All four-letter words answer without a whitelist.
* The container check interval (60 s) has no command-line flag.
"""

"""zk_lite: a single-node coordinator that speaks the ZooKeeper wire protocol.

Pure cores, thin shell (see /work/shared/STYLE.md):

* ``jute``     sans-I/O codec: frames, jute primitives, every request/response record
* ``errors``   the one registry of ZooKeeper error codes
* ``tree``     the data tree: znodes, stats, ACLs, ephemerals, txns (pure)
* ``watches``  data/child watch tables with ZooKeeper 3.8's modes (pure)
* ``core``     sessions, connections, requests, watches; effects returned as data (pure)
* ``persist``  txn log (length + CRC, group-committed fdatasync) and snapshots
* ``server``   the asyncio TCP shell: ``python -m zk_lite --port 2181 --data-dir DIR``
"""

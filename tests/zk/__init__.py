"""Kazoo-level tests of the ZooKeeper wire protocol, run against zk_lite and a real ZooKeeper 3.8.

Every test that takes the ``zk_server`` fixture (directly or through ``zk``,
``make_client``, ``spawn_worker``) runs once per server kind; the real ZooKeeper run is
the proof that the test encodes ZooKeeper's behaviour. Layout:

- ``servers.py`` / ``conftest.py``: server pool (one server per xdist worker, kind and
  tick time; started by ``bench.zkservers``), a chroot namespace per test, clients.
- ``test_kazoo_*.py``: CRUD and errors, watches, transactions, ACLs, sessions, recipes
  across processes (``zkworker.py``), four-letter words.
- ``test_wire_raw.py`` and the SetWatches tests: ``jute_client.py``, a tiny raw client.
- ``test_java_client.py``: zkCli and the Java API (``java/*.java``, run as source files).
- ``test_zk_restart.py``: kill -9 / restart; ``test_zk_fuzz.py``: malformed input
  (``ZK_FUZZ_SEED=N`` replays a run).
"""

"""Kazoo-level tests of the ZooKeeper wire protocol, run against zk_lite and a real ZooKeeper 3.8."""

"""zk_lite: a single-node coordinator that speaks the ZooKeeper wire protocol."""

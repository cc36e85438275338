"""What the supervisor sees of a cluster: each process's status, and the coordinator's
view through the supervisor's own kazoo client (the controller, partition states,
registered brokers), and a broker's Metadata answer. ``Inspection`` is a mixin of
``supervisor.Cluster``.

Rules:
- One kazoo client per ``Cluster``, created on first use and kept until ``down`` or
  ``close``; it reconnects by itself.
- A missing znode reads as "none"; a coordinator that does not answer is a
  ``ClusterError``.
"""
from __future__ import annotations

from node.cluster.layout import ZK_CONNECT_TIMEOUT_S
from node.cluster.process import POLL_INTERVAL_S, ClusterError, ProcessStatus
from node.waiting import poll_until

METADATA_TIMEOUT_MS = 2000


class Inspection:
    """Status and the coordinator's view of a ``supervisor.Cluster`` (rules above)."""

    def status(self) -> list[ProcessStatus]:
        try:
            controller = self.controller_id() if self.zk_process_alive() else None
        except ClusterError:
            controller = None
        out = []
        if "zk" in self.processes:
            p = self.processes["zk"]
            out.append(ProcessStatus("zk", p.pid(), p.state(), self.zookeeper, "zookeeper"))
        for broker_id in self.broker_ids:
            p = self.processes[str(broker_id)]
            role = "controller" if controller == broker_id and p.pid() is not None else ""
            out.append(ProcessStatus(p.name, p.pid(), p.state(),
                                     self.broker_address(broker_id), role,
                                     self.kafka_address(broker_id) or ""))
        return out

    def zk_process_alive(self) -> bool:
        zk = self.processes.get("zk")
        return zk is None or zk.state() == "alive"

    def zk(self):
        """The supervisor's kazoo client: created on first use and kept until
        ``down``/``close`` (it reconnects by itself, so a reference stays valid across
        a ZooKeeper restart). Raises ClusterError if ZooKeeper cannot be reached."""
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        if self._zk is None:
            client = KazooClient(hosts=self.zookeeper, timeout=ZK_CONNECT_TIMEOUT_S,
                                 connection_retry=KazooRetry(max_tries=-1, delay=0.1,
                                                             max_delay=1.0))
            try:
                client.start(timeout=ZK_CONNECT_TIMEOUT_S)
            except Exception:
                client.stop()
                client.close()
                raise ClusterError(f"cannot reach ZooKeeper at {self.zookeeper}") from None
            self._zk = client
        return self._zk

    def _connected_zk(self):
        """The client once it is connected (waits up to ZK_CONNECT_TIMEOUT_S)."""
        client = self.zk()
        poll_until(lambda: client.connected, ZK_CONNECT_TIMEOUT_S, "a connection",
                   interval_s=POLL_INTERVAL_S, error=lambda message: ClusterError(
                       f"cannot reach ZooKeeper at {self.zookeeper} ({message})"))
        return client

    def _close_zk(self) -> None:
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
            self._zk = None

    def _zk_call(self, fn, default):
        """Run ``fn(client)``; a missing znode gives ``default``, a lost connection a
        ClusterError (the client keeps reconnecting in the background)."""
        from kazoo.exceptions import KazooException, NoNodeError

        from node.wire.zkdata import ZkDataError

        try:
            return fn(self._connected_zk())
        except (NoNodeError, ZkDataError):
            return default
        except (KazooException, TimeoutError) as e:
            raise ClusterError(f"ZooKeeper at {self.zookeeper} did not answer "
                               f"({type(e).__name__})") from None

    def controller_id(self) -> int | None:
        """The broker id in /controller, None if no controller is elected."""
        from node.wire.zkdata import CONTROLLER, decode_controller

        return self._zk_call(lambda zk: decode_controller(zk.get(CONTROLLER)[0]), None)

    def partition_state(self, topic: str, partition: int):
        """The partition-state znode (``node.wire.zkdata.PartitionState``: leader,
        leader_epoch, isr, controller_epoch, zk_version), None if absent."""
        from node.wire.zkdata import decode_partition_state, partition_state_path

        def read(zk):
            data, stat = zk.get(partition_state_path(topic, partition))
            return decode_partition_state(data, stat.version)

        return self._zk_call(read, None)

    def registered_brokers(self) -> list[int]:
        from node.wire.zkdata import BROKER_IDS

        return self._zk_call(lambda zk: sorted(
            int(c) for c in zk.get_children(BROKER_IDS) if c.isdigit()), [])

    def broker_metadata(self, broker_id: int) -> tuple[list[int], int] | None:
        """(broker ids, controller id) from broker ``broker_id``'s Metadata answer, or
        None if it does not answer."""
        from node.wire import protocol
        from node.net import Channel, ChannelError

        channel = Channel(f"tcp://{self.broker_address(broker_id)}", client_id="supervisor")
        try:
            body = channel.request(protocol.ApiKey.METADATA, {"topics": []},
                                   timeout_ms=METADATA_TIMEOUT_MS).body
            return sorted(int(b[0]) for b in body["brokers"]), int(body.get("controller_id", -1))
        except (ChannelError, KeyError, TypeError, ValueError, IndexError):
            return None
        finally:
            channel.close()

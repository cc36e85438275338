"""The Kafka paper's consumer groups, for ``minikafka consumer-groups --zookeeper-groups``:
their registries in ZooKeeper (``node.client.group``), read into
``node.tools.groups_model``. The coordinator is found through a broker (its
``zookeeper.connect``), as the consumers find it."""
from __future__ import annotations

from node.tools.common import ToolError, open_admin
from node.tools.groups_model import ZOOKEEPER, GroupInfo, Listed, MemberInfo

MISSING = "-"


class ZooKeeperGroups:
    def __init__(self, bootstrap: str):
        admin = open_admin(bootstrap)
        try:
            _, configs = admin.describe_broker_config()
        finally:
            admin.close()
        self.address = configs["zookeeper.connect"]
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        self.zk = KazooClient(hosts=self.address, timeout=10)
        try:
            self.zk.start(timeout=10)
        except KazooTimeoutError:
            self.zk.close()
            raise ToolError(f"cannot reach the coordinator at {self.address}") from None

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def list_groups(self) -> list[Listed]:
        from node.client.group import list_groups
        out = []
        for group in list_groups(self.zk):
            info = self.describe(group)
            out.append(Listed(group, ZOOKEEPER, info.state if info else "Dead"))
        return out

    def describe(self, group: str) -> GroupInfo | None:
        from node.client.group import read_group
        view = read_group(self.zk, group)
        if view is None:
            return None
        owned: dict[str, list] = {m: [] for m in view.members}
        for tp, member in view.owners.items():
            if member in owned:
                owned[member].append(tp)
        members = []
        for member_id in sorted(view.members):
            entry = view.members.get(member_id) or {}
            members.append(MemberInfo(member_id, str(entry.get("host", MISSING)),
                                      str(entry.get("client_id", MISSING)),
                                      tuple(sorted(owned[member_id]))))
        host, port = self.zk.hosts[0] if self.zk.hosts else (MISSING, MISSING)
        return GroupInfo(group, ZOOKEEPER, view.state, f"{host}:{port}  (zookeeper)",
                         "range", members, dict(view.offsets))

    def commit(self, group: str, offsets: dict) -> None:
        from node.client.group import write_offsets
        write_offsets(self.zk, group, offsets)

    def delete(self, group: str) -> str | None:
        """None when deleted, else why not (Kafka's words)."""
        from node.client.group import delete_group
        info = self.describe(group)
        if info is None:
            return "GroupIdNotFoundException: The group id does not exist."
        if info.members:
            return "GroupNotEmptyException: The group is not empty."
        delete_group(self.zk, group)
        return None

    def delete_offsets(self, group: str, partitions) -> dict:
        raise ToolError("--delete-offsets works on the brokers' groups only (the Kafka "
                        "paper's groups keep their offsets until the group is deleted)")

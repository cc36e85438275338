"""Watch tables with ZooKeeper 3.8's semantics (pure).

The server keeps two tables, data and child (ZK_PROTOCOL.md §6.7). In each, a watcher
has at most one watch per path, with one mode:

* ``STANDARD``: one-shot; removed when it fires.
* ``PERSISTENT``: fires on this path, stays.
* ``RECURSIVE``: fires on this path and every descendant, stays, and never fires for
  NodeChildrenChanged.

As in ZooKeeper 3.8 (before ZOOKEEPER-4466), registering a watch on a path the watcher
already watches in that table *replaces* the mode: ``addWatch /a`` followed by
``get -w /a`` leaves a one-shot data watch (and the persistent child-table entry).

``addWatch`` registers in both tables; ``getData``/``exists`` in the data table;
``getChildren`` in the child table.
"""
from __future__ import annotations

from .tree import NODE_CHILDREN_CHANGED, parent_of

STANDARD, PERSISTENT, RECURSIVE = 0, 1, 2


class WatchTable:
    __slots__ = ("by_path", "by_watcher", "recursive")

    def __init__(self):
        self.by_path: dict[str, dict[object, int]] = {}
        self.by_watcher: dict[object, set[str]] = {}
        self.recursive = 0  # number of RECURSIVE entries: skip the ancestor walk when 0

    def add(self, path: str, watcher, mode: int = STANDARD) -> None:
        watchers = self.by_path.get(path)
        if watchers is None:
            watchers = self.by_path[path] = {}
        if watchers.get(watcher) == RECURSIVE:
            self.recursive -= 1
        if mode == RECURSIVE:
            self.recursive += 1
        watchers[watcher] = mode
        paths = self.by_watcher.get(watcher)
        if paths is None:
            self.by_watcher[watcher] = {path}
        else:
            paths.add(path)

    def contains(self, path: str, watcher, mode: int | None = None) -> bool:
        watchers = self.by_path.get(path)
        if not watchers or watcher not in watchers:
            return False
        return mode is None or watchers[watcher] == mode

    def remove(self, path: str, watcher, mode: int | None = None) -> bool:
        if not self.contains(path, watcher, mode):
            return False
        self._drop(path, self.by_path[path], watcher)
        return True

    def _drop(self, path: str, watchers: dict, watcher) -> None:
        if watchers.pop(watcher) == RECURSIVE:
            self.recursive -= 1
        if not watchers:
            del self.by_path[path]
        paths = self.by_watcher.get(watcher)
        if paths is not None:
            paths.discard(path)
            if not paths:
                del self.by_watcher[watcher]

    def remove_watcher(self, watcher) -> None:
        for path in self.by_watcher.pop(watcher, ()):
            watchers = self.by_path[path]
            if watchers.pop(watcher) == RECURSIVE:
                self.recursive -= 1
            if not watchers:
                del self.by_path[path]

    def trigger(self, path: str, event_type: int, suppress=None) -> dict:
        """The watchers (in registration order) an event on ``path`` fires; one-shot
        watches that fire are removed. ``suppress``: watchers that already got this event."""
        fired: dict = {}
        watchers = self.by_path.get(path)
        if watchers:
            for watcher, mode in list(watchers.items()):
                if mode == RECURSIVE:
                    if event_type != NODE_CHILDREN_CHANGED:
                        fired[watcher] = None
                else:
                    fired[watcher] = None
                    if mode == STANDARD:
                        self._drop(path, watchers, watcher)
        if self.recursive and event_type != NODE_CHILDREN_CHANGED:
            p = path
            while p != "/":
                p = parent_of(p)
                ancestors = self.by_path.get(p)
                if ancestors:
                    for watcher, mode in ancestors.items():
                        if mode == RECURSIVE:
                            fired[watcher] = None
        if suppress:
            for watcher in suppress:
                fired.pop(watcher, None)
        return fired

    def count(self) -> int:
        return sum(len(w) for w in self.by_path.values())

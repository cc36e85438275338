"""Controlled shutdown: a broker's ControlledShutdown request (Kafka's
doControlledShutdown). A mixin of ``core.Controller``.

Rules:
- Controlled shutdown: leadership moves to the first replica (assignment order) that is
  alive, in the ISR and not shutting down; the broker leaves the ISR of partitions it
  follows; the answer lists the partitions it still leads.
"""
from __future__ import annotations

from node.core.controller import elections
from node.core.controller.events import (NO_LEADER, ControlledShutdownRequested,
                                         ReplyControlledShutdown)
from node.wire.errors import ErrorCode


class ControlledShutdown:
    """A broker's controlled shutdown (rules above; state: ``core.Controller``)."""

    # ---------------------------------------------------------------- controlled shutdown

    def _on_controlled_shutdown(self, ev: ControlledShutdownRequested) -> None:
        b = ev.broker_id
        broker = self.brokers.get(b)
        if broker is None:
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": ErrorCode.BROKER_NOT_AVAILABLE, "remaining_partitions": []}))
            return
        if ev.broker_epoch >= 0 and ev.broker_epoch != broker.epoch:
            code = ErrorCode.STALE_BROKER_EPOCH
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": code, "remaining_partitions": []}))
            return
        self._log("INFO", f"controlled shutdown of broker {b}")
        self.shutting_down.add(b)
        mine = [tp for tp in self._active_partitions()
                if tp in self.states and b in self._replicas(tp) and len(self._replicas(tp)) > 1]
        led = [tp for tp in mine if self.states[tp].leader == b]
        followed = [tp for tp in mine if self.states[tp].leader not in (b, NO_LEADER)]

        def decide_led(tp):
            state = self.states[tp]
            if state.leader != b:
                return None
            return elections.elect_controlled_shutdown(self._replicas(tp), state,
                                                       self._eligible_for(tp),
                                                       self.shutting_down)

        def decide_followed(tp):
            state = self.states[tp]
            if state.leader in (b, NO_LEADER) or b not in state.isr:
                return None
            return state.leader, tuple(r for r in state.isr if r != b)

        def reply(_written) -> None:
            if not self.active:
                return
            remaining = [[t, p] for t, p in self._active_partitions()
                         if (t, p) in self.states and self.states[(t, p)].leader == b
                         and len(self._replicas((t, p))) > 1]
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": ErrorCode.NONE, "remaining_partitions": remaining}))

        pending = {"n": 2}

        def part_done(_written) -> None:
            pending["n"] -= 1
            if pending["n"] == 0:
                reply(_written)

        self._write_states(decide_led, led, f"controlled shutdown of {b}", then=part_done)
        # The follower replicas stop (delete=false) and leave the ISR; the new state goes
        # to the other replicas only.
        self._send_stop_replica(b, followed, delete=False)
        self._write_states(decide_followed, followed, f"controlled shutdown of {b}",
                           then=part_done, recipients=lambda tp: set(self.brokers) - {b})

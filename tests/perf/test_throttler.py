"""Kafka's ThroughputThrottler, on a simulated clock: the rate it keeps, and its 2 ms
minimum sleep."""
from __future__ import annotations

import pytest

from node.perf.producer import ThroughputThrottler


class FakeClock:
    def __init__(self):
        self.now_ns = 0
        self.sleeps: list[float] = []

    def clock(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_ns += int(seconds * 1e9)


def send(throttler: ThroughputThrottler, clock: FakeClock, records: int, per_send: int,
         send_ns: int) -> None:
    for sent in range(per_send, records + 1, per_send):
        clock.now_ns += send_ns  # the cost of one send
        if throttler.should_throttle(sent, clock.now_ns):
            throttler.throttle(per_send)


@pytest.mark.parametrize("rate, per_send", [(1000, 1), (10_000, 10), (250_000, 500)])
def test_throttled_sends_keep_the_target_rate(rate, per_send):
    clock = FakeClock()
    throttler = ThroughputThrottler(rate, 0, clock=clock.clock, sleep=clock.sleep)
    send(throttler, clock, rate, per_send, send_ns=20_000)  # one second's worth
    assert clock.now_ns / 1e9 == pytest.approx(1.0, rel=0.01)


def test_sleeps_are_never_shorter_than_two_ms():
    clock = FakeClock()
    throttler = ThroughputThrottler(1000, 0, clock=clock.clock, sleep=clock.sleep)
    send(throttler, clock, 500, 1, send_ns=10_000)
    assert clock.sleeps and min(clock.sleeps) >= 0.002


def test_unthrottled_never_sleeps():
    clock = FakeClock()
    throttler = ThroughputThrottler(-1, 0, clock=clock.clock, sleep=clock.sleep)
    send(throttler, clock, 10_000, 100, send_ns=1_000)
    assert clock.sleeps == []

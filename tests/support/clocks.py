"""Clocks a test sets by hand: the monotonic seconds and the wall-clock milliseconds the broker agent injects."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeWallClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

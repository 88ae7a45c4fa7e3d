"""The cycle collector pause: nests, overlaps across threads, and leaves a disabled collector disabled. The settle:
freezes a grown heap, not again until it grows, collects frozen cycles at the next settle, never while paused."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from orchestrator import collector
from orchestrator.collector import SETTLE_GROWTH, SETTLE_MIN_OBJECTS, collector_paused, settle_if_grown

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:  # pragma: no cover - the suite runs with the collector on
        gc.disable()


def test_pauses_nest_and_the_last_one_re_enables() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_re_enables() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_in_two_threads() -> None:
    gc.enable()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first pause ended; ours still holds

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


class _Node:
    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def _unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing frozen, and no settle checked yet (the interval is process-wide state)."""
    monkeypatch.setattr(collector, "_checked_at", [float("-inf")])
    gc.unfreeze()
    gc.collect()
    yield
    gc.unfreeze()


def _clock() -> Iterator[float]:
    t = 0.0
    while True:
        t += 10.0
        yield t


@pytest.mark.usefixtures("_unfrozen")
def test_a_grown_heap_settles_into_the_permanent_generation_and_is_not_settled_again_until_it_grows() -> None:
    gc.enable()
    tick = _clock().__next__
    kept = [[i] for i in range(60_000)]  # long-lived, like an image (lists are always tracked)
    gc.collect()  # ... and already in the old generation
    assert settle_if_grown(clock=tick)
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    assert len(gc.get_objects(generation=2)) < SETTLE_MIN_OBJECTS
    assert not settle_if_grown(clock=tick), "nothing grew"
    more = [[i] for i in range(max(SETTLE_MIN_OBJECTS, int(frozen * SETTLE_GROWTH)) + 1000)]
    gc.collect()
    assert settle_if_grown(clock=tick), "doubled"
    assert gc.get_freeze_count() >= frozen + len(more)


@pytest.mark.usefixtures("_unfrozen")
def test_a_cycle_that_was_frozen_is_collected_at_the_next_settle() -> None:
    gc.enable()
    tick = _clock().__next__
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    filler = [[i] for i in range(SETTLE_MIN_OBJECTS + 1000)]
    gc.collect()
    assert settle_if_grown(clock=tick)
    del a, b
    gc.collect()
    assert gone() is not None, "frozen: a full collection does not look at it"
    filler += [[i] for i in range(SETTLE_MIN_OBJECTS + int(gc.get_freeze_count() * SETTLE_GROWTH))]
    gc.collect()
    assert settle_if_grown(clock=tick)
    assert gone() is None, "the settle unfreezes, collects everything, then freezes"


@pytest.mark.usefixtures("_unfrozen")
def test_no_settle_while_paused_with_the_collector_off_or_within_the_interval() -> None:
    gc.enable()
    kept = [[i] for i in range(SETTLE_MIN_OBJECTS * 2)]
    gc.collect()
    with collector_paused():
        assert not settle_if_grown(clock=lambda: 1e9)
    gc.disable()
    assert not settle_if_grown(clock=lambda: 2e9)
    gc.enable()
    assert settle_if_grown(clock=lambda: 3e9)
    kept += [[i] for i in range(max(SETTLE_MIN_OBJECTS, int(gc.get_freeze_count() * SETTLE_GROWTH)) + 1000)]
    gc.collect()
    assert not settle_if_grown(clock=lambda: 3e9 + 0.5), "checked half a second ago"
    assert settle_if_grown(clock=lambda: 3e9 + 1.5)
    assert gc.get_freeze_count() >= len(kept)

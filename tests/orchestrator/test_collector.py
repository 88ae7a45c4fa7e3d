"""The cycle collector pause: nests, overlaps across threads, and leaves a disabled collector disabled. The settle:
freezes a grown heap, not again until it doubles, waits for a quiet moment unless the heap grew a lot, collects
frozen cycles at the next settle, never while paused. The heap measure walks the allocator's pools again only when
the peak resident memory grew or a minute passed, and after a settle."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Iterator

import pytest

from orchestrator import collector
from orchestrator.collector import (
    SETTLE_FORCE,
    SETTLE_GROWTH,
    SETTLE_MIN_BLOCKS,
    collector_paused,
    run_as_burst,
    settle_if_grown,
)

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


def test_a_burst_runs_with_the_collector_paused_then_offers_a_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.enable()
    offered: list[tuple[bool, bool]] = []  # (busy, collector on) at each settle offer

    def offer(*, busy: bool) -> bool:
        offered.append((busy, gc.isenabled()))
        return False

    monkeypatch.setattr(collector, "settle_if_grown", offer)
    inside = run_as_burst(lambda: (gc.isenabled(), list(offered)))
    assert inside == (False, []), "paused inside, and no settle offered part way"
    assert offered == [(False, True)], "offered once after, with the collector back on"
    assert gc.isenabled()

    def fail() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        run_as_burst(fail)
    assert gc.isenabled(), "an error inside still re-enables the collector"
    assert offered == [(False, True)], "and offers no settle: the next burst does"


class _Node:
    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def _unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing frozen, nothing settled, checked, measured or busy yet (process-wide state)."""
    fresh = {"checked_at": float("-inf"), "busy_at": float("-inf"), "settled_blocks": 0}
    monkeypatch.setattr(collector, "_settle", fresh)
    monkeypatch.setattr(collector, "_measure", collector._Walk())
    gc.unfreeze()
    gc.collect()
    yield
    gc.unfreeze()


class _Heap:
    """An injected clock (10 s a call: every check is past the interval) and heap size."""

    def __init__(self, blocks: int) -> None:
        self.now = 0.0
        self.blocks = blocks

    def clock(self) -> float:
        self.now += 10.0
        return self.now

    def settle(self, *, busy: bool = False) -> bool:
        return settle_if_grown(busy=busy, clock=self.clock, heap_blocks=lambda: self.blocks)


@pytest.mark.usefixtures("_unfrozen")
def test_a_grown_heap_settles_into_the_permanent_generation_and_is_not_settled_again_until_it_doubles() -> None:
    gc.enable()
    kept = [[i] for i in range(60_000)]  # long-lived, like an image (lists are always tracked)
    gc.collect()  # ... and already in the old generation
    heap = _Heap(SETTLE_MIN_BLOCKS - 1)
    assert not heap.settle(), "below the minimum"
    heap.blocks = SETTLE_MIN_BLOCKS
    assert heap.settle()
    assert gc.get_freeze_count() >= len(kept)
    assert _collected(kept) == 0
    assert len(gc.get_objects(generation=2)) < len(kept), "what was alive is frozen: full collections skip it"
    assert not heap.settle(), "nothing grew"
    heap.blocks = int(SETTLE_MIN_BLOCKS * SETTLE_GROWTH) - 1
    assert not heap.settle(), "grown, but not doubled"
    more = [[i] for i in range(10_000)]
    gc.collect()
    heap.blocks += 1
    assert heap.settle(), "doubled"
    # What grew is frozen too. Not checked by the freeze count: objects frozen the first time that died since (the
    # worker's own, of earlier tests) leave the permanent generation, and one full run saw 9,998 more, not 10,000.
    assert _collected([*more, more]) == 0, "frozen: in no generation the collector walks"
    assert _collected(kept) == 0


def _collected(objects: list[object]) -> int:
    """How many of ``objects`` are in a generation the collector walks (frozen objects are in none of them)."""
    ids = {id(o) for o in objects}
    return sum(id(o) in ids for o in gc.get_objects())


@pytest.mark.usefixtures("_unfrozen")
def test_a_real_heap_measure_settles_a_heap_that_grew_past_the_minimum() -> None:
    """The default measure is the interpreter's allocated blocks: a heap of a million small lists passes it."""
    gc.enable()
    assert sys.getallocatedblocks() < SETTLE_MIN_BLOCKS * 10
    kept = [[i] for i in range(max(0, SETTLE_MIN_BLOCKS * 2 - sys.getallocatedblocks()) // 2 + 1)]
    assert settle_if_grown(busy=False, clock=lambda: 1e9)
    assert gc.get_freeze_count() >= len(kept)
    assert not settle_if_grown(busy=False, clock=lambda: 1e9 + 10), "nothing grew"


@pytest.mark.usefixtures("_unfrozen")
def test_a_grown_heap_waits_for_a_quiet_moment_unless_it_grew_a_lot() -> None:
    gc.enable()
    heap = _Heap(SETTLE_MIN_BLOCKS)
    assert not heap.settle(busy=True), "the first settle waits too"
    assert heap.settle()
    heap.blocks = int(SETTLE_MIN_BLOCKS * SETTLE_GROWTH)
    assert not heap.settle(busy=True), "the image just moved"
    assert heap.settle(busy=False), "ten seconds without a busy refresh"
    settled = heap.blocks
    heap.blocks = int(settled * SETTLE_GROWTH * SETTLE_FORCE) - 1
    assert not heap.settle(busy=True)
    assert not heap.settle(busy=True)
    heap.blocks += 1
    assert heap.settle(busy=True), "a heap that never stops growing is still settled"


@pytest.mark.usefixtures("_unfrozen")
def test_a_busy_refresh_is_noted_even_when_the_check_is_skipped() -> None:
    gc.enable()
    blocks = [SETTLE_MIN_BLOCKS]
    at = [100.0]

    def settle(*, busy: bool) -> bool:
        return settle_if_grown(busy=busy, clock=lambda: at[0], heap_blocks=lambda: blocks[0], quiet_s=0.5)

    assert settle(busy=False)
    blocks[0] *= 2
    at[0] = 100.9
    assert not settle(busy=True), "within the interval: not checked"
    at[0] = 101.1
    assert not settle(busy=False), "checked: doubled, but the image moved 0.2 s ago"
    at[0] = 102.2
    assert settle(busy=False)


@pytest.mark.usefixtures("_unfrozen")
def test_a_cycle_that_was_frozen_is_collected_at_the_next_settle() -> None:
    gc.enable()
    heap = _Heap(SETTLE_MIN_BLOCKS)
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    assert heap.settle()
    del a, b
    gc.collect()
    assert gone() is not None, "frozen: a full collection does not look at it"
    heap.blocks *= 2
    assert heap.settle()
    assert gone() is None, "the settle unfreezes, collects everything, then freezes"


@pytest.mark.usefixtures("_unfrozen")
def test_no_settle_while_paused_with_the_collector_off_or_within_the_interval() -> None:
    gc.enable()
    blocks = [SETTLE_MIN_BLOCKS]

    def settle(at: float) -> bool:
        return settle_if_grown(busy=False, clock=lambda: at, heap_blocks=lambda: blocks[0])

    with collector_paused():
        assert not settle(1e9)
    gc.disable()
    assert not settle(2e9)
    gc.enable()
    assert settle(3e9)
    blocks[0] *= 2
    assert not settle(3e9 + 0.5), "checked half a second ago"
    assert settle(3e9 + 1.5)


class _Walks:
    """An injected clock, peak resident memory and pool walk that counts the walks."""

    def __init__(self) -> None:
        self.now, self.peak, self.blocks, self.walks = 0.0, 1000, 7, 0

    def walk(self) -> int:
        self.walks += 1
        return self.blocks

    def measure(self) -> int:
        return collector.allocated_blocks(clock=lambda: self.now, peak_resident=lambda: self.peak, walk=self.walk)


@pytest.mark.usefixtures("_unfrozen")
def test_the_heap_is_walked_again_only_once_the_peak_memory_grew_a_tenth_or_a_minute_passed() -> None:
    w = _Walks()
    assert (w.measure(), w.walks) == (7, 1), "the first measure walks"
    w.blocks, w.now, w.peak = 9, collector.REMEASURE_AFTER_S - 1, int(1000 * collector.REMEASURE_PEAK_GROWTH) - 1
    assert (w.measure(), w.walks) == (7, 1), "the last walk's blocks: memory grew less than a tenth, within a minute"
    w.peak += 1
    assert (w.measure(), w.walks) == (9, 2), "the peak grew a tenth"
    w.blocks, w.now = 11, w.now + collector.REMEASURE_AFTER_S
    assert (w.measure(), w.walks) == (11, 3), "a minute since the last walk"
    assert (w.measure(), w.walks) == (11, 3)


@pytest.mark.usefixtures("_unfrozen")
def test_a_settle_forgets_the_last_walk_so_the_heap_it_leaves_is_walked_afresh() -> None:
    gc.enable()
    w = _Walks()
    w.blocks = SETTLE_MIN_BLOCKS
    w.measure()
    assert settle_if_grown(busy=False, clock=lambda: 1e9, heap_blocks=w.measure)
    assert w.walks == 2, "the check used the last walk; after the settle, a new walk though nothing grew"

"""Ports chosen in advance come from a slice of their own per pytest-xdist worker, below the ephemeral range."""

from __future__ import annotations

import socket

import pytest

from orchestrator.local.ports import LOW as CONTROLLERS_LOW
from tests.support.ports import HIGH, LOW, NoFreePort, PortSlice, free_port, this_workers_slice, worker_slice


@pytest.mark.unit
def test_the_workers_of_a_run_get_disjoint_slices_that_cover_the_tests_range_below_the_controllers_one() -> None:
    slices = [worker_slice(f"gw{i}", 3, ephemeral_low=32_768) for i in range(3)]
    ports = [set(range(s.first, s.first + s.size)) for s in slices]
    assert all(not (a & b) for i, a in enumerate(ports) for b in ports[i + 1 :])
    assert min(slices[0].first, LOW) == LOW and slices[-1].first + slices[-1].size <= HIGH == CONTROLLERS_LOW
    assert sum(s.size for s in slices) > (HIGH - LOW) - 3  # at most the rounding is left over
    assert worker_slice("gw0", 1, ephemeral_low=15_000) == PortSlice(LOW, 5_000), "an ephemeral range lower still"


@pytest.mark.unit
def test_without_xdist_the_whole_range_is_one_slice_and_an_odd_worker_name_counts_as_the_first() -> None:
    assert worker_slice(None, 1, ephemeral_low=32_768) == PortSlice(LOW, HIGH - LOW)
    assert worker_slice("master", 4, ephemeral_low=32_768) == worker_slice("gw0", 4, ephemeral_low=32_768)


@pytest.mark.unit
def test_a_worker_beyond_the_count_it_was_told_still_gets_a_slice_of_its_own() -> None:
    assert worker_slice("gw5", 2, ephemeral_low=32_768).first > worker_slice("gw4", 2, ephemeral_low=32_768).first


@pytest.mark.unit
def test_no_room_below_the_ephemeral_range_is_said_plainly() -> None:
    with pytest.raises(NoFreePort, match="below the ephemeral range"):
        worker_slice("gw0", 2, ephemeral_low=LOW + 1)


@pytest.mark.unit
def test_candidates_visit_every_port_of_the_slice_once_from_the_start_given() -> None:
    assert PortSlice(100, 5).candidates(13) == [103, 104, 100, 101, 102]


@pytest.mark.integration
def test_a_free_port_is_bindable_in_this_workers_slice_and_the_next_one_differs() -> None:
    mine = this_workers_slice()
    first = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        second = free_port()
    assert first != second
    assert all(mine.first <= p < mine.first + mine.size for p in (first, second))

"""A local controller's port lies below the kernel's ephemeral range (so no outgoing connection can take it while
the controller is down), and was free when chosen."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestrator.local import ports
from orchestrator.local.ports import LOW, NoStablePort, candidates, ephemeral_low, stable_port

pytestmark = pytest.mark.unit


def test_candidates_cover_the_range_once_from_the_start_wrapping_around() -> None:
    assert candidates(3, 10, 15) == [13, 14, 10, 11, 12]
    assert candidates(7, 10, 15) == [12, 13, 14, 10, 11]
    with pytest.raises(NoStablePort):
        candidates(0, 10, 10)


def test_the_ephemeral_range_is_read_from_the_kernel_and_defaults_when_unreadable(tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("40000\t60999\n")
    assert ephemeral_low(range_file) == 40000
    range_file.write_text("garbage")
    assert ephemeral_low(range_file) == ports.DEFAULT_EPHEMERAL_LOW
    assert ephemeral_low(tmp_path / "absent") == ports.DEFAULT_EPHEMERAL_LOW


def test_a_stable_port_lies_below_the_ephemeral_range_and_passes_over_a_port_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = stable_port()
    assert LOW <= first < ephemeral_low()
    monkeypatch.setattr(ports, "_next", first - LOW)  # the next choice would start at the same port
    with socket.create_server(("127.0.0.1", first)):
        second = stable_port()
    assert second != first and LOW <= second < ephemeral_low()

"""``TieredClient.consume`` reads a partition up to the end its leader reports, and a read that ends short of it is
an error (RECORDS_MISSING), never a quiet success with fewer records."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.client import PartitionOffsets, TieredClient
from orchestrator.client.data_plane import LONG_POLL_MS
from orchestrator.errors import RecordsMissing
from orchestrator.protocol.record_batch import build_batch, encode_batch

pytestmark = pytest.mark.unit


class ScriptedLeader(TieredClient):
    """A client whose fetches are answered from a log held in memory (offsets ``start`` to ``end - 1``) that has
    lost the records in ``missing_from`` and after."""

    def __init__(
        self, *, start: int, end: int, missing_from: int | None = None, behind: list[int] | None = None
    ) -> None:
        super().__init__("127.0.0.1:9")
        self.start, self.end, self.missing_from = start, end, missing_from
        # A leader elected meanwhile: each fetch answers with the next high watermark of ``behind`` (records only
        # below it), the last one for good (none: ``end``). The long polls each fetch asked for, in order.
        self.behind = list(behind or [])
        self.waits: list[int] = []

    async def offsets(self, name: str, partition: int = 0) -> PartitionOffsets:
        return PartitionOffsets(self.start, self.start, self.end, -1)

    async def fetch(
        self, name: str, partition: int, offset: int, *, max_bytes: int = 1 << 20, max_wait_ms: int = 0
    ) -> dict[str, Any]:
        """Batches of ten records, aligned on multiples of ten (so a fetch may begin below its offset)."""
        self.waits.append(max_wait_ms)
        hw = self.behind.pop(0) if len(self.behind) > 1 else next(iter(self.behind), self.end)
        stop = min(self.end if self.missing_from is None else min(self.end, self.missing_from), hw)
        base = max(offset - offset % 10, self.start)
        last = min(stop, base + 10)
        records = b""
        if base < last:
            records = encode_batch(build_batch(base, [(None, b"v", 0, ()) for _ in range(base, last)]))
        return {"error_code": 0, "log_start_offset": self.start, "high_watermark": hw, "records": records}


def _read(client: TieredClient, **kwargs: object) -> list[int]:
    async def go() -> list[int]:
        return [r.offset async for r in client.consume("t", 0, **kwargs)]  # type: ignore[arg-type]

    return asyncio.run(go())


def test_a_whole_log_is_read_from_its_start_to_its_end():
    assert _read(ScriptedLeader(start=5, end=42)) == list(range(5, 42))


def test_max_records_stops_early_without_an_error():
    assert _read(ScriptedLeader(start=0, end=100), max_records=15) == list(range(15))


def test_a_leader_that_returns_nothing_before_its_end_is_records_missing():
    with pytest.raises(RecordsMissing, match=r"read 30 record\(s\).*offset 30 though its log ends at 100"):
        _read(ScriptedLeader(start=0, end=100, missing_from=30))


def test_a_new_leader_whose_high_watermark_lags_is_waited_for_with_long_polls_and_nothing_is_missing():
    """The read began against one leader (end 40); the next answers at offset 30 with its high watermark still at
    30, twice, then catches up: the read waits (long polls) and returns every record."""
    leader = ScriptedLeader(start=0, end=40, behind=[40, 40, 40, 30, 30, 40])
    assert _read(leader) == list(range(40))
    assert leader.waits == [0, 0, 0, 0, LONG_POLL_MS, LONG_POLL_MS], "long polls only while the leader lagged"


def test_a_high_watermark_that_stays_behind_ends_the_read_as_records_missing_after_the_timeout():
    leader = ScriptedLeader(start=0, end=40, behind=[40, 40, 40, 30])
    leader.timeout_s = 0.05
    with pytest.raises(RecordsMissing, match=r"read 30 record\(s\), then the leader's high watermark stayed at 30"):
        _read(leader)


def test_an_empty_log_reads_nothing_without_an_error():
    assert _read(ScriptedLeader(start=7, end=7)) == []

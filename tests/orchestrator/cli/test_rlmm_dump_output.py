"""What ``tieredctl rlmm dump`` prints for each record it reads, in both formats, and ``topic list``'s internal topics:
pure rendering of views (orchestrator.cli.rlmm, views, render_text, render_json, output)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncGenerator

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.rlmm import INTERRUPTED, _stopped_by_sigint, decoded, next_record
from orchestrator.cli.views import RlmmDumpEnded, TopicList
from orchestrator.client import PartitionRecord, TieringStatus
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, SegmentState, TieredState, make_record
from remote_storage.rlmm_topic.formatter import format_text, to_json
from remote_storage.rlmm_topic.serde import encode_value

pytestmark = pytest.mark.unit

TOPIC_ID = Uuid.from_string("xX9kP3q1T0uC5cZx2o8y1w")
SEGMENT_ID = Uuid.from_string("AAECAwQFBgcICQoLDA0ODw")


def copy_finished() -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        remote_log_segment_id={
            "topic_id_partition": {"name": "orders", "id": TOPIC_ID, "partition": 3},
            "id": SEGMENT_ID,
        },
        broker_id=2,
        event_timestamp_ms=1_700_000_001_000,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_FINISHED),
        tiered_epoch=4,
    )


def read(value: bytes | None, *, partition: int = 17, offset: int = 42) -> PartitionRecord:
    return PartitionRecord(partition, offset, 1_700_000_002_000, None, value, (("tieredctl.rlmm.offset", b"9"),))


def test_a_record_prints_as_kafkas_console_consumer_prints_it_with_the_rlmm_formatter(capsys) -> None:
    view = decoded(read(encode_value(copy_finished())))
    assert view.record is not None and view.record.fields == copy_finished().fields
    Output("text").show(view)
    line = capsys.readouterr().out
    assert line == format_text(copy_finished(), partition=17, offset=42) + "\n"
    assert line.startswith(
        "partition: 17, offset: 42, value: RemoteLogSegmentMetadataUpdate{remoteLogSegmentId=RemoteLogSegmentId{"
        "topicIdPartition=xX9kP3q1T0uC5cZx2o8y1w:orders-3, id=AAECAwQFBgcICQoLDA0ODw}, customMetadata=Optional.empty, "
        "state=COPY_SEGMENT_FINISHED, eventTimestampMs=1700000001000, brokerId=2}"
    )


def test_in_json_each_record_is_one_compact_line_with_its_partition_and_offset(capsys) -> None:
    output = Output("json")
    output.show(decoded(read(encode_value(copy_finished()), offset=0)))
    output.show(decoded(read(encode_value(copy_finished()), offset=1)))
    lines = capsys.readouterr().out.splitlines()
    documents = [json.loads(line) for line in lines]
    assert len(lines) == 2 and lines == [json.dumps(d, separators=(",", ":")) for d in documents], "compact lines"
    assert documents[0] == json.loads(json.dumps(to_json(copy_finished(), partition=17, offset=0)))
    assert [(d["partition"], d["offset"], d["state"], d["tiered_epoch"]) for d in documents] == [
        (17, 0, "COPY_SEGMENT_FINISHED", 4),
        (17, 1, "COPY_SEGMENT_FINISHED", 4),
    ]


def test_a_value_that_does_not_decode_is_shown_with_why_and_the_dump_goes_on(capsys) -> None:
    junk = decoded(read(b"\x01\x07\x00garbage"))
    empty = decoded(read(None, offset=43))
    assert junk.record is None and junk.size == 10 and junk.error
    assert (empty.record, empty.error) == (None, "a null value")
    Output("text").show(junk)
    Output("json").show(empty)
    text, document = capsys.readouterr().out.splitlines()
    assert text == f"partition: 17, offset: 42, undecodable value (10 bytes): {junk.error}"
    assert json.loads(document) == {"partition": 17, "offset": 43, "size": 0, "error": "a null value"}


def test_the_end_of_a_dump_is_counted_on_stderr_in_text_and_leaves_json_stdout_to_the_records(capsys) -> None:
    Output("text").show(RlmmDumpEnded(records=3, undecodable=0, reason="end"))
    Output("text").show(RlmmDumpEnded(records=4, undecodable=1, reason="interrupted"))
    Output("json").show(RlmmDumpEnded(records=4, undecodable=1, reason="timeout"))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "Processed a total of 3 messages",
        "Processed a total of 4 messages (1 undecodable)",
    ]


def test_waiting_for_the_next_record_ends_at_the_end_or_after_the_timeout() -> None:
    async def two() -> AsyncGenerator[PartitionRecord, None]:
        yield read(b"a")
        yield read(b"b")

    async def silent() -> AsyncGenerator[PartitionRecord, None]:
        await asyncio.Event().wait()  # no record ever comes
        yield read(b"never")

    async def go() -> None:
        records = two()
        assert [await next_record(records, None), await next_record(records, 5), await next_record(records, 5)] == [
            read(b"a"),
            read(b"b"),
            None,
        ]
        with pytest.raises(TimeoutError):
            await next_record(silent(), 0.01)

    asyncio.run(go())


def test_a_stop_ends_the_wait_for_a_record_that_never_comes_and_the_read_unwinds_first() -> None:
    unwound: list[str] = []

    async def silent() -> AsyncGenerator[PartitionRecord, None]:
        try:
            await asyncio.Event().wait()  # no record ever comes, and no timeout is asked for
            yield read(b"never")
        finally:
            unwound.append("read")

    async def go() -> None:
        stop = asyncio.Event()
        records = silent()
        asyncio.get_running_loop().call_soon(stop.set)  # Ctrl-C, once the wait has begun
        assert await next_record(records, None, stop) is INTERRUPTED
        assert unwound == ["read"]
        await records.aclose()

    asyncio.run(go())


def test_sigint_is_the_dumps_only_inside_and_the_handler_before_is_back_after() -> None:
    async def go() -> None:
        before = signal.getsignal(signal.SIGINT)  # asyncio's runner's, which turns Ctrl-C into a cancellation
        stop = asyncio.Event()
        with _stopped_by_sigint(stop):
            assert signal.getsignal(signal.SIGINT) is not before
        assert signal.getsignal(signal.SIGINT) is before

    asyncio.run(go())


@pytest.mark.parametrize("before", [signal.SIG_IGN, signal.SIG_DFL])
def test_an_ignored_or_default_sigint_is_left_as_it_was_after_the_dump(before: signal.Handlers) -> None:
    """A process started with Ctrl-C ignored (``nohup``, a background job of a script) keeps it ignored: asyncio's
    runner installs no handler of its own then, and the one before is not a function."""
    saved = signal.signal(signal.SIGINT, before)
    try:

        async def go() -> None:
            with _stopped_by_sigint(asyncio.Event()):
                assert signal.getsignal(signal.SIGINT) is not before
            assert signal.getsignal(signal.SIGINT) is before

        asyncio.run(go())
    finally:
        signal.signal(signal.SIGINT, saved)


def _status(name: str) -> TieringStatus:
    return TieringStatus(
        topic=name,
        topic_id=Uuid.random(),
        state=TieredState.NOT_TIERED,
        tiered_epoch=0,
        policy=DisablePolicy.NONE,
        partition_count=50 if name.startswith("__") else 3,
        pending_brokers=(),
    )


def test_topic_list_marks_an_internal_topic_it_was_asked_to_show(capsys) -> None:
    view = TopicList([_status("orders"), _status("__remote_log_metadata")], frozenset({"__remote_log_metadata"}))
    Output("json").show(view)
    document = json.loads(capsys.readouterr().out)
    assert [(t["topic"], t["internal"]) for t in document] == [("orders", False), ("__remote_log_metadata", True)]
    Output("text").show(view)
    assert "__remote_log_metadata (internal)" in capsys.readouterr().out

"""A broker whose data directory is lost between ``cluster down`` and ``cluster up`` rebuilds each partition's log from
the RLMM: Kafka's own clients read every tiered record back at its offset from S3, a new produce gets offsets past
every offset the RLMM knows (none handed out twice), the idempotent producer is known as the newest segment's
producer snapshot in S3 left it, and an offset whose records were only local is Kafka's OFFSET_OUT_OF_RANGE, never
an empty read."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.broker.producer_state import parse_snapshot
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.local.state import STORE_FILE
from orchestrator.metadata.records import SegmentState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.support.kafka_clients import ClientReportedError, confluent_watermarks, consume_confluent, produce_confluent
from tests.support.live_cluster import fast_up, run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "tiered"
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "4096"}


def _up(directory, **kwargs):
    return fast_up(directory, brokers=1, controllers=1, **kwargs)


def _create_topic(state) -> None:
    async def go():
        async with TieredClient(state.bootstrap_server, timeout_s=10) as c:
            await c.create_topic(TOPIC, partitions=1, configs=TIERED)

    run(go())


def _rlmm_segments(directory):
    store = SqliteMetadataStore(directory / STORE_FILE)
    try:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.refresh()
        return [s for tid in rlmm.topic_ids() if rlmm.topic_name(tid) == TOPIC for s in rlmm.segments(tid, 0)]
    finally:
        store.close()


def _copied_end(directory) -> int:
    finished = [s for s in _rlmm_segments(directory) if s.state == SegmentState.COPY_SEGMENT_FINISHED]
    return max((s.end_offset for s in finished), default=-1)


def _watermarks(boot: str, timeout_s: float = 10.0) -> tuple[int, int] | None:
    try:
        return confluent_watermarks(boot, TOPIC, [0], timeout_s=timeout_s)[0]
    except ClientReportedError:
        return None


def test_a_lost_data_directory_is_rebuilt_from_the_rlmm_and_no_offset_is_handed_out_twice(
    cluster_dir, moto_endpoint, s3_client
):
    s3_client.create_bucket(Bucket="lost-dir")
    state = _up(cluster_dir, s3_endpoint=moto_endpoint, bucket="lost-dir")
    boot = state.bootstrap_server
    _create_topic(state)
    records = [(0, None, f"r{i}".encode().ljust(100, b".")) for i in range(1500)]
    # batches of 20 records: the 4 KiB segments roll every batch or two, and most of them get tiered; idempotent,
    # so each segment uploads a producer snapshot that names the producer
    acked = produce_confluent(boot, TOPIC, records, **{"batch.num.messages": 20, "enable.idempotence": True})
    assert [offset for _, offset, _, _ in acked] == list(range(1500))
    # most of it copied to S3 (local retention 0 trims the local copies); the active segment stays local only
    wait_until("segments copied", lambda: _copied_end(cluster_dir) >= 1000, 60)
    copied_end = _copied_end(cluster_dir)
    assert copied_end < 1499, "the newest records are in the active segment, not tiered"

    lc.down(cluster_dir)
    shutil.rmtree(cluster_dir / "data" / "broker-1")
    state = _up(cluster_dir)
    boot = state.bootstrap_server

    known_end = max(s.end_offset for s in _rlmm_segments(cluster_dir))
    # the restarted broker serves once its new incarnation is registered (until then Metadata may still name the
    # address its last one had)
    # (asked every 2 s: a call that reaches it before then waits out its whole timeout)
    first, end = wait_until("the restarted broker to serve", lambda: _watermarks(boot, timeout_s=2.0), 60)
    assert (first, end) == (0, known_end + 1), "the log is rebuilt after every offset the RLMM knows"

    # every record the remote tier holds is read back from S3 at its offset, by a third-party client (a copy that
    # a stop cut short holds nothing readable: its offsets, after the last finished one, are lost with the disk)
    finished_end = _copied_end(cluster_dir)
    assert finished_end >= copied_end
    # the rebuilt log knows the idempotent producer as the newest finished segment's snapshot in S3 left it
    snapshot = cluster_dir / "data" / "broker-1" / f"{TOPIC}-0" / f"{known_end + 1:020d}.snapshot"
    [producer] = parse_snapshot(snapshot.read_bytes())
    assert producer.producer_id >= 0 and producer.last_offset == finished_end
    read = consume_confluent(boot, TOPIC, [0], until={0: finished_end + 1}, timeout_s=60)
    assert [(o, v) for _, o, _, v in read] == [(o, v) for _, o, _, v in acked[: finished_end + 1]]

    from confluent_kafka import KafkaError

    # an offset whose record was only local: Kafka's error for a missing offset, not an empty read
    lost = acked[-1][1]
    assert lost >= end
    with pytest.raises(ClientReportedError) as exc:
        consume_confluent(boot, TOPIC, [0], from_offset=lost, until={0: lost + 1}, **{"auto.offset.reset": "error"})
    assert exc.value.reported.code() == KafkaError._AUTO_OFFSET_RESET, exc.value  # librdkafka's OFFSET_OUT_OF_RANGE

    # new records go after everything the remote tier holds: no offset it knows is handed out again
    new = produce_confluent(boot, TOPIC, [(0, None, f"new{i}".encode()) for i in range(5)], acks="all")
    assert [o for _, o, _, _ in new] == list(range(end, end + 5))
    again = consume_confluent(boot, TOPIC, [0], from_offset=end, until={0: end + 5})
    assert [v for _, _, _, v in again] == [f"new{i}".encode() for i in range(5)]

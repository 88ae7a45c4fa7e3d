"""What a broker's metrics show: the copy lag its copy passes leave, and the remote data its deletions remove (a
real SQLite store, real segment files, moto's S3 server)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.broker.metrics_view import broker_view
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metrics import CopyLag, RemoteStorageMetrics
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter

pytestmark = pytest.mark.integration


@pytest.fixture
def writer(tmp_path):
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    yield ControllerWriter(store)
    store.close()


def _broker(tmp_path, s3_client, bucket: str) -> BrokerUnderTest:
    files = {"data_dir": tmp_path / "broker-1", "store_path": tmp_path / "metadata.db"}
    return BrokerUnderTest(broker_id=1, **files, s3_client=s3_client, bucket=bucket)


def test_segments_a_copy_pass_could_not_copy_are_the_copy_lag_until_the_topic_stops_tiering(
    tmp_path, writer, s3_client
):
    broker = _broker(tmp_path, s3_client, "no-such-bucket")  # every upload fails
    try:
        tid = writer.create_topic("orders", partitions=2)
        broker.produce(tid, 60)
        assert broker.tier(tid) == 0
        closed = [s for s in broker.log(tid).segments()[:-1]]
        assert closed
        lag = broker.rlm.copy_lag()[(tid, 0)]
        assert (lag.segments, lag.bytes) == (len(closed), sum(s.size_bytes for s in closed))
        image = broker.follower.refresh()
        view = broker_view(image, broker_id=1, copy_lag=broker.rlm.copy_lag(), log_end_offset=image.offset + 1)
        assert view.copy_lag == (CopyLag("orders", 0, lag.segments, lag.bytes),)
        assert view.metadata.follower_lag_records == 0
        elsewhere = broker_view(image, broker_id=2, copy_lag=broker.rlm.copy_lag(), log_end_offset=None)
        assert elsewhere.copy_lag == (), "only partitions this broker leads"
        writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN)
        image = broker.follower.refresh()
        assert broker_view(image, broker_id=1, copy_lag=broker.rlm.copy_lag(), log_end_offset=None).copy_lag == ()
        broker.rlm.copy_partition(tid, 0)
        assert broker.rlm.copy_lag() == {}, "a partition that may not copy has no copy lag"
    finally:
        broker.close()


def test_the_copy_lag_shows_what_is_owed_while_an_upload_is_under_way_not_only_after_the_pass(
    tmp_path, writer, s3_client, bucket
):
    """An upload stuck on S3 keeps its pass from ending: the lag must show then, when it matters."""
    broker = _broker(tmp_path, s3_client, bucket)
    tid = writer.create_topic("orders")
    seen: list[tuple[int, int]] = []

    def during_upload(**_kwargs: object) -> None:  # in the copying thread, as each object goes up
        lag = broker.rlm.copy_lag().get((tid, 0))
        seen.append((lag.segments, lag.bytes) if lag is not None else (0, 0))

    s3_client.meta.events.register("before-send.s3.PutObject", during_upload)
    try:
        broker.produce(tid, 60)
        broker.log(tid).roll()
        closed = broker.log(tid).closed_segments()
        assert len(closed) >= 2
        assert broker.rlm.copy_partition(tid, 0).copied == len(closed)
        first = seen[0]
        assert first == (len(closed), sum(c.size_bytes for c in closed)), "all of it owed as the first upload runs"
        assert seen[-1][0] == 1, "the last segment is still owed while it goes up"
        assert broker.rlm.copy_lag()[(tid, 0)].segments == 0
    finally:
        s3_client.meta.events.unregister("before-send.s3.PutObject", during_upload)
        broker.close()


def test_a_partition_copied_up_to_date_has_no_lag_and_one_no_longer_led_is_forgotten(
    tmp_path, writer, s3_client, bucket
):
    broker = _broker(tmp_path, s3_client, bucket)
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 60)
        assert broker.tier(tid) > 0
        lag = broker.rlm.copy_lag()[(tid, 0)]
        assert (lag.segments, lag.bytes) == (0, 0)
        broker.rlm.retain_copy_lag([])
        assert broker.rlm.copy_lag() == {}
    finally:
        broker.close()


def test_a_delete_disablement_counts_the_objects_segments_and_bytes_it_removed(tmp_path, writer, s3_client, bucket):
    broker = _broker(tmp_path, s3_client, bucket)
    registry = CollectorRegistry()
    broker.rsm.metrics = RemoteStorageMetrics(registry)
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 60)
        copied = broker.tier(tid)
        assert copied > 0
        broker.rlmm.refresh()
        size = sum(s.size_bytes for s in broker.rlmm.segments(tid))
        writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
        assert broker.disable(tid, controller_epoch=writer.epoch)["error_code"] == 0
        families = text_string_to_metric_families(generate_latest(registry).decode())
        got = {s.name: s.value for f in families for s in f.samples if not s.labels}
        assert got["tieredctl_remote_segments_deleted_total"] == copied
        assert got["tieredctl_remote_objects_deleted_total"] == 3 * copied  # .log, .indexes, .rsm-manifest
        assert got["tieredctl_remote_bytes_deleted_total"] == size
    finally:
        broker.close()

"""The README's "Scan and reclaim" commands (``scan run --source kafka``, ``reclaim``) on our own live cluster:
the metadata read over the Kafka protocol (Metadata, DescribeConfigs, every record of ``__remote_log_metadata``)
gives the same scan, object by object and byte for byte, as ``--source store`` on the same cluster, bucket and
inventory; ``reclaim`` of it re-reads the metadata topic. The commands are read from the README's block, their
placeholders filled in for this cluster, with only test settings added (no grace period, no orphan-ratio guard).

The cluster: one controller and one broker writing Aiven's format (chunked, compressed, custom metadata with the
remote size), on the cluster's embedded S3. Planted in its bucket beside what the broker tiered:

============  ==========================================================  ====================================
topic         state                                                       planted object, and the scan says
============  ==========================================================  ====================================
``orders``    ENABLED, tiered segments                                    one with no RLMM record: no_rlmm_entry
``clicks``    disabled with the delete policy (DISABLED)                  one left over: disabled_delete
``gone``      tiered, then deleted                                        one left over: deleted_topic
(none)        an id no cluster ever had                                   unknown_topic
============  ==========================================================  ====================================

and one multipart upload begun under ``orders`` and never completed: both scans list it, reclaim aborts it.

The Spark scans share the test session's SparkSession (one per source). The refusal of a metadata topic that does
not keep every record is checked on the same cluster by pointing ``--rlmm-topic`` at an ordinary topic (7-day
retention): our cluster refuses any config change of ``__remote_log_metadata`` itself.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from orchestrator.cli import cli
from orchestrator.client import TieredClient
from orchestrator.errors import UnknownTopicOrPartition
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from policies.reclaim import NO_LONGER_RECLAIMABLE
from remote_storage.keys import SegmentKey, Suffix, build_key
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.scan import contract as c
from tests.support import REPO_ROOT
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

RECORDS = 400
VALUE = 100
RSM = {"chunk_size": 1024, "compression_enabled": True, "custom_metadata_fields_include": ["REMOTE_SIZE"]}
UPLOADED = 321  # the bytes of the one incomplete multipart upload
COMMON = ["--grace", "0s", "--max-anomalies", "1000", "--driver-memory", "1g"]


@dataclass
class World:
    cluster: LiveCluster
    s3: Any
    inventory: Path
    planted: dict[str, str]  # what it is -> its key
    segments: dict[str, SegmentKey]  # what it is -> its segment
    work: Path


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    """The CLI in-process; log events are captured (the real entry point sends them to stderr)."""
    with capture_logs():
        return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def readme_commands() -> list[list[str]]:
    """The commands of the README's "Scan and reclaim" block, each as its words (comments dropped)."""
    section = (REPO_ROOT / "README.md").read_text().split("### Scan and reclaim\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def _as_run_here(world: World, command: list[str]) -> tuple[list[str], dict[str, str]]:
    """A README command with its placeholders filled in for the test's cluster and files, and the environment it
    runs in (the S3 key pair, as AWS's variables give it)."""
    state = world.cluster.state
    assert command[0] == "tieredctl" and state.prefix == "tiered/"  # the README's prefix
    properties = world.work / "client.properties"
    properties.write_text("security.protocol=PLAINTEXT\n")
    values = {
        "$BOOTSTRAP": world.cluster.bootstrap,
        "$BUCKET": state.bucket,
        "$S3_ENDPOINT": state.s3_endpoint,
        "$INVENTORY": str(world.inventory),
        "client.properties": str(properties),
        "./scan": str(world.work / "scan-kafka"),  # absolute: the shared Spark JVM has another working directory
    }
    key, secret = state.s3_credentials or ("", "")
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    return [values.get(word, word) for word in command[1:]], env


def _store_records(cluster: LiveCluster) -> int:
    with SqliteMetadataStore(cluster.dir / "metadata.db", recover_on_open=False) as store:
        return sum(1 for _ in store.read_remote_log_metadata())


def _published(cluster: LiveCluster) -> int:
    """The records the metadata topic holds; -1 while it does not exist (the controller creates it once the brokers'
    set has settled, which a quick fixture can beat)."""

    async def count(c: TieredClient) -> int:
        try:
            topic = await c.topic(TOPIC_NAME)
        except UnknownTopicOrPartition:
            return -1
        return sum([await c.list_offset(TOPIC_NAME, p["partition_index"], -1) for p in topic["partitions"]])

    return cluster.call(count)


def _wait_published(cluster: LiveCluster) -> None:
    """Until every RLMM record of the store is in the metadata topic (the brokers publish every 200 ms)."""
    wait_until("the RLMM published", lambda: _published(cluster) == _store_records(cluster) > 0, timeout_s=60)


def _tiered_topic(cluster: LiveCluster, name: str) -> Uuid:
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    cluster.call(lambda c: c.create_topic(name, partitions=1, configs=configs))
    values = [f"{name}-{i:05d}-".encode() * (VALUE // 12) for i in range(RECORDS)]
    cluster.call(lambda c: c.produce(name, values))
    topic_id: Uuid = cluster.status(name).topic_id
    cluster.wait_tiering_settled(topic_id, 3)
    return topic_id


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    work = tmp_path_factory.mktemp("kafka-source")
    cluster = LiveCluster(work / "cluster", brokers=1, controllers=1, broker_overrides={"rsm": RSM})
    try:
        state = cluster.state
        s3 = lc.s3_client(state)
        orders = _tiered_topic(cluster, "orders")
        clicks = _tiered_topic(cluster, "clicks")
        gone = _tiered_topic(cluster, "gone")
        cluster.call(lambda c: c.disable_tiering("clicks", "delete"))
        wait_until("clicks disabled", lambda: cluster.status("clicks").state == TieredState.DISABLED, timeout_s=60)
        cluster.call(lambda c: c.delete_topic("gone"))
        wait_until("gone's remote data deleted", lambda: not cluster.call(lambda c: c.remote_deletions()), timeout_s=60)

        def plant(what: str, topic: str, topic_id: Uuid) -> None:
            segment = SegmentKey(topic, topic_id, 0, 10**6, Uuid.random())
            key = build_key(state.prefix, segment, Suffix.LOG)
            s3.put_object(Bucket=state.bucket, Key=key, Body=what.encode() * 50)
            planted[what], segments[what] = key, segment

        planted: dict[str, str] = {}
        segments: dict[str, SegmentKey] = {}
        plant(c.NO_RLMM_ENTRY, "orders", orders)
        plant(c.DISABLED_DELETE, "clicks", clicks)
        plant(c.DELETED_TOPIC, "gone", gone)
        plant(c.UNKNOWN_TOPIC, "ghost", Uuid.random())
        unfinished = s3.create_multipart_upload(Bucket=state.bucket, Key=f"{state.prefix}orders-{orders}/0/x.log")
        upload = {"Bucket": state.bucket, "Key": unfinished["Key"], "UploadId": unfinished["UploadId"]}
        s3.upload_part(**upload, PartNumber=1, Body=b"u" * UPLOADED)
        _wait_published(cluster)
        inventory = work / "inventory"
        built = _invoke("inventory", "build", "--cluster-dir", str(cluster.dir), "--dest", str(inventory))
        assert built.exit_code == 0, built.output
        yield World(cluster, s3, inventory, planted, segments, work)
    finally:
        cluster.close()


def _scan(world: World, out: Path) -> dict[str, Any]:
    where = ["--cluster-dir", str(world.cluster.dir), "--inventory", str(world.inventory), "--out", str(out)]
    result = _invoke("scan", "run", *where, *COMMON)
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads((out / c.SUMMARY_FILE).read_text())
    return summary


def _objects(out: Path) -> dict[str, tuple[str, bool, int]]:
    rows = pq.read_table(out / c.OBJECTS_DIR).to_pylist()
    return {r["key"]: (r["category"], r["reclaimable"], r["size"]) for r in rows}


def _per_topic(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("objects", "bytes", "reclaimable_bytes", "reclaimable_objects", "anomalies", "deleted", "known")
    return {t["topic_id"]: {k: t[k] for k in keep} for t in summary["topics"]}


@pytest.fixture(scope="module")
def scans(world: World, spark: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    store = _scan(world, world.work / "scan-store")
    args, env = _as_run_here(world, readme_commands()[0])  # the README's scan of a Kafka cluster
    result = _invoke(*args, *COMMON, env=env)
    assert result.exit_code == 0, result.output
    kafka = json.loads((world.work / "scan-kafka" / c.SUMMARY_FILE).read_text())
    return store, kafka


def test_the_kafka_source_scan_agrees_with_the_store_scan_object_by_object_and_byte_for_byte(
    world: World, scans: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    store, kafka = scans
    by_store, by_kafka = _objects(world.work / "scan-store"), _objects(world.work / "scan-kafka")
    assert by_kafka == by_store
    categories = {key: by_store[key][0] for key in world.planted.values()}
    assert categories == {key: what for what, key in world.planted.items()}
    live = [k for k, (category, _, _) in by_store.items() if category == c.LIVE]
    assert len(live) >= 9  # orders' three or more segments, three objects each
    assert kafka["totals"] == store["totals"]
    uploads = {"listed": True, "count": 1, "bytes": UPLOADED, "file": c.UPLOADS_FILE}
    assert kafka["multipart_uploads"] == store["multipart_uploads"] == uploads
    assert _per_topic(kafka) == _per_topic(store)
    assert store["export"]["source"]["source"] == "store"
    recorded = kafka["export"]["source"]
    assert recorded["source"] == "kafka" and recorded["rlmm_topic"] == TOPIC_NAME
    assert recorded["bootstrap_servers"] == world.cluster.bootstrap and recorded["records"] == _store_records(
        world.cluster
    )


def test_a_metadata_topic_with_time_retention_is_refused_naming_it_and_nothing_is_written(world: World) -> None:
    out = world.work / "scan-refused"
    where = ["--cluster-dir", str(world.cluster.dir), "--inventory", str(world.inventory), "--out", str(out)]
    args = ["--bootstrap-server", world.cluster.bootstrap, "scan", "run", "--source", "kafka", "--rlmm-topic"]
    result = _invoke(*args, "orders", *where, *COMMON)
    assert result.exit_code == 1
    assert "RLMM_TOPIC_NOT_KEPT" in result.output and "orders" in result.output
    assert "retention.ms is 604800000" in result.output and "--source store" in result.output
    assert not (out / c.SUMMARY_FILE).exists() and not (out / c.EXPORT_DIR / "segments.parquet").exists()


def test_reclaim_of_a_kafka_scan_rereads_the_metadata_topic_and_skips_a_segment_recorded_since(
    world: World, scans: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    dry_run, execute = readme_commands()[1:]  # the README's reclaim, then with --execute
    here = ["--older-than", "0s", "--max-orphan-ratio", "1", "--output", "json"]
    args, env = _as_run_here(world, dry_run)
    dry = json.loads(_invoke(*args, *here, env=env).stdout)
    assert dry["metadata_source"] == f"kafka {world.cluster.bootstrap} {TOPIC_NAME}"
    assert dry["planned_objects"] == 4 and dry["warnings"] == [] and sum(dry["skipped"].values()) == 0
    assert dry["multipart_uploads"]["planned"] == 1 and dry["multipart_uploads"]["aborted"] == 0

    # The no_rlmm_entry object's segment is recorded copied now: the re-read of the topic makes it live.
    key, planted = world.planted[c.NO_RLMM_ENTRY], world.segments[c.NO_RLMM_ENTRY]
    epoch = world.cluster.status("orders").tiered_epoch
    start = planted.start_offset
    segment = RemoteSegment("orders", planted.topic_id, 0, planted.segment_id, start, start + 9, 0, 123, epoch)
    with SqliteMetadataStore(world.cluster.dir / "metadata.db", recover_on_open=False) as store:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.copy_finished(rlmm.copy_started(segment, now_ms=1), broker_id=1, now_ms=2)
    _wait_published(world.cluster)

    args, env = _as_run_here(world, execute)
    done = json.loads(_invoke(*args, *here, env=env).stdout)
    assert done["deleted_objects"] == 3 and done["metadata_source"] == dry["metadata_source"]
    assert done["skipped"].get(NO_LONGER_RECLAIMABLE) == 1 and sum(done["skipped"].values()) == 1
    assert done["multipart_uploads"]["aborted"] == 1 and done["multipart_uploads"]["aborted_bytes"] == UPLOADED
    state = world.cluster.state
    assert world.s3.head_object(Bucket=state.bucket, Key=key)["ContentLength"] > 0
    for what in (c.DISABLED_DELETE, c.DELETED_TOPIC, c.UNKNOWN_TOPIC):
        assert world.s3.list_objects_v2(Bucket=state.bucket, Prefix=world.planted[what])["KeyCount"] == 0

"""``tieredctl reclaim`` against moto's S3 server and a real SQLite metadata store.

The scan's output is built here without Spark: the bucket is listed, classified by the reference classifier
(:func:`policies.orphans.classify`) against a metadata export, and written as a Parquet directory with one part file
and ``_SUCCESS`` (as Spark writes it) in the contract's columns, plus ``summary.json``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from orchestrator.cli import cli
from orchestrator.errors import ReclaimInProgress
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from policies.reclaim_executor import (
    JOURNAL_FILE,
    LOCK_FILE,
    ReclaimOptions,
    ScanOutput,
    load_current_metadata,
    reclaim,
)
from remote_storage.export import export_metadata
from remote_storage.keys import SegmentKey, Suffix, build_key, parse_key, segment_keys
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import DeleteOutcome, S3RemoteStorage
from remote_storage.scan import contract as c
from tests.support.broker_harness import ControllerWriter
from tests.support.scan_output import PREFIX, wall_ms, write_scan

pytestmark = pytest.mark.integration


# -- a bucket and a metadata store with live data and every kind of orphan -----------------------------------------


@dataclass
class World:
    bucket: str
    store_path: Path
    out: Path
    s3_client: object
    keys: dict[str, list[str]] = field(default_factory=dict)  # what -> its object keys
    segments: dict[str, RemoteSegment] = field(default_factory=dict)
    orders: Uuid | None = None

    def listing(self) -> dict[str, int]:
        rsm = S3RemoteStorage(client=self.s3_client, bucket=self.bucket, prefix=PREFIX)
        return {o.key: o.size for o in rsm.list_objects("")}

    @property
    def reclaimable(self) -> set[str]:
        return {k for what in ("deleted", "no_rlmm", "copy_started", "unknown") for k in self.keys[what]}

    def rlmm(self, fn) -> None:
        with SqliteMetadataStore(self.store_path) as store:
            fn(RemoteLogMetadataManager(store))


def _segment(topic: str, tid: Uuid, start: int, *, size: int = 300) -> RemoteSegment:
    return RemoteSegment(topic, tid, 0, Uuid.random(), start, start + 9, wall_ms() - 1000, size, 1)


def _put_segment(s3_client, bucket: str, seg: RemoteSegment) -> list[str]:
    keys = segment_keys(PREFIX, seg.key)
    for suffix, key in keys.items():
        body = b"x" * seg.size_bytes if suffix.value == "log" else b"{}" if suffix.value == "rsm-manifest" else b"ii"
        s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    return list(keys.values())


@pytest.fixture
def world(tmp_path: Path, s3_client, bucket: str) -> World:
    w = World(bucket, tmp_path / "metadata.db", tmp_path / "scan", s3_client)
    now = wall_ms()
    with SqliteMetadataStore(w.store_path) as store:
        writer = ControllerWriter(store)
        rlmm = RemoteLogMetadataManager(store)
        # a live topic: four copied segments, one copy in flight, one object set the RLMM never heard of
        orders = w.orders = writer.create_topic("orders")
        live = [_segment("orders", orders, i * 10) for i in range(4)]
        started = _segment("orders", orders, 40)
        for seg in [*live, started]:
            rlmm.copy_started(seg, now_ms=now)
        rlmm.transition(live, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=now)
        w.keys["live"] = [k for seg in live for k in _put_segment(s3_client, bucket, seg)]
        w.keys["copy_started"] = _put_segment(s3_client, bucket, started)
        no_rlmm = _segment("orders", orders, 50)
        w.keys["no_rlmm"] = _put_segment(s3_client, bucket, no_rlmm)
        w.segments.update(started=started, no_rlmm=no_rlmm, live0=live[0])
        # a topic disabled with delete, then deleted: its objects stayed behind
        old = writer.create_topic("old")
        gone = [_segment("old", old, i * 10) for i in range(2)]
        for seg in gone:
            rlmm.copy_started(seg, now_ms=now)
        rlmm.transition(gone, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=now)
        writer.set_state(old, TieredState.DISABLING, DisablePolicy.DELETE)
        writer.delete_topic(old)
        w.keys["deleted"] = [k for seg in gone for k in _put_segment(s3_client, bucket, seg)]
        # a topic id the metadata never held
        w.keys["unknown"] = _put_segment(s3_client, bucket, _segment("stray", Uuid.random(), 0))
        export_metadata(store, w.out / c.EXPORT_DIR)
    # not tiered storage's, and a key that does not parse: never touched
    s3_client.put_object(Bucket=bucket, Key="backups/readme.txt", Body=b"keep")
    s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}orders-junk/notes.txt", Body=b"keep")
    # No wait before the scan: S3 (and moto) stamp Last-Modified to the second, rounded down, so every object is
    # already at least 0 ms old, which is all --older-than 0s and a grace of 0 ask.
    write_scan(s3_client, bucket, w.out)
    return w


def _cli(w: World, moto_endpoint: str, *args: str, store: bool = True):
    base = ["reclaim", str(w.out), "--s3-endpoint", moto_endpoint, "--older-than", "0s"]
    if store:
        base += ["--metadata-store", str(w.store_path)]
    with capture_logs() as logs:
        result = CliRunner().invoke(cli, [*args[:2], *base, *args[2:]] if args[:1] == ("--output",) else [*base, *args])
    return result, logs


def _run(w: World, *, execute: bool, older_than_ms: int | None = 0, store: Path | None = None, **kw):
    scan = ScanOutput.load(w.out)
    meta = load_current_metadata(store_path=store or w.store_path, scan_export_dir=None, now_ms=wall_ms())
    rsm = S3RemoteStorage(client=w.s3_client, bucket=w.bucket, prefix=PREFIX, sleep=lambda s: None)
    opts = ReclaimOptions(execute=execute, older_than_ms=older_than_ms, **kw)
    return reclaim(scan, rsm=rsm, metadata=meta, options=opts, now_ms=wall_ms)


def _journal(w: World) -> list[dict]:
    return [json.loads(line) for line in (w.out / JOURNAL_FILE).read_text().splitlines()]


# -- the tests -----------------------------------------------------------------------------------------------------


def test_the_scan_helper_classifies_every_kind_of_object(world: World) -> None:
    rows = {r["key"]: r for r in pq.read_table(world.out / c.OBJECTS_DIR).to_pylist()}
    cats = {what: {rows[k]["category"] for k in keys} for what, keys in world.keys.items()}
    expected_categories = {
        "live": {c.LIVE},
        "copy_started": {c.COPY_UNFINISHED},
        "no_rlmm": {c.NO_RLMM_ENTRY},
        "deleted": {c.DELETED_TOPIC},
        "unknown": {c.UNKNOWN_TOPIC},
    }
    assert cats == expected_categories
    assert {k for k, r in rows.items() if r["reclaimable"]} == world.reclaimable
    assert rows["backups/readme.txt"]["category"] == c.OUTSIDE_PREFIX


def test_a_dry_run_deletes_nothing_and_says_what_an_execute_would_delete(world: World, moto_endpoint: str) -> None:
    before = world.listing()
    result, logs = _cli(world, moto_endpoint, "--output", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert world.listing() == before and not (world.out / JOURNAL_FILE).exists()
    assert doc["executed"] is False and doc["deleted_objects"] == 0
    assert doc["planned_objects"] == len(world.reclaimable) == 15
    assert doc["planned_bytes"] == sum(before[k] for k in world.reclaimable)
    objects_by_category = {k: v["objects"] for k, v in doc["planned_by_category"].items()}
    assert objects_by_category == {c.DELETED_TOPIC: 6, c.NO_RLMM_ENTRY: 3, c.COPY_UNFINISHED: 3, c.UNKNOWN_TOPIC: 3}
    assert doc["planned_by_topic"][f"orders-{world.orders}"]["objects"] == 6
    assert doc["metadata_source"] == f"store {world.store_path}" and doc["warnings"] == []
    assert any(e["event"] == "reclaim.planned" and e["objects"] == 15 for e in logs)

    text, _ = _cli(world, moto_endpoint)
    assert text.exit_code == 0, text.output
    assert "dry run" in text.stdout and "would delete 15 objects" in text.stdout and "deleted_topic" in text.stdout
    assert world.listing() == before

    # without a metadata store the scan's own export is used, with a warning
    scan_time, _ = _cli(world, moto_endpoint, store=False)
    assert scan_time.exit_code == 0 and "scan-time metadata" in scan_time.stderr
    assert world.listing() == before


def test_execute_deletes_exactly_the_reclaimable_set_journaled_and_a_second_run_deletes_nothing(
    world: World, moto_endpoint: str
) -> None:
    before = world.listing()
    result, logs = _cli(world, moto_endpoint, "--output", "json", "--execute")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    after = world.listing()
    assert set(before) - set(after) == world.reclaimable and set(after) <= set(before)
    assert doc["deleted_objects"] == 15 and doc["deleted_bytes"] == sum(before[k] for k in world.reclaimable)
    assert doc["failed_keys"] == {}

    lines = _journal(world)
    intents = [x for x in lines if x["type"] == "intent"]
    results = [x for x in lines if x["type"] == "result"]
    assert len(intents) == len(results) == 3  # one batch per topic prefix: orders, old, stray
    assert {k for x in intents for k in x["keys"]} == {k for x in results for k in x["deleted"]} == world.reclaimable
    for x in intents:
        assert all(k.startswith(x["prefix"]) for k in x["keys"])
    assert sum(e["deleted"] for e in logs if e["event"] == "reclaim.batch_deleted") == 15

    again, _ = _cli(world, moto_endpoint, "--output", "json", "--execute")
    assert again.exit_code == 0, again.output
    doc2 = json.loads(again.stdout)
    assert doc2["planned_objects"] == doc2["deleted_objects"] == 0
    assert doc2["skipped"] == {"already_deleted": 15}
    assert world.listing() == after and len(_journal(world)) == 6


def test_a_second_execute_while_one_runs_on_the_scan_is_refused_naming_it_and_deletes_nothing(
    world: World, moto_endpoint: str
) -> None:
    """Two concurrent runs used to both delete and journal the same objects (479 deletions claimed for 303)."""
    before = world.listing()
    holder = os.open(world.out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)  # a run in progress, as the lock says
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(holder, b"4242\n", 0)
        with pytest.raises(ReclaimInProgress, match=r"pid 4242"):
            _run(world, execute=True)
        result, _ = _cli(world, moto_endpoint, "--execute")
        assert result.exit_code == 1 and "RECLAIM_IN_PROGRESS" in result.output
        assert world.listing() == before and not (world.out / JOURNAL_FILE).exists()
        assert _run(world, execute=False).planned_objects == 15, "a dry run takes no lock"
    finally:
        os.close(holder)
    assert _run(world, execute=True).deleted_objects == 15, "once it ended, a run goes ahead"


def test_objects_that_changed_or_became_live_after_the_scan_are_skipped(world: World) -> None:
    changed = world.keys["deleted"][0]
    world.s3_client.put_object(Bucket=world.bucket, Key=changed, Body=b"a different size")
    started, no_rlmm = world.segments["started"], world.segments["no_rlmm"]

    def register(rlmm: RemoteLogMetadataManager) -> None:  # a slow broker finished both copies after the scan
        rlmm.copy_started(no_rlmm, now_ms=wall_ms())
        rlmm.transition([started, no_rlmm], SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=wall_ms())

    world.rlmm(register)
    before = world.listing()
    result = _run(world, execute=True)
    after = world.listing()
    became_live = set(world.keys["copy_started"]) | set(world.keys["no_rlmm"])
    assert set(before) - set(after) == world.reclaimable - became_live - {changed}
    assert became_live <= set(after) and changed in after
    assert result.skipped == {"changed_since_scan": 1, "no_longer_reclaimable": 6}
    assert result.deleted_objects == 8 and result.ok  # 5 of the deleted topic, 3 of the unknown one


def test_a_key_outside_its_topic_prefix_planted_in_the_scan_is_never_deleted(world: World) -> None:
    live_key = world.keys["live"][0]
    deleted_id = parse_key(world.keys["deleted"][0], PREFIX).segment.topic_id
    elsewhere = build_key("elsewhere/", SegmentKey("old", deleted_id, 0, 0, Uuid.random()), Suffix.LOG)
    world.s3_client.put_object(Bucket=world.bucket, Key=elsewhere, Body=b"keep")
    row = {name: None for name, _ in c.OBJECT_COLUMNS}
    claimed_by_deleted = {"topic": "old", "topic_id": str(deleted_id), "category": c.DELETED_TOPIC, "reclaimable": True}
    planted = [
        # a live segment's object, claimed by the deleted topic id
        {**row, "key": live_key, "size": world.listing()[live_key], **claimed_by_deleted},
        # an object under another prefix, claimed by the deleted topic id
        {**row, "key": elsewhere, "size": 4, **claimed_by_deleted},
    ]
    listed = world.s3_client.list_objects_v2(Bucket=world.bucket)["Contents"]
    lm = {o["Key"]: int(o["LastModified"].timestamp() * 1000) for o in listed}
    for p in planted:
        p["last_modified_ms"] = lm[p["key"]]
    write_scan(world.s3_client, world.bucket, world.out, extra_rows=planted)
    result = _run(world, execute=True)
    after = world.listing()
    assert live_key in after and elsewhere in after
    assert result.skipped == {"outside_topic_prefix": 2}
    assert set(world.keys["live"]) <= set(after) and not (world.reclaimable & set(after))


def test_objects_younger_than_older_than_are_kept(world: World, moto_endpoint: str) -> None:
    before = world.listing()
    result, _ = _cli(world, moto_endpoint, "--output", "json", "--execute", "--older-than", "1h")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"] == {"too_young": 15}
    assert world.listing() == before


def test_a_scan_against_the_wrong_metadata_is_refused_unless_forced(world: World, tmp_path: Path) -> None:
    # The scan joined against another cluster's (empty) metadata: every parsed object looks like an unknown topic.
    empty = tmp_path / "other-cluster.db"
    with SqliteMetadataStore(empty) as store:
        export_metadata(store, world.out / c.EXPORT_DIR)
    write_scan(world.s3_client, world.bucket, world.out)
    before = world.listing()
    refused = _run(world, execute=True, store=empty)
    assert refused.run_refused and not refused.ok and "whole run" in refused.refusals[0]
    assert refused.skipped == {"ratio_guard": 27} and refused.deleted_objects == 0
    assert world.listing() == before and not (world.out / JOURNAL_FILE).exists()

    forced = _run(world, execute=True, store=empty, force=True)
    assert forced.ok and forced.deleted_objects == 27 and any("--force" in w for w in forced.warnings)
    assert set(world.listing()) == {"backups/readme.txt", f"{PREFIX}orders-junk/notes.txt"}


def test_usage_errors_exit_2_and_an_unreadable_scan_dir_exits_1_naming_the_file(
    world: World, moto_endpoint: str, tmp_path: Path
) -> None:
    bad_duration, _ = _cli(world, moto_endpoint, "--older-than", "3 days")
    assert bad_duration.exit_code == 2 and "72h" in bad_duration.output
    bad_category, _ = _cli(world, moto_endpoint, "--category", "past_retention")
    assert bad_category.exit_code == 2 and "past_retention" in bad_category.output
    assert "deleted_topic" in bad_category.output
    before = world.listing()
    other, _ = _cli(world, moto_endpoint, "--bucket", f"{world.bucket}-other", "--execute")
    assert other.exit_code == 1 and f"bucket '{world.bucket}', not '{world.bucket}-other'" in other.output
    assert "error: INVALID_ARGUMENT: " in other.output
    assert world.listing() == before

    env = {**os.environ, "TIEREDCTL_S3_ENDPOINT": moto_endpoint}
    command = [sys.executable, "-m", "orchestrator.cli", "reclaim", str(tmp_path / "no-scan")]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert str(tmp_path / "no-scan" / c.SUMMARY_FILE) in proc.stderr and "tieredctl scan run" in proc.stderr


def test_keys_that_fail_to_delete_are_reported_never_counted_and_retried_next_run(world: World) -> None:
    class OneKeyRefused(S3RemoteStorage):
        def delete_keys(self, keys, *, within_prefix):  # type: ignore[no-untyped-def]
            refused = world.keys["unknown"][0]
            outcome = super().delete_keys([k for k in keys if k != refused], within_prefix=within_prefix)
            failed = {refused: "AccessDenied"} if refused in keys else {}
            return DeleteOutcome(outcome.deleted, {**outcome.failed, **failed})

    scan = ScanOutput.load(world.out)
    meta = load_current_metadata(store_path=world.store_path, scan_export_dir=None, now_ms=wall_ms())
    rsm = OneKeyRefused(client=world.s3_client, bucket=world.bucket, prefix=PREFIX)
    options = ReclaimOptions(execute=True, older_than_ms=0)
    result = reclaim(scan, rsm=rsm, metadata=meta, options=options, now_ms=wall_ms)
    refused = world.keys["unknown"][0]
    assert not result.ok and result.failed_keys == {refused: "AccessDenied"}
    assert result.deleted_objects == 14 and refused in world.listing()
    assert any(x["type"] == "result" and x["failed"] == {refused: "AccessDenied"} for x in _journal(world))

    retry = _run(world, execute=True)
    assert retry.ok and retry.deleted_objects == 1 and retry.skipped == {"already_deleted": 14}
    assert not (world.reclaimable & set(world.listing()))

"""Every named crash point on real processes (ARCHITECTURE §4 invariant 8): a controller or broker restarted armed dies
with kill -9 at exactly the named moment (its record line says so, and what the store and the bucket hold at its
death shows the window the point names), and once it is back, unarmed, the work finishes: a disablement is DISABLED
at the epoch the crashed request bumped, and no object of the topic is left in the bucket, every segment
DELETE_SEGMENT_FINISHED in the RLMM; a deleted topic's partitions are all DELETE_PARTITION_FINISHED with nothing
left; a snapshot cut short loses nothing.

One cluster serves the module (each test uses its own topics and leaves every process running unarmed); its S3 is
the session's moto server. Every wait is bounded; no duration is asserted."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator import crash_points
from orchestrator.errors import BrokerNotAvailable, TieredError
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.local.state import ProcessInfo
from orchestrator.metadata.records import PartitionDeleteState, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import topic_prefix
from remote_storage.s3 import make_s3_client
from tests.support.live_cluster import LiveCluster, bucket_keys, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0"}
CONTROLLER = lc.CONTROLLER_ID_BASE
SNAPSHOT_EVERY_RECORDS = 25
FINISHED = PartitionDeleteState.DELETE_PARTITION_FINISHED


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Iterator[LiveCluster]:
    """Two brokers and one controller (the one to crash is then always the active one), which snapshots every
    few records."""
    bucket = "crash-points"
    make_s3_client(endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    directory = tmp_path_factory.mktemp("crash") / "cluster"
    snapshots = {"snapshots": {"every_records": SNAPSHOT_EVERY_RECORDS, "every_ms": 0, "retained": 2}}
    cluster = LiveCluster(
        directory, brokers=2, controllers=1, s3_endpoint=moto_endpoint, bucket=bucket, controller_overrides=snapshots
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _every_process_back(live: LiveCluster) -> Iterator[None]:
    """After each test, start again (unarmed) any process it left dead: a test that fails between a crash and its
    restart must not fail the next ones with it."""
    yield
    for role, ident in (("controller", CONTROLLER), ("broker", 1), ("broker", 2)):
        if not lc.is_ours(live.process(role, ident)):
            _restart(live, role, ident)


def _tiered_topic(live: LiveCluster, name: str, *, settle: bool = True) -> Uuid:
    """A tiered topic of two partitions (one replica each, so each has one leader for good, and both brokers lead
    one), with (``settle``) every partition's closed segments in S3."""
    wait_until("both brokers serving", lambda: _live_brokers(live) == {1, 2}, 30)
    tid = live.call(lambda c: c.create_topic(name, partitions=2, configs=TIERED))
    _produce(live, name, [0, 1], a_broker_may_die=not settle)
    if settle:
        live.wait_tiering_settled(tid, 2)
    return tid


def _produce(live: LiveCluster, name: str, partitions: list[int], *, a_broker_may_die: bool = False) -> None:
    """60 records of 200 bytes to each partition: a few 4 KiB segments each. With ``a_broker_may_die``, a broker
    armed to crash at its first copy may die while its partition is still being written (its first segment closes,
    and is copied, after about 20 records): that partition then gets what was acknowledged before, the others
    everything, and the test's own wait for the crash record says whether the crash was the one armed."""

    async def produce(c: Any) -> None:
        for p in partitions:
            try:
                await c.produce(name, [b"v" * 200 for _ in range(60)], partition=p)
            except BrokerNotAvailable:
                if not a_broker_may_die:
                    raise

    live.call(produce)


def _led_by(live: LiveCluster, name: str, broker: int) -> int:
    partitions = live.call(lambda c: c.topic(name))["partitions"]
    return next(p["partition_index"] for p in partitions if p["leader_id"] == broker)


def _partition_states(live: LiveCluster, tid: Uuid) -> dict[int, PartitionDeleteState]:
    """The latest RemotePartitionDeleteMetadata state of each partition of the topic id, from the shared store."""
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        out: dict[int, PartitionDeleteState] = {}
        for e in store.read_remote_log_metadata(topic_id=tid):
            if e.record.name == "RemotePartitionDeleteMetadataRecord":
                f = e.record.fields
                out[f["topic_id_partition"]["partition"]] = PartitionDeleteState(f["remote_partition_delete_state"])
        return out


def _segments_of(live: LiveCluster, tid: Uuid, partition: int) -> dict[Uuid, list[SegmentState]]:
    """The segments of one partition with their RLMM states in order."""
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        out: dict[Uuid, list[SegmentState]] = {}
        for e in store.read_remote_log_metadata(topic_id=tid):
            f = e.record.fields
            segment = f.get("remote_log_segment_id")
            if segment is not None and segment["topic_id_partition"]["partition"] == partition:
                out.setdefault(segment["id"], []).append(SegmentState(f["remote_log_segment_state"]))
        return out


def _keys(live: LiveCluster, name: str, tid: Uuid) -> list[str]:
    return bucket_keys(lc.s3_client(live.state), live.state.bucket, topic_prefix(live.state.prefix, name, tid))


def _live_brokers(live: LiveCluster) -> set[int]:
    with contextlib.suppress(TieredError):  # the controller may be on its way back
        nodes = live.call(lambda c: c.metadata([]))["brokers"]  # the unfenced brokers, and the controllers
        return {b["node_id"] for b in nodes if b["node_id"] < lc.CONTROLLER_ID_BASE}
    return set()


def _restart(live: LiveCluster, role: str, ident: int, env: dict[str, str] | None = None) -> ProcessInfo:
    """Start a dead process again; a broker only counts as back once its new incarnation is registered (the old
    one's session had to end first) and unfenced, so that work placed from then on reaches it."""
    p = live.process(role, ident)
    log_before = Path(p.log).stat().st_size
    restarted = lc.restart(live.dir, role, ident, env=env)
    if role == "broker":

        def registered() -> bool:
            with open(p.log, "rb") as f:
                f.seek(log_before)
                return b'"broker.registered"' in f.read()

        wait_until(f"broker {ident} to register again", registered, 30)
        wait_until(f"broker {ident} to be unfenced", lambda: ident in _live_brokers(live), 30)
    return restarted


def _restart_armed(live: LiveCluster, role: str, ident: int, point: str, record: Path) -> ProcessInfo:
    lc.kill_process(live.process(role, ident))
    return _restart(live, role, ident, {crash_points.ENV_VAR: point, crash_points.RECORD_ENV_VAR: str(record)})


def _wait_crashed(live: LiveCluster, armed: ProcessInfo, point: str, record: Path) -> dict[str, Any]:
    """Until ``armed`` has died at ``point``: its one record line names the point, its pid and the first hit.
    Returns the line (its time and the call site's detail with it)."""
    lines = wait_until(
        f"{armed.role} {armed.id} to die at {point}",
        lambda: record.exists() and record.read_text().splitlines(),
        60,
        0.05,
    )
    entries = [json.loads(line) for line in lines]
    assert [{k: e[k] for k in ("point", "pid", "hit")} for e in entries] == [
        {"point": point, "pid": armed.pid, "hit": 1}
    ]
    wait_until(f"{armed.role} {armed.id} to be gone", lambda: not lc.is_ours(armed), 10, 0.05)
    return dict(entries[0])


def _disabled(live: LiveCluster, name: str) -> Any:
    return wait_until(f"{name} DISABLED", lambda: (s := live.status(name)).state == TieredState.DISABLED and s, 60)


def _nothing_left(live: LiveCluster, name: str, tid: Uuid) -> None:
    assert _keys(live, name, tid) == []
    segments = live.segments(tid)
    assert segments and all(states[-1] == SegmentState.DELETE_SEGMENT_FINISHED for states in segments.values())


@contextlib.contextmanager
def _in_background(fn: Callable[[], object]) -> Iterator[None]:
    """Run ``fn`` (a client call to a process about to die) on a thread; its outcome does not matter: the client
    retries against whatever serves next, and may get an error or the answer of the restarted process."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(fn)
        yield
        with contextlib.suppress(TieredError):
            future.result(timeout=60)


# -- the controller -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "point", ["controller.after_epoch_bump", "controller.before_disable_send", "controller.after_ack_before_disabled"]
)
def test_a_controller_killed_at_a_step_of_a_disablement_finishes_it_once_back(
    live: LiveCluster, tmp_path: Path, point: str
) -> None:
    name = point.split(".")[1].replace("_", "-")
    tid = _tiered_topic(live, name)
    record = tmp_path / "crashes.jsonl"
    armed = _restart_armed(live, "controller", CONTROLLER, point, record)

    with _in_background(lambda: live.call(lambda c: c.disable_tiering(name, "delete"))):
        _wait_crashed(live, armed, point, record)
        _restart(live, "controller", CONTROLLER)

    # The epoch bump was on disk before any kill: the controller that comes back finishes that epoch, and no other.
    final = _disabled(live, name)
    assert final.tiered_epoch == 2 and final.pending_brokers == ()
    _nothing_left(live, name, tid)


def test_a_controller_killed_right_after_a_topics_removal_has_marked_its_remote_data_and_deletes_it_once_back(
    live: LiveCluster, tmp_path: Path
) -> None:
    tid = _tiered_topic(live, "removed")
    record = tmp_path / "crashes.jsonl"
    point = "controller.after_topic_removed"
    armed = _restart_armed(live, "controller", CONTROLLER, point, record)

    with _in_background(lambda: live.call(lambda c: c.delete_topic("removed"))):
        _wait_crashed(live, armed, point, record)
        marked = PartitionDeleteState.DELETE_PARTITION_MARKED
        assert _partition_states(live, tid) == {0: marked, 1: marked}, "marked in the removal's own transaction"
        assert _keys(live, "removed", tid), "and nothing deleted"
        _restart(live, "controller", CONTROLLER)

    assert "removed" not in {t["name"] for t in live.call(lambda c: c.metadata())["topics"]}, "the removal stayed"
    wait_until(
        "the deleted topic's partitions to be deleted",
        lambda: _partition_states(live, tid) == {0: FINISHED, 1: FINISHED} and not _keys(live, "removed", tid),
        60,
        0.2,
    )
    _nothing_left(live, "removed", tid)


def test_a_controller_killed_in_the_middle_of_a_snapshot_loses_nothing_and_snapshots_again_once_back(
    live: LiveCluster, tmp_path: Path
) -> None:
    record = tmp_path / "crashes.jsonl"
    point = "controller.mid_snapshot"
    live.call(lambda c: c.create_topic("snap-acknowledged", partitions=2))
    armed = _restart_armed(live, "controller", CONTROLLER, point, record)
    before = _latest_snapshot(live)
    created = ["snap-acknowledged"]
    for i in range(SNAPSHOT_EVERY_RECORDS):  # far more records than it takes to make a snapshot due
        if record.exists():
            break
        with contextlib.suppress(TieredError):  # the one that was under way when the controller died
            live.call(lambda c, i=i: c.create_topic(f"snap-{i}", partitions=2))
            created.append(f"snap-{i}")
    _wait_crashed(live, armed, point, record)
    assert _latest_snapshot(live) == before, "the snapshot cut short was never committed"

    _restart(live, "controller", CONTROLLER)
    names = wait_until(
        "the topics created before the kill", lambda: {t["name"] for t in live.call(lambda c: c.metadata())["topics"]}
    )
    assert set(created) <= names
    live.call(lambda c: c.create_topic("snap-after", partitions=2))  # enough records for the next snapshot
    wait_until("a snapshot past the one cut short", lambda: (_latest_snapshot(live) or -1) > (before or -1), 30)


def _latest_snapshot(live: LiveCluster) -> int | None:
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        snapshot = store.latest_snapshot()
        return None if snapshot is None else snapshot.offset


# -- the broker -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["broker.mid_delete_batch", "broker.before_disable_ack"])
def test_a_broker_killed_while_applying_the_delete_policy_leaves_nothing_behind_once_back(
    live: LiveCluster, tmp_path: Path, point: str
) -> None:
    name = point.split(".")[1].replace("_", "-")
    record = tmp_path / "crashes.jsonl"
    armed = _restart_armed(live, "broker", 1, point, record)  # armed before its topic exists: nothing else fires it
    tid = _tiered_topic(live, name)
    partition = _led_by(live, name, 1)

    live.call(lambda c: c.disable_tiering(name, "delete"))
    crash = _wait_crashed(live, armed, point, record)
    segments = _segments_of(live, tid, partition)
    if point == "broker.mid_delete_batch":  # the batch's objects deleted, its journal not finished
        # Judged on the batch the crash record names. Its partition need not be broker 1's own: if broker 2's
        # session lapsed on a busy machine, broker 2's partition was leaderless for a while and assigned to broker
        # 1, and broker 2, back, may have journaled those segments first (broker 1 then writes nothing for them).
        # And once broker 1's session ends, broker 2 may finish the journal before this read. So: every segment of
        # the batch was journaled DELETE_SEGMENT_STARTED (by someone) before the crash, its objects are gone, and
        # broker 1 journaled none of them FINISHED.
        history = live.segment_records(tid)
        batch = crash["detail"]["segments"]
        by_id = {str(segment): records for segment, records in history.items()}
        assert batch and set(batch) <= set(by_id), (batch, by_id)
        started, ended = SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED
        for segment in batch:
            records = by_id[segment]
            assert any(s == started and at <= crash["time_ms"] for s, at, _b in records), (segment, records)
            assert not any(s == ended and b == 1 for s, _at, b in records), (segment, records)
        left = _keys(live, name, tid)
        assert not [k for k in left if any(f"-{segment}." in k for segment in batch)], left
    else:  # the policy applied to all of its partition, the acknowledgement never sent
        last_states = {history[-1] for history in segments.values()}
        assert last_states == {SegmentState.DELETE_SEGMENT_FINISHED}, last_states
    assert live.status(name).state == TieredState.DISABLING

    _restart(live, "broker", 1)
    final = _disabled(live, name)
    assert final.tiered_epoch == 2 and final.pending_brokers == ()
    _nothing_left(live, name, tid)


def test_a_broker_killed_between_an_upload_and_its_rlmm_record_deletes_the_orphan_once_back_and_after_a_disable(
    live: LiveCluster, tmp_path: Path
) -> None:
    record = tmp_path / "crashes.jsonl"
    point = "broker.after_upload_before_rlmm"
    armed = _restart_armed(live, "broker", 1, point, record)
    tid = _tiered_topic(live, "upload", settle=False)  # broker 1's first copy kills it
    partition = _led_by(live, "upload", 1)
    _wait_crashed(live, armed, point, record)
    segments = _segments_of(live, tid, partition)
    [orphan] = [s for s, history in segments.items() if history == [SegmentState.COPY_SEGMENT_STARTED]]
    assert any(f"-{orphan}." in key for key in _keys(live, "upload", tid)), "its objects were uploaded"

    _restart(live, "broker", 1)
    wait_until(
        "broker 1 to copy its partition again",
        lambda: any(h[-1] == SegmentState.COPY_SEGMENT_FINISHED for h in _segments_of(live, tid, partition).values()),
        30,
    )
    wait_until(  # its earlier process's copy is over: the restarted broker deletes it, no disable needed
        "broker 1 to delete the copy it abandoned",
        lambda: _segments_of(live, tid, partition)[orphan][-1] == SegmentState.DELETE_SEGMENT_FINISHED,
        30,
    )
    assert not any(f"-{orphan}." in key for key in _keys(live, "upload", tid)), "its objects are gone"
    live.call(lambda c: c.disable_tiering("upload", "delete"))
    _disabled(live, "upload")
    _nothing_left(live, "upload", tid)  # the orphan's objects too: DELETE_SEGMENT_FINISHED, nothing in the bucket


def test_a_broker_killed_in_the_middle_of_a_deleted_topics_partition_finishes_it_once_back(
    live: LiveCluster, tmp_path: Path
) -> None:
    record = tmp_path / "crashes.jsonl"
    point = "broker.mid_partition_delete"
    armed = _restart_armed(live, "broker", 1, point, record)
    tid = _tiered_topic(live, "partition-delete")

    live.call(lambda c: c.delete_topic("partition-delete"))  # partition 0 goes to broker 1 (live[p % 2])
    _wait_crashed(live, armed, point, record)
    assert _partition_states(live, tid).get(0) == PartitionDeleteState.DELETE_PARTITION_STARTED
    assert {h[-1] for h in _segments_of(live, tid, 0).values()} == {SegmentState.DELETE_SEGMENT_FINISHED}

    _restart(live, "broker", 1)
    wait_until(
        "the deleted topic's partitions to be deleted",
        lambda: _partition_states(live, tid) == {0: FINISHED, 1: FINISHED} and not _keys(live, "partition-delete", tid),
        60,
        0.2,
    )
    _nothing_left(live, "partition-delete", tid)

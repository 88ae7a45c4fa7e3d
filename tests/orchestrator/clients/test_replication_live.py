"""Replication factor 3 on a live cluster (3 brokers, separate OS processes), judged by confluent-kafka (librdkafka):
acks=all with min.insync.replicas=2 means one dead broker loses nothing (issue 36).

* Every replica holds the leader's batches byte for byte (read from the brokers' segment files).
* The partition's leader SIGKILLed mid-produce: leadership moves to an in-sync follower, the producer goes on there,
  and every acknowledged record is read back exactly once, in order, no offset handed out twice.
* The killed broker comes back: its log agrees with the new leader's (a divergent tail, written but never
  replicated, is truncated), and consumers read the same records from whichever replica leads.
* The leader SIGKILLed and started again at once on an empty data directory (a lost disk): while its previous
  incarnation's session lives the metadata still names it leader, and it must lead nothing (a KRaft broker serves
  no client before the controller registered and unfenced it), or it would hand out offset 0 again from its empty
  disk; the records go to the new leader, nothing acknowledged is lost, and it copies the log back from the others.
* The last in-sync replica lost with its disk, after both followers dropped out below min.insync.replicas: the one
  that dropped out last holds every committed record (an eligible leader replica, KIP-966) and leads; the broker on
  the new disk, whose log directory id is new (KIP-858), does not come back as the leader of an empty log.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from chaos.disk import empty_directory
from orchestrator.broker.partition_files import OFFSETS_CHECKPOINT
from orchestrator.local import cluster as lc
from orchestrator.local.restart import restart
from orchestrator.protocol.record_batch import split_batches
from remote_storage.keys import topic_prefix
from tests.support.kafka_clients import consume_confluent
from tests.support.live_cluster import bucket_keys, live_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "replicated"


def _partition_dir(cluster: Any, broker: int) -> Path:
    return cluster.dir / "data" / f"broker-{broker}" / f"{TOPIC}-0"


def _batches(directory: Path) -> bytes:
    """The whole batches of a replica's log, from its segment files in offset order (a torn last batch left out)."""
    files = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
    return b"".join(bytes(b) for f in files for b in split_batches(f.read_bytes()).batches)


def _leader(cluster: Any, topic: str = TOPIC) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, ISR) of partition 0 of ``topic`` as Metadata answers."""

    async def ask(c: Any) -> tuple[int, list[int], list[int]]:
        md = await c.metadata([topic])
        (p,) = md["topics"][0]["partitions"]
        return p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"])

    return cluster.call(ask)  # type: ignore[no-any-return]


def _produce_until(cluster: Any, count: int, kill_after: int, on_kill: Any) -> list[tuple[int, bytes]]:
    """Produce ``count`` records with acks=all and idempotence; once ``kill_after`` are acknowledged, call
    ``on_kill`` (from the delivery callback's thread: the producer goes on). Returns (offset, value) acknowledged."""
    from confluent_kafka import Producer

    acked: list[tuple[int, bytes]] = []
    errors: list[Any] = []
    killed = threading.Event()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 20,
            "message.timeout.ms": 120_000,
        }
    )

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        acked.append((msg.offset(), msg.value()))
        if len(acked) >= kill_after and not killed.is_set():
            killed.set()
            on_kill()

    for i in range(count):
        producer.produce(TOPIC, value=b"v%05d" % i, partition=0, on_delivery=report)
        producer.poll(0)
        if i % 50 == 49:
            producer.flush(0.05)  # let deliveries come back so the kill lands mid-produce
    left = producer.flush(180)
    assert left == 0 and not errors, f"undelivered {left}, errors {errors[:5]}"
    assert killed.is_set()
    return acked


def test_acks_all_to_three_replicas_survives_the_leaders_sigkill_and_the_returning_replica_agrees(tmp_path):
    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        cluster.call(
            lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        )
        leader, replicas, isr = _leader(cluster)
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3]

        victim = leader
        pid = cluster.process("broker", victim).pid
        acked = _produce_until(cluster, 3000, 800, lambda: os.kill(pid, signal.SIGKILL))
        values = sorted(acked)
        assert [o for o, _ in values] == sorted({o for o, _ in acked}), "no offset acknowledged twice"

        new_leader, _, new_isr = wait_until("a new leader", lambda: (x := _leader(cluster))[0] != victim and x, 60)
        assert new_leader in (set(replicas) - {victim}) and victim not in new_isr

        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: max(o for o, _ in acked) + 1}, timeout_s=90)
        got = [(o, v) for _, o, _, v in read]
        assert [o for o, _ in got] == list(range(len(got))), "offsets dense from 0, each record once"
        assert [v for _, v in got] == [b"v%05d" % i for i in range(3000)], "every record once, in the order sent"
        assert set(acked) <= set(got), "every acknowledged record is read back at its offset"

        restart(cluster.dir, "broker", victim)
        survivors = [b for b in replicas if b != victim]

        def agree() -> bool:
            logs = [_batches(_partition_dir(cluster, b)) for b in replicas]
            return len(set(logs)) == 1 and len(split_batches(logs[0]).batches) > 0

        wait_until("the returning replica's log to agree with the others'", agree, 90)
        assert _batches(_partition_dir(cluster, victim)) == _batches(_partition_dir(cluster, survivors[0]))
        wait_until("the returning replica to rejoin the ISR", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 60)


def test_a_leader_back_at_once_on_an_empty_disk_leads_nothing_until_registered_and_nothing_acknowledged_is_lost(
    tmp_path,
):
    from tests.support.kafka_clients import produce_confluent

    # A session long enough (10 s, 2.5 s in the suite's fast clusters) that the broker is certainly back, even on a
    # busy machine, while its previous process's session still lives: that is the moment under test.
    session = {"membership": {"session_timeout_ms": 10_000}}
    with live_cluster(tmp_path / "c", brokers=3, controllers=1, controller_overrides=session) as cluster:
        cluster.call(
            lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        )
        first = [(0, None, b"first-%03d" % i) for i in range(200)]
        produced = produce_confluent(cluster.bootstrap, TOPIC, first, acks="all")
        assert [r[1] for r in produced] == list(range(200))
        victim, replicas, _ = _leader(cluster)
        wait_until("every replica to hold the records", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 60)

        _lose_disk(cluster, victim)
        restart(cluster.dir, "broker", victim)
        assert _leader(cluster)[0] == victim, "the metadata still names the restarted broker leader"

        second = [(0, None, b"second-%03d" % i) for i in range(100)]
        acked = produce_confluent(
            cluster.bootstrap, TOPIC, second, acks="all", timeout_s=90, **{"message.timeout.ms": 60_000}
        )
        assert [r[1] for r in acked] == list(range(200, 300)), "no offset handed out twice"
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: 300}, timeout_s=90)
        assert [(o, v) for _, o, _, v in read] == [(i, v) for i, (_, _, v) in enumerate(first + second)]

        others = [b for b in replicas if b != victim]
        wait_until(
            "the broker on the new disk to copy the log back",
            lambda: _batches(_partition_dir(cluster, victim)) == _batches(_partition_dir(cluster, others[0])),
            90,
        )
        wait_until("and to rejoin the ISR", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 60)


def _lose_disk(cluster: Any, broker: int) -> None:
    """The broker SIGKILLed and its data directory emptied: its disk replaced by an empty one (chaos's lost disk)."""
    lc.kill_process(cluster.process("broker", broker))
    empty_directory(cluster.dir / "data" / f"broker-{broker}")


def _partition_image(cluster: Any) -> Any:
    """Partition 0 of TOPIC as the metadata log has it now (with its eligible leader replicas, which Metadata does
    not show)."""
    from orchestrator.metadata.follower import MetadataFollower
    from orchestrator.metadata.sqlite import SqliteMetadataStore

    with SqliteMetadataStore(cluster.dir / "metadata.db", recover_on_open=False) as store:
        image = MetadataFollower(store).refresh()
    topic = next(t for t in image.topics.values() if t.name == TOPIC)
    return topic.partitions[0]


def test_the_last_in_sync_replica_lost_with_its_disk_gives_way_to_an_eligible_replica_and_nothing_is_lost(tmp_path):
    from tests.support.kafka_clients import produce_confluent

    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        cluster.call(
            lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        )
        first = [(0, None, b"first-%03d" % i) for i in range(100)]
        produce_confluent(cluster.bootstrap, TOPIC, first, acks="all")
        leader, replicas, _ = _leader(cluster)
        wait_until("every replica in sync", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 60)
        early, late = [b for b in replicas if b != leader]

        cluster.signal("broker", early, signal.SIGSTOP)
        wait_until("the first follower to drop out", lambda: early not in _partition_image(cluster).isr, 60)
        assert _partition_image(cluster).elr == (), "two in sync still commit without it: not eligible"
        cluster.signal("broker", late, signal.SIGSTOP)
        wait_until("the second to drop out", lambda: _partition_image(cluster).isr == (leader,), 60)
        assert _partition_image(cluster).elr == (late,), "below min.insync.replicas nothing commits without it"
        (under,) = lc.status(cluster.dir)["under_replicated_partitions"]
        assert (under["isr"], under["eligible"]) == ([leader], [late]), "cluster status shows who may lead"

        _lose_disk(cluster, leader)
        cluster.signal("broker", early, signal.SIGCONT)
        cluster.signal("broker", late, signal.SIGCONT)
        restart(cluster.dir, "broker", leader)
        wait_until("the eligible replica to lead", lambda: _partition_image(cluster).leader == late, 60)
        # It leads from the ISR; the others join it as they catch up from it, which may be at once.
        assert late in _partition_image(cluster).isr

        second = [(0, None, b"second-%03d" % i) for i in range(50)]
        acked = produce_confluent(
            cluster.bootstrap, TOPIC, second, acks="all", timeout_s=90, **{"message.timeout.ms": 60_000}
        )
        assert [r[1] for r in acked] == list(range(100, 150)), "no offset handed out twice"
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: 150}, timeout_s=90)
        assert [(o, v) for _, o, _, v in read] == [(i, v) for i, (_, _, v) in enumerate(first + second)]
        wait_until("every replica back in sync", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 90)


def _produce_acks_all(cluster: Any, values: list[bytes]) -> list[Any]:
    """Each record's delivery error (None: acknowledged), with librdkafka's retries off so a refusal shows."""
    from confluent_kafka import Producer

    outcome: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 20_000}
    )
    for v in values:
        producer.produce(TOPIC, value=v, partition=0, on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(60) == 0
    return outcome


def test_stopped_followers_leave_the_isr_acks_all_holds_to_min_isr_and_they_rejoin_once_caught_up(tmp_path):
    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        cluster.call(
            lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        )
        leader, replicas, _ = _leader(cluster)
        first, second = [b for b in replicas if b != leader]
        assert _produce_acks_all(cluster, [b"before"]) == [None]

        cluster.signal("broker", first, signal.SIGSTOP)
        wait_until("the stopped follower to leave the ISR", lambda: first not in _leader(cluster)[2], 60)
        assert _produce_acks_all(cluster, [b"two of three"]) == [None], "acks=all with 2 in-sync of min 2"

        cluster.signal("broker", second, signal.SIGSTOP)
        wait_until("the second to leave too", lambda: _leader(cluster)[2] == [leader], 60)
        (under,) = lc.status(cluster.dir)["under_replicated_partitions"]
        assert (under["topic"], under["partition"], under["isr"]) == (TOPIC, 0, [leader])
        (refused,) = _produce_acks_all(cluster, [b"refused"])
        assert refused is not None and refused.name() == "NOT_ENOUGH_REPLICAS", refused

        cluster.signal("broker", first, signal.SIGCONT)
        cluster.signal("broker", second, signal.SIGCONT)
        wait_until("both to rejoin the ISR", lambda: sorted(_leader(cluster)[2]) == [1, 2, 3], 60)
        assert lc.status(cluster.dir)["under_replicated_partitions"] == []
        assert _produce_acks_all(cluster, [b"after"]) == [None]
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: 3}, timeout_s=60)
        assert [v for _, _, _, v in read] == [b"before", b"two of three", b"after"], "nothing refused was written"

        def agree() -> bool:
            return len({_batches(_partition_dir(cluster, b)) for b in replicas}) == 1

        wait_until("every replica to hold the same batches", agree, 60)


TIERED = {
    "remote.storage.enable": "true",
    "local.retention.ms": "0",
    "segment.bytes": "4096",
    "min.insync.replicas": "2",
}


def _copied(cluster: Any, topic_id: Any) -> dict[Any, tuple[int, int]]:
    """Segment id -> (start, end) of every segment the RLMM holds as copied (COPY_SEGMENT_FINISHED, not deleted)."""
    from orchestrator.metadata.records import SegmentState
    from orchestrator.metadata.sqlite import SqliteMetadataStore

    with SqliteMetadataStore(cluster.dir / "metadata.db", recover_on_open=False) as store:
        ranges: dict[Any, tuple[int, int]] = {}
        state: dict[Any, SegmentState] = {}
        for e in store.read_remote_log_metadata(topic_id=topic_id):
            f = e.record.fields
            sid = f["remote_log_segment_id"]["id"]
            if "start_offset" in f:
                ranges[sid] = (f["start_offset"], f["end_offset"])
            state[sid] = SegmentState(f["remote_log_segment_state"])
    return {sid: r for sid, r in ranges.items() if state[sid] == SegmentState.COPY_SEGMENT_FINISHED}


def test_tiering_goes_on_across_a_leader_change_with_no_gap_no_segment_copied_twice_and_followers_trimmed(tmp_path):
    from tests.support.kafka_clients import produce_confluent

    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        topic_id = cluster.call(lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs=TIERED))
        sent = [(0, None, b"a%04d" % i + b"." * 100) for i in range(600)]
        produce_confluent(cluster.bootstrap, TOPIC, sent, acks="all", **{"batch.num.messages": 20})
        cluster.wait_tiering_settled(topic_id, 3)
        before = _copied(cluster, topic_id)

        victim = _leader(cluster)[0]
        cluster.signal("broker", victim, signal.SIGKILL)
        wait_until("a new leader", lambda: _leader(cluster)[0] not in (victim, -1), 60)
        more = [(0, None, b"b%04d" % i + b"." * 100) for i in range(600)]
        produce_confluent(cluster.bootstrap, TOPIC, more, acks="all", **{"batch.num.messages": 20})
        cluster.wait_tiering_settled(topic_id, len(before) + 3)

        copied = _copied(cluster, topic_id)
        ranges = sorted(copied.values())
        assert ranges[0][0] == 0 and ranges[-1][1] >= 600, ranges
        assert len(set(ranges)) == len(ranges), f"a segment copied twice: {ranges}"
        for (_, end), (start, _) in itertools.pairwise(ranges):
            assert start <= end + 1, f"a gap after offset {end}: {ranges}"
        keys = bucket_keys(
            lc.s3_client(cluster.state), cluster.state.bucket, topic_prefix(cluster.state.prefix, TOPIC, topic_id)
        )
        in_bucket = {sid for sid in copied if any(str(sid) in k for k in keys)}
        assert in_bucket == set(copied), "every copied segment's objects are in the bucket"
        assert all(any(str(sid) in k for sid in copied) for k in keys), f"no object of another segment: {keys}"
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: 1200}, timeout_s=90)
        assert [v for _, _, _, v in read] == [v for _, _, v in sent + more], "every record once, from both tiers"

        leader = _leader(cluster)[0]
        follower = next(b for b in (1, 2, 3) if b not in (victim, leader))
        copied_end = ranges[-1][1]
        local = sorted(int(p.stem) for p in _partition_dir(cluster, follower).glob("*.log"))
        assert local[0] > 0, "a follower's local log start follows what was tiered (local.retention.ms=0)"
        assert local[0] <= copied_end + 1, "and never passes it"
        assert _scan_findings(cluster, tmp_path / "export") == ([], []), "the scan finds nothing to reclaim, no anomaly"


def _scan_findings(cluster: Any, export_dir: Path) -> tuple[list[str], list[str]]:
    """What the scan's classifier (the pure one the Spark job is held equal to) says of the cluster's bucket against
    its metadata: (keys it finds reclaimable or not live, anomalies)."""
    from orchestrator.metadata.sqlite import SqliteMetadataStore
    from policies.orphans import BucketObject, Metadata, classify
    from remote_storage.export import export_metadata, load_export
    from remote_storage.s3 import S3RemoteStorage
    from remote_storage.scan import contract as c

    with SqliteMetadataStore(cluster.dir / "metadata.db", recover_on_open=False) as store:
        export_metadata(store, export_dir)
    rsm = S3RemoteStorage(client=lc.s3_client(cluster.state), bucket=cluster.state.bucket)
    objects = [BucketObject(o.key, o.size, o.last_modified_ms) for o in rsm.list_objects("")]  # the whole bucket
    now = int(time.time() * 1000)
    meta = Metadata.build(*load_export(export_dir), now_ms=now)
    found = classify(objects, meta, prefix=cluster.state.prefix, now_ms=now, grace_ms=0)
    not_live = [f"{v.key}: {v.category}" for v in found.objects if v.category != c.LIVE or v.reclaimable]
    return not_live, [f"{a.type} {a.segment_id}" for a in found.anomalies]


def _log_start(cluster: Any, broker: int) -> int:
    """A replica's log start offset as its checkpoint on disk says (each broker's own, not the leader's answer)."""
    cp = _partition_dir(cluster, broker) / OFFSETS_CHECKPOINT
    return int(json.loads(cp.read_text())["log_start_offset"]) if cp.exists() else 0


def test_a_delete_policy_disable_moves_every_replicas_log_start_and_a_new_leader_serves_from_there(tmp_path):
    """KIP-950's delete policy with replicas: the remote tier is emptied, each follower's log start follows the
    leader's (their local data below it goes too), and after the leader dies the new one serves exactly the records
    from that start, as confluent-kafka reads them."""
    from tests.support.kafka_clients import confluent_watermarks, produce_confluent

    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        topic_id = cluster.call(lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs=TIERED))
        sent = [(0, None, b"d%04d" % i + b"." * 100) for i in range(600)]
        produce_confluent(cluster.bootstrap, TOPIC, sent, acks="all", **{"batch.num.messages": 20})
        cluster.wait_tiering_settled(topic_id, 3)

        cluster.call(lambda c: c.disable_tiering(TOPIC, "delete"))
        wait_until("DISABLED", lambda: cluster.status(TOPIC).state.name == "DISABLED", 60)
        prefix = topic_prefix(cluster.state.prefix, TOPIC, topic_id)
        assert bucket_keys(lc.s3_client(cluster.state), cluster.state.bucket, prefix) == [], "the remote tier is gone"
        leader, replicas, _ = _leader(cluster)
        start = _log_start(cluster, leader)
        assert start > 0, "the records only S3 held are gone: the log starts at the local log start"
        wait_until("every replica's log start to follow", lambda: {_log_start(cluster, b) for b in replicas} == {start})
        for b in replicas:
            bases = sorted(int(p.stem) for p in _partition_dir(cluster, b).glob("*.log"))
            assert bases and (len(bases) == 1 or bases[1] > start), f"broker {b} kept a segment below {start}: {bases}"

        cluster.signal("broker", leader, signal.SIGKILL)
        wait_until("a new leader", lambda: _leader(cluster)[0] not in (leader, -1), 60)
        assert confluent_watermarks(cluster.bootstrap, TOPIC, [0]) == {0: (start, 600)}
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], from_offset=start, until={0: 600}, timeout_s=60)
        assert [(o, v) for _, o, _, v in read] == [(o, v) for o, (_, _, v) in enumerate(sent) if o >= start]


def test_a_follower_back_from_a_long_stop_starts_at_the_leaders_local_log_start_and_copies_nothing_back(tmp_path):
    """KIP-405's follower: a replica away while the leader tiered and trimmed its local log is answered
    OFFSET_MOVED_TO_TIERED_STORAGE, starts its log at the leader's local log start (its log start offset the
    leader's, the records between being in S3), catches up and rejoins the ISR; the records stay readable from 0
    by whichever replica leads."""
    from tests.support.kafka_clients import produce_confluent

    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        topic_id = cluster.call(lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs=TIERED))
        leader, replicas, _ = _leader(cluster)
        away = next(b for b in replicas if b != leader)
        sent = [(0, None, b"f%04d" % i + b"." * 100) for i in range(100)]
        produce_confluent(cluster.bootstrap, TOPIC, sent, acks="all", **{"batch.num.messages": 20})
        wait_until(
            "the follower to hold the first records",
            lambda: _batches(_partition_dir(cluster, away)) == _batches(_partition_dir(cluster, leader)),
            60,
        )

        cluster.signal("broker", away, signal.SIGSTOP)
        wait_until("the stopped follower to leave the ISR", lambda: away not in _leader(cluster)[2], 60)
        # The fetch it sent before it stopped is answered while it is stopped, with at most the first of two bursts;
        # so once the leader's local log starts past the first burst, the follower is behind it.
        bursts = [[(0, None, b"%c%04d" % (c, i) + b"." * 100) for i in range(600)] for c in b"gh"]
        for burst in bursts:
            produce_confluent(cluster.bootstrap, TOPIC, burst, acks="all", **{"batch.num.messages": 20})
        first_burst_end = len(sent) + len(bursts[0])

        def leader_local_start() -> int:
            return int(cluster.call(lambda c: c.offsets(TOPIC, 0)).local_log_start_offset)

        wait_until("the leader to tier past the first burst", lambda: leader_local_start() > first_burst_end, 90)
        local_start = leader_local_start()
        cluster.signal("broker", away, signal.SIGCONT)
        wait_until("the follower to rejoin the ISR", lambda: away in _leader(cluster)[2], 90)

        log_text = (cluster.dir / "logs" / f"broker-{away}.log").read_text()
        assert "broker.replica_moved_to_tiered" in log_text, "answered OFFSET_MOVED_TO_TIERED_STORAGE, not fed S3"
        cp = json.loads((_partition_dir(cluster, away) / OFFSETS_CHECKPOINT).read_text())
        assert cp["log_start_offset"] == 0, "its log starts where the leader's does, the remote part included"
        assert cp["local_log_start_offset"] >= local_start > first_burst_end, (cp, local_start)

        cluster.signal("broker", leader, signal.SIGKILL)
        wait_until("a new leader", lambda: _leader(cluster)[0] not in (leader, -1), 60)
        everything = sent + bursts[0] + bursts[1]
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: len(everything)}, timeout_s=90)
        assert [v for _, _, _, v in read] == [v for _, _, v in everything], "every record once, from both tiers"
        assert cluster.segments(topic_id), "the records below the local log starts are in S3"


def _state_of(cluster: Any, topic: str) -> tuple[int, list[int]]:
    """(leader, sorted ISR) of partition 0 of ``topic``."""
    leader, _, isr = _leader(cluster, topic)
    return leader, sorted(isr)


def test_only_a_topic_that_allows_unclean_election_takes_an_out_of_sync_leader_and_a_clean_one_loses_nothing(
    tmp_path,
):
    """Two topics on brokers 1 and 2 (leader 1), one with ``unclean.leader.election.enable=true``. Broker 2 is
    stopped and leaves the ISR; records are acknowledged by 1 alone (min ISR 1); 1 is killed; 2 comes back. The
    unclean topic takes 2 as leader (those records are lost, as the config accepts); the clean one stays leaderless
    until 1 returns, then serves every acknowledged record. 1, back as the unclean topic's follower, truncates its
    divergent tail and holds 2's log."""
    with warnings.catch_warnings():  # kafka-python's first import uses a resources API Python deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient, NewTopic

    from tests.support.kafka_clients import produce_confluent

    with live_cluster(tmp_path / "c", brokers=2, controllers=1) as cluster:
        base = {"min.insync.replicas": "1"}
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)  # kafka-python: assignments as Kafka takes them
        try:
            admin.create_topics(
                [
                    NewTopic("clean", -1, -1, replica_assignments={0: [1, 2]}, topic_configs=base),
                    NewTopic(
                        "unclean", -1, -1, replica_assignments={0: [1, 2]}, topic_configs={**base, UNCLEAN: "true"}
                    ),
                ]
            )
        finally:
            admin.close()
        both = ("clean", "unclean")
        wait_until("both led by 1, in sync", lambda: all(_state_of(cluster, t) == (1, [1, 2]) for t in both), 60)
        for t in both:
            produce_confluent(cluster.bootstrap, t, [(0, None, b"replicated")], acks="all")
        wait_until(
            "broker 2 to have the first record",
            lambda: all(_batches(cluster.dir / "data" / "broker-2" / f"{t}-0") for t in both),
            60,
        )

        cluster.signal("broker", 2, signal.SIGSTOP)
        wait_until("2 to leave both ISRs", lambda: all(_state_of(cluster, t) == (1, [1]) for t in both), 60)
        for t in both:
            produce_confluent(cluster.bootstrap, t, [(0, None, b"only on 1")], acks="all")
        cluster.signal("broker", 1, signal.SIGKILL)
        cluster.signal("broker", 2, signal.SIGCONT)
        wait_until("the unclean topic to take 2", lambda: _state_of(cluster, "unclean")[0] == 2, 60)
        assert _state_of(cluster, "clean") == (-1, [1]), "no leader outside the ISR without the config"

        read = consume_confluent(cluster.bootstrap, "unclean", [0], until={0: 1}, timeout_s=60)
        assert [(o, v) for _, o, _, v in read] == [(0, b"replicated")], "what only 1 had is gone: the accepted cost"
        (after,) = produce_confluent(cluster.bootstrap, "unclean", [(0, None, b"under 2")], acks="all")
        assert after[1] == 1, "offset 1 is handed out again: unclean election's cost"

        restart(cluster.dir, "broker", 1)
        wait_until("the clean topic led by 1 again", lambda: _state_of(cluster, "clean")[0] == 1, 60)
        read = consume_confluent(cluster.bootstrap, "clean", [0], until={0: 2}, timeout_s=60)
        assert [v for _, _, _, v in read] == [b"replicated", b"only on 1"], "a clean election lost nothing"
        wait_until(
            "1 to hold 2's log of the unclean topic",
            lambda: (
                _batches(cluster.dir / "data" / "broker-1" / "unclean-0")
                == _batches(cluster.dir / "data" / "broker-2" / "unclean-0")
            ),
            60,
        )


UNCLEAN = "unclean.leader.election.enable"

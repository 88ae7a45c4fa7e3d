"""What a chaos run looks at: the work a cluster still owes while it heals, and the end state the checker judges.

:func:`unfinished_work` says what keeps a healing cluster from being done (a topic still DISABLING, a deletion
still owed, a partition without a leader). :func:`observe` gathers the :class:`~chaos.checker.Observation`: the
metadata log the run tailed (with its gaps), the RLMM, every key in the bucket (read straight from moto's server,
not through the fault proxy), the proxy's record of every mutation, each chaos topic's state, offsets and records,
the controllers' ``disable.ack``/``disable.completed`` log lines, and what the run itself recorded (acknowledged
records, delete requests, what never converged).

A partition's records are read up to its high watermark, which a leader elected moments before may still hold
below what its predecessor acknowledged (it rises once the followers fetch from it, as in Kafka): each partition's
bounds are read again, for at most :data:`HIGH_WATERMARK_WAIT_S` in all, until the high watermark reaches one past
the highest offset acknowledged there. Records really lost never get there, and the checker still finds them.

Invariants: nothing here changes the cluster or the bucket (reads only); a controller's log line cut short by a
kill is skipped, not an error; only the topics the scenario names (:attr:`~chaos.scenario.Scenario.topic_names`)
are read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from chaos import checker as ck
from chaos.history import History
from chaos.rig import BUCKET, PREFIX, Rig
from orchestrator.client import TieredClient
from orchestrator.metadata.open import open_store
from orchestrator.metadata.records import TieredState


async def unfinished_work(c: TieredClient) -> list[str]:
    """What the cluster has not finished yet, one line each (empty: nothing)."""
    out = []
    for s in await c.tiering_status(None):
        if s.state == TieredState.DISABLING:
            pending = [p.broker_id for p in s.pending_brokers]
            out.append(f"{s.topic} ({s.topic_id}) still DISABLING at epoch {s.tiered_epoch}, pending {pending}")
    for d in await c.remote_deletions(None):
        out.append(f"deleted topic {d.topic} ({d.topic_id}): partitions {list(d.partitions_remaining)} owed")
    md = await c.metadata(None)
    for t in md["topics"]:
        for p in t["partitions"]:
            if p["leader_id"] < 0:
                out.append(f"{t['name']}-{p['partition_index']} has no leader")
    return out


def observe(
    rig: Rig,
    history: History,
    *,
    log: Sequence[ck.LogRecord],
    log_gaps: Sequence[tuple[int, int]],
    acks: Sequence[ck.Ack],
    delete_requests: Mapping[str, Sequence[int]],
    unfinished: Sequence[str],
    deposed: Sequence[ck.DeposedAnswer] = (),
    reads: Sequence[ck.Read] = (),
) -> ck.Observation:
    """The observation of a healed cluster, with what the run recorded along the way; the tail must have finished."""
    assert rig.proxy is not None
    with contextlib.closing(open_store(rig.store_spec, recover_on_open=False)) as store:
        rlmm = [_rlmm(e.record) for e in store.read_remote_log_metadata()]
    pages = rig.direct_s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    keys = frozenset(o["Key"] for page in pages for o in page.get("Contents", []))
    names = frozenset(rig.scenario.topic_names)
    acked_ends: dict[tuple[str, int], int] = {}
    for a in acks:
        key = (a.topic_id, a.partition)
        acked_ends[key] = max(acked_ends.get(key, 0), a.first_offset + len(a.values))
    topics = rig.call(lambda c: _topics_at_end(c, names, acked_ends), timeout_s=120)
    mutations = tuple(ck.Mutation(m.time_ms, m.operation, m.key, m.status) for m in rig.proxy.mutations())
    listing = Counter(k.split("/", 2)[1] if k.startswith(PREFIX) else "(outside the prefix)" for k in keys)
    history.record("observed", bucket_objects=dict(listing), topics=[t.name for t in topics])
    return ck.Observation(
        prefix=PREFIX,
        log=tuple(log),
        log_gaps=tuple(log_gaps),
        rlmm=tuple(rlmm),
        bucket_keys=keys,
        sentinels=rig.sentinels,
        mutations=mutations,
        topics=tuple(topics),
        acks=tuple(acks),
        delete_requests={k: tuple(v) for k, v in delete_requests.items()},
        controller_events=tuple(_controller_events(rig)),
        unconverged=tuple(unfinished),
        deposed=tuple(deposed),
        reads=tuple(reads),
    )


HIGH_WATERMARK_WAIT_S = 15.0


async def _topics_at_end(
    c: TieredClient, names: frozenset[str], acked_ends: Mapping[tuple[str, int], int]
) -> list[ck.TopicEnd]:
    out = []
    deadline = time.monotonic() + HIGH_WATERMARK_WAIT_S
    statuses = {s.topic: s for s in await c.tiering_status(None)}
    md = await c.metadata(None)
    for t in md["topics"]:
        if t["name"] not in names:
            continue
        s = statuses.get(t["name"])
        parts = []
        for p in sorted(p["partition_index"] for p in t["partitions"]):
            bounds = await c.offsets(t["name"], p)
            wanted = acked_ends.get((str(t["topic_id"]), p), 0)
            while bounds.log_end_offset < wanted and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # a new leader's high watermark rises once its followers fetch
                bounds = await c.offsets(t["name"], p)
            records = {r.offset: r.value async for r in c.consume(t["name"], p)}
            parts.append(
                ck.PartitionEnd(
                    p, bounds.log_start_offset, bounds.local_log_start_offset, bounds.log_end_offset, records
                )
            )
        out.append(
            ck.TopicEnd(
                t["name"],
                str(t["topic_id"]),
                int(s.state) if s else 0,
                s.tiered_epoch if s else 0,
                int(s.policy) if s else 0,
                tuple(parts),
            )
        )
    return out


def _iso_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _controller_events(rig: Rig) -> list[ck.ControllerEvent]:
    out = []
    for path in sorted((rig.cluster_dir / "logs").glob("controller-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"disable.ack"' not in line and '"disable.completed"' not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            # One line per exchange (acks) or per completion batch, each listing its topics.
            for t in e.get("topics", ()):
                out.append(
                    ck.ControllerEvent(
                        _iso_ms(e["timestamp"]),
                        e["event"],
                        t["topic_id"],
                        int(t["tiered_epoch"]),
                        int(e.get("broker_id", -1)),
                    )
                )
    return out


def _rlmm(record: Any) -> ck.RlmmRecord:
    f = record.fields
    if "remote_log_segment_id" in f:
        seg = f["remote_log_segment_id"]
        tid = str(seg["topic_id_partition"]["id"])
        return ck.RlmmRecord(
            tid,
            str(seg["id"]),
            f["remote_log_segment_state"],
            f.get("tiered_epoch", -1),
            record.name == "RemoteLogSegmentMetadataRecord",
            int(seg["topic_id_partition"]["partition"]),
            f.get("start_offset"),
            f.get("end_offset"),
        )
    tip = f["topic_id_partition"]
    return ck.RlmmRecord(str(tip["id"]), None, f["remote_partition_delete_state"], f.get("tiered_epoch", -1), False)

"""Hypothesis strategies of cluster metadata records over a few topics, for the tests that hold compiled loops
to their references (``test_compiled_replay.py``): creations, partitions, changes,
configs set and removed, tiered states (stale epochs and unknown codes among them), removals and broker fences,
real records made by ``make_record``."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from orchestrator.ids import Uuid
from orchestrator.metadata.records import make_record

TOPIC_IDS = [Uuid.random() for _ in range(3)]
NAMES = ["orders", "payments", "audit"]

broker_ids = st.lists(st.integers(0, 5), max_size=3)
# mostly the three known ids (so records meet the topics they name), sometimes one no record created: a replay
# stops at its first refused record, so refusals are kept rare enough for the runs to go on past them
topic_ids = st.sampled_from([*TOPIC_IDS] * 10 + [None]).map(lambda tid: tid or Uuid.random())
codes = st.sampled_from([0, 1, 2, 3] * 10 + [9])


def partition_record(tid: Uuid, pid: int, replicas: list[int], leader: int, epoch: int, elr: list[int] | None) -> Any:
    return make_record(
        "PartitionRecord",
        partition_id=pid,
        topic_id=tid,
        replicas=replicas,
        isr=replicas[:2],
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
        eligible_leader_replicas=elr,
    )


topic_records = st.builds(
    lambda i, tid: make_record("TopicRecord", name=NAMES[i], topic_id=tid), st.integers(0, 2), topic_ids
)
partition_records = st.builds(
    partition_record,
    topic_ids,
    st.integers(0, 3),
    broker_ids,
    st.integers(-1, 5),
    st.integers(0, 3),
    st.none() | broker_ids,
)
change_records = st.builds(
    lambda tid, pid, leader, isr: make_record(
        "PartitionChangeRecord", partition_id=pid, topic_id=tid, leader=leader, isr=isr
    ),
    topic_ids,
    st.integers(0, 3),
    st.integers(-2, 5),
    st.none() | broker_ids,
)
config_records = st.builds(
    lambda rtype, i, name, value: make_record(
        "ConfigRecord", resource_type=rtype, resource_name=NAMES[i], name=name, value=value
    ),
    st.sampled_from([2, 4]),
    st.integers(0, 2),
    st.sampled_from(["retention.ms", "remote.storage.enable"]),
    st.none() | st.sampled_from(["1", "true", "604800000"]),
)
tiered_records = st.builds(
    lambda tid, epoch, state, policy: make_record(
        "TieredStateRecord", topic_id=tid, tiered_epoch=epoch, tiered_state=state, policy=policy
    ),
    topic_ids,
    st.integers(0, 4),
    codes,
    codes,
)
other_records = st.builds(lambda bid: make_record("FenceBrokerRecord", id=bid, epoch=10), st.integers(0, 2))
removals = st.builds(lambda tid: make_record("RemoveTopicRecord", topic_id=tid), topic_ids)
# weighted by repetition: removals (after which records naming the topic are refused) are rarer
records = st.one_of(
    topic_records,
    *[partition_records] * 3,
    *[change_records] * 2,
    *[config_records] * 2,
    *[tiered_records] * 3,
    other_records,
    removals,
)

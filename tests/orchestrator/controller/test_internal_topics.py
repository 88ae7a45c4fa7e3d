"""The controller's internal topic ``__remote_log_metadata`` (orchestrator.controller.internal_topics): created by the
active core once the live brokers settle, once and whole, with Kafka's layout; and no client may create, delete,
grow or reconfigure it (orchestrator.admin_api.internal_topics), while every node says it is internal."""

from __future__ import annotations

import random
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.admin_api import internal_topics, reads
from orchestrator.controller.internal_topics import LiveBrokers, creation_due
from orchestrator.ids import Uuid
from orchestrator.metadata.records import TieredState, make_record
from orchestrator.settings import RemoteLogMetadataTopicSettings
from remote_storage.rlmm_topic.layout import TOPIC_CONFIGS, TOPIC_NAME
from tests.orchestrator.controller.test_core import CoreHarness

pytestmark = pytest.mark.unit

SETTLE_MS = 2_000
SETTINGS = RemoteLogMetadataTopicSettings(partitions=50, placement_settle_ms=SETTLE_MS)
INVALID_REQUEST, TOPIC_ALREADY_EXISTS = 42, 36


class InternalTopicHarness(CoreHarness):
    """A core harness whose cores create ``__remote_log_metadata`` (``remote_log_metadata``)."""

    remote_log_metadata = SETTINGS

    def tick_after(self, ms: int) -> None:
        """Time passes (brokers keep heart-beating), then the core ticks."""
        self.clock += ms
        for b in self.epochs:
            self.heartbeat(b)
        self.core.tick()


def test_creation_waits_for_live_brokers_that_stayed_the_same_for_the_settle_time() -> None:
    assert creation_due(None, frozenset(), now_ms=0, settle_ms=100) == (None, False)
    seen, due = creation_due(None, frozenset({1}), now_ms=10, settle_ms=100)
    assert (seen, due) == (LiveBrokers(frozenset({1}), 10), False)
    seen, due = creation_due(
        seen, frozenset({1, 2}), now_ms=100, settle_ms=100
    )  # a second broker: the wait starts over
    assert (seen, due) == (LiveBrokers(frozenset({1, 2}), 100), False)
    assert creation_due(seen, frozenset({1, 2}), now_ms=199, settle_ms=100) == (seen, False)
    assert creation_due(seen, frozenset({1, 2}), now_ms=200, settle_ms=100) == (seen, True)
    assert creation_due(seen, frozenset(), now_ms=300, settle_ms=100) == (None, False)  # every broker gone
    assert creation_due(None, frozenset({3}), now_ms=5, settle_ms=0)[1]


def test_the_active_core_creates_the_topic_with_kafkas_layout_over_every_broker_once_they_settled() -> None:
    c = InternalTopicHarness(brokers=3)
    c.tick_after(0)
    assert c.topic(TOPIC_NAME) is None, "the live brokers were first seen just now"
    c.tick_after(SETTLE_MS - 1)
    assert c.topic(TOPIC_NAME) is None
    c.tick_after(1)
    topic = c.topic(TOPIC_NAME)
    assert topic is not None and len(topic.partitions) == 50
    assert all(len(p.replicas) == 1 and p.leader == p.replicas[0] for p in topic.partitions.values())
    leaders = [p.leader for p in topic.partitions.values()]
    assert {leaders.count(b) for b in (1, 2, 3)} <= {16, 17}, "spread round-robin over the three brokers"
    assert dict(c.core.image.topic_configs(TOPIC_NAME)) == TOPIC_CONFIGS
    assert TOPIC_CONFIGS["retention.ms"] == "-1" and TOPIC_CONFIGS["cleanup.policy"] == "delete"
    assert TOPIC_CONFIGS["remote.storage.enable"] == "false"
    assert topic.tiered_state == TieredState.NOT_TIERED


def test_a_broker_that_registers_during_the_wait_gets_its_share() -> None:
    c = InternalTopicHarness(brokers=2)
    c.tick_after(0)
    c.tick_after(SETTLE_MS - 1)
    c.register(3)
    c.heartbeat(3)
    c.tick_after(1)
    assert c.topic(TOPIC_NAME) is None, "the live brokers changed: the wait started over"
    c.tick_after(SETTLE_MS)
    leaders = {p.leader for p in c.topic(TOPIC_NAME).partitions.values()}
    assert leaders == {1, 2, 3}


def test_the_topic_is_created_once_by_one_core_and_never_again_after_a_failover() -> None:
    c = InternalTopicHarness(brokers=1)
    c.tick_after(0)
    c.tick_after(SETTLE_MS)
    topic_id = c.topic(TOPIC_NAME).topic_id
    appended = c.store.end_offset()
    for _ in range(3):
        c.tick_after(SETTLE_MS)
    c.core = c.new_controller()  # a failover: the new active core sees the topic in the log
    c.tick_after(0)
    c.tick_after(SETTLE_MS)
    assert c.topic(TOPIC_NAME).topic_id == topic_id
    names = [e.record.fields.get("name") for e in c.store.read(from_offset=appended)]
    assert TOPIC_NAME not in names, "no second TopicRecord"


def test_a_core_without_the_setting_and_a_cluster_without_brokers_create_nothing() -> None:
    plain = CoreHarness(brokers=3)
    plain.clock += 10 * SETTLE_MS
    plain.core.tick()
    assert plain.topic(TOPIC_NAME) is None
    empty = InternalTopicHarness(brokers=0)
    empty.tick_after(0)
    empty.tick_after(10 * SETTLE_MS)
    assert empty.topic(TOPIC_NAME) is None


def test_a_topic_of_that_name_already_there_is_kept_and_a_different_partition_count_is_logged_once() -> None:
    c = InternalTopicHarness(brokers=1)
    tid = Uuid.random(random.Random(9).randbytes)
    partition = {"replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}
    records = [make_record("TopicRecord", name=TOPIC_NAME, topic_id=tid)]
    records += [make_record("PartitionRecord", partition_id=p, topic_id=tid, **partition) for p in range(3)]
    c.store.append(records, controller_epoch=c.core.controller_epoch)
    with capture_logs() as logs:
        c.tick_after(0)
        c.tick_after(SETTLE_MS)
        c.tick_after(SETTLE_MS)
    assert c.topic(TOPIC_NAME).topic_id == tid and len(c.topic(TOPIC_NAME).partitions) == 3
    differs = [e for e in logs if e["event"] == "rlmm_topic.partition_count_differs"]
    assert [(e["partitions"], e["configured_partitions"]) for e in differs] == [(3, 50)]


def _created(c: InternalTopicHarness) -> Any:
    c.tick_after(0)
    c.tick_after(SETTLE_MS)
    topic = c.topic(TOPIC_NAME)
    assert topic is not None
    return topic


def test_no_client_creates_deletes_grows_or_reconfigures_the_internal_topic() -> None:
    c = InternalTopicHarness(brokers=2)
    refused = c.create(TOPIC_NAME, num_partitions=3)
    assert (refused["error_code"], refused["error_message"]) == (
        INVALID_REQUEST,
        "Creation of internal topic __remote_log_metadata is prohibited.",
    )
    assert c.topic(TOPIC_NAME) is None, "not even before the controller made it"
    topic = _created(c)
    before = (c.store.end_offset(), dict(c.core.image.topic_configs(TOPIC_NAME)))
    assert c.create(TOPIC_NAME)["error_code"] == INVALID_REQUEST, "internal first, not TOPIC_ALREADY_EXISTS"

    by_name = c.core.delete_topics({"topic_names": [TOPIC_NAME]}, 5)["responses"][0]
    by_id = c.core.delete_topics({"topics": [{"name": None, "topic_id": topic.topic_id}]}, 6)["responses"][0]
    grow = {"topics": [{"name": TOPIC_NAME, "count": 60, "assignments": None}], "validate_only": False}
    grown = c.core.create_partitions(grow, 3)["results"][0]
    altered = c.alter(TOPIC_NAME, {"retention.ms": "60000"})
    replace = {"resources": [{"resource_type": 2, "resource_name": TOPIC_NAME, "configs": []}], "validate_only": False}
    replaced = c.core.alter_configs(replace, 2)["responses"][0]
    answers = {"delete by name": by_name, "delete by id": by_id, "grow": grown, "alter": altered, "replace": replaced}
    assert {what: a["error_code"] for what, a in answers.items()} == dict.fromkeys(answers, INVALID_REQUEST)
    assert (
        by_name["error_message"]
        == by_id["error_message"]
        == ("Deletion of internal topic __remote_log_metadata is prohibited.")
    )
    assert grown["error_message"] == "Partition change of internal topic __remote_log_metadata is prohibited."
    assert (
        altered["error_message"]
        == replaced["error_message"]
        == ("Config change of internal topic __remote_log_metadata is prohibited.")
    )
    assert (c.store.end_offset(), dict(c.core.image.topic_configs(TOPIC_NAME))) == before, "nothing written"
    assert c.create("orders")["error_code"] == 0, "other topics are served as always"


def test_every_node_says_the_topic_is_internal_and_only_it() -> None:
    c = InternalTopicHarness(brokers=2)
    _created(c)
    assert c.create("orders")["error_code"] == 0
    view = reads.ClusterView(cluster_id="tieredctl", nodes={}, controller_id=1, controllers={})
    for version in (1, 9, 12):
        answer = reads.metadata(c.core.refresh(), {"topics": None}, version, view)
        assert {t["name"]: t["is_internal"] for t in answer["topics"]} == {TOPIC_NAME: True, "orders": False}
    assert frozenset({TOPIC_NAME}) == internal_topics.INTERNAL_TOPICS
    assert internal_topics.produce_refusal("orders") is None
    refusal = internal_topics.produce_refusal(TOPIC_NAME)
    assert refusal is not None and (refusal.code, refusal.message) == (
        17,
        "Cannot append to internal topic __remote_log_metadata",
    )


@pytest.mark.parametrize(
    "name", ["__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"]
)
def test_kafkas_own_internal_names_are_never_created_by_a_client(name: str) -> None:
    """This cluster serves no group or transaction coordinator: a plain topic of one of those names would pass for
    Kafka's. Refused as Kafka refuses __cluster_metadata, nothing written; a name that only looks alike is a topic."""
    c = InternalTopicHarness(brokers=2)
    end = c.store.end_offset()
    refused = c.create(name)
    assert (refused["error_code"], refused["error_message"]) == (
        INVALID_REQUEST,
        f"Creation of internal topic {name} is prohibited.",
    )
    assert c.topic(name) is None and c.store.end_offset() == end
    assert c.create(f"{name}_mine")["error_code"] == 0

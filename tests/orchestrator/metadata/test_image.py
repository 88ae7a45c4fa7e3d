import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import ResourceNotFound, StaleTieredEpoch, UnknownTopicId
from orchestrator.ids import Uuid
from orchestrator.metadata.image import (
    EMPTY_IMAGE,
    from_snapshot,
    replay,
)
from orchestrator.metadata.image_changes import same_topic_ids, topics_with_new_partitions
from orchestrator.metadata.records import (
    ConfigResourceType,
    DisablePolicy,
    TieredState,
    decode_record,
    encode_record,
    make_record,
)
from orchestrator.security.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from orchestrator.security.scram import ScramCredential

pytestmark = pytest.mark.unit


def _numbered(records, start=0):
    return list(enumerate(records, start))


def _broker(bid, epoch=10, fenced=True):
    return make_record(
        "RegisterBrokerRecord",
        broker_id=bid,
        incarnation_id=Uuid.random(),
        broker_epoch=epoch,
        end_points=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + bid, "security_protocol": 0}],
        rack=None,
        fenced=fenced,
    )


def _topic(name, tid, partitions=2, replicas=(1, 2)):
    recs = [make_record("TopicRecord", name=name, topic_id=tid)]
    for p in range(partitions):
        recs.append(
            make_record(
                "PartitionRecord",
                partition_id=p,
                topic_id=tid,
                replicas=list(replicas),
                isr=list(replicas),
                leader=replicas[p % len(replicas)],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return recs


def _cluster():
    tid = Uuid.random()
    recs = [
        _broker(1),
        _broker(2),
        make_record("UnfenceBrokerRecord", id=1, epoch=10),
        *_topic("orders", tid),
        make_record(
            "ConfigRecord",
            resource_type=ConfigResourceType.TOPIC,
            resource_name="orders",
            name="remote.storage.enable",
            value="true",
        ),
        make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=TieredState.ENABLED, policy=0),
    ]
    return tid, recs


def test_replay_builds_brokers_topics_partitions_configs_and_tiered_state():
    tid, recs = _cluster()
    image = replay(EMPTY_IMAGE, _numbered(recs))
    assert image.offset == len(recs) - 1
    assert not image.brokers[1].fenced and image.brokers[2].fenced
    topic = image.topic_by_name("orders")
    assert topic.topic_id == tid and sorted(topic.partitions) == [0, 1]
    assert topic.tiered_state is TieredState.ENABLED and topic.tiered_epoch == 1
    assert image.topic_configs("orders") == {"remote.storage.enable": "true"}
    assert topic.replica_brokers() == {1, 2}


def test_replay_is_pure_and_copies_only_what_it_changes():
    tid, recs = _cluster()
    before = replay(EMPTY_IMAGE, _numbered(recs))
    change = make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, leader=2, isr=[2])
    after = replay(before, [(before.offset + 1, change)])
    assert before.topics[tid].partitions[0].leader == 1
    p = after.topics[tid].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2,), 1, 1)
    assert after.brokers is before.brokers  # untouched maps are shared, not copied
    assert after.topics[tid].partitions[1] is before.topics[tid].partitions[1]


def test_remove_topic_removes_everything_of_that_id_and_a_recreated_name_is_a_new_topic():
    tid, recs = _cluster()
    image = replay(EMPTY_IMAGE, _numbered(recs))
    new_tid = Uuid.random()
    image = replay(
        image,
        _numbered([make_record("RemoveTopicRecord", topic_id=tid), *_topic("orders", new_tid, 1)], image.offset + 1),
    )
    assert tid not in image.topics and image.topic_by_name("orders").topic_id == new_tid
    assert image.topic_configs("orders") == {}
    assert image.topics[new_tid].tiered_state is TieredState.NOT_TIERED


def test_tiered_epoch_only_grows():
    tid, recs = _cluster()
    image = replay(EMPTY_IMAGE, _numbered(recs))
    with pytest.raises(StaleTieredEpoch):
        replay(
            image,
            [
                (
                    image.offset + 1,
                    make_record("TieredStateRecord", topic_id=tid, tiered_epoch=0, tiered_state=2, policy=2),
                )
            ],
        )


def test_records_about_unknown_topics_and_out_of_order_offsets_are_refused():
    with pytest.raises(UnknownTopicId):
        replay(EMPTY_IMAGE, [(0, make_record("RemoveTopicRecord", topic_id=Uuid.random()))])
    _, recs = _cluster()
    image = replay(EMPTY_IMAGE, _numbered(recs))
    with pytest.raises(ValueError, match="offset"):
        replay(image, [(image.offset, recs[0])])


def test_fencing_records_apply_only_to_the_current_broker_epoch():
    image = replay(EMPTY_IMAGE, _numbered([_broker(1, epoch=5, fenced=False)]))
    image = replay(image, [(1, make_record("FenceBrokerRecord", id=1, epoch=4))])
    assert not image.brokers[1].fenced
    image = replay(image, [(2, make_record("BrokerRegistrationChangeRecord", broker_id=1, broker_epoch=5, fenced=1))])
    assert image.brokers[1].fenced
    image = replay(image, [(3, make_record("UnregisterBrokerRecord", broker_id=1, broker_epoch=5))])
    assert 1 not in image.brokers


def replace_fields(record, **fields):
    return make_record(record.name, **{**record.fields, **fields})


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text("abcxyz._-", min_size=1, max_size=12),
            st.integers(1, 4),
            st.sampled_from(list(TieredState)[1:]),
            st.integers(1, 9),
        ),
        max_size=6,
        unique_by=lambda t: t[0],
    )
)
def test_a_snapshot_replays_to_an_equal_image(topics):
    recs = [_broker(1), _broker(2, fenced=False)]
    for name, parts, state, epoch in topics:
        tid = Uuid.random()
        recs += _topic(name, tid, parts)
        recs.append(
            make_record(
                "TieredStateRecord", topic_id=tid, tiered_epoch=epoch, tiered_state=state, policy=DisablePolicy.DELETE
            )
        )
        recs.append(make_record("ConfigRecord", resource_type=2, resource_name=name, name="retention.ms", value="1000"))
    if topics:  # an eligible leader replica and a broker's log directory (tagged fields) survive the snapshot too
        first = next(r for r in recs if r.name == "PartitionRecord").fields
        recs.append(
            make_record(
                "PartitionChangeRecord",
                topic_id=first["topic_id"],
                partition_id=first["partition_id"],
                isr=[1],
                eligible_leader_replicas=[2],
            )
        )
    recs.append(replace_fields(_broker(3), log_dirs=[Uuid.random()]))
    image = replay(EMPTY_IMAGE, _numbered(recs))
    if topics:
        assert any(p.elr == (2,) for t in image.topics.values() for p in t.partitions.values())
    assert image.brokers[3].log_dirs
    snapshot = [decode_record(encode_record(r)) for r in image.to_records()]
    again = replay(EMPTY_IMAGE, _numbered(snapshot))
    assert dict(again.topics) == dict(image.topics)
    assert dict(again.brokers) == dict(image.brokers)
    assert dict(again.configs) == dict(image.configs)


def _acl_record(acl_id, name, permission=AclPermissionType.ALLOW):
    return make_record(
        "AccessControlEntryRecord",
        id=acl_id,
        resource_type=ResourceType.TOPIC,
        resource_name=name,
        pattern_type=PatternType.PREFIXED,
        principal="User:alice",
        host="*",
        operation=AclOperation.READ,
        permission_type=permission,
    )


def _scram_record(user, mechanism, iterations=4096):
    return make_record(
        "UserScramCredentialRecord",
        name=user,
        mechanism=mechanism,
        salt=b"s" * 16,
        stored_key=bytes([mechanism]) * 32,
        server_key=b"k" * 32,
        iterations=iterations,
    )


def test_acls_and_scram_credentials_are_replayed_removed_and_kept_by_a_snapshot():
    keep, drop = Uuid.random(), Uuid.random()
    recs = [
        _acl_record(keep, "orders-"),
        _acl_record(drop, "payments", AclPermissionType.DENY),
        _scram_record("alice", 1),
        _scram_record("alice", 2),
        _scram_record("bob", 1),
        _scram_record("alice", 1, iterations=8192),  # an upsertion replaces the credential
        make_record("RemoveAccessControlEntryRecord", id=drop),
        make_record("RemoveUserScramCredentialRecord", name="bob", mechanism=1),
    ]
    image = replay(EMPTY_IMAGE, _numbered(recs))
    assert dict(image.acls) == {
        keep: AclBinding(
            ResourceType.TOPIC,
            "orders-",
            PatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    }
    assert sorted(image.scram_credentials) == [("alice", 1), ("alice", 2)]
    assert image.scram_credential("alice", 1) == ScramCredential(b"s" * 16, b"\x01" * 32, b"k" * 32, 8192)
    assert image.scram_credential("bob", 1) is None

    snapshot = [decode_record(encode_record(r)) for r in image.to_records()]
    again = replay(EMPTY_IMAGE, _numbered(snapshot))
    assert dict(again.acls) == dict(image.acls)
    assert dict(again.scram_credentials) == dict(image.scram_credentials)

    unrelated = replay(image, [(image.offset + 1, make_record("TopicRecord", name="x", topic_id=Uuid.random()))])
    assert unrelated.acls is image.acls and unrelated.scram_credentials is image.scram_credentials


def test_removing_an_acl_or_a_credential_the_image_does_not_hold_is_refused():
    with pytest.raises(ResourceNotFound):
        replay(EMPTY_IMAGE, [(0, make_record("RemoveAccessControlEntryRecord", id=Uuid.random()))])
    with pytest.raises(ResourceNotFound):
        replay(EMPTY_IMAGE, [(0, make_record("RemoveUserScramCredentialRecord", name="alice", mechanism=1))])


def _many_topics(n):
    tids = [Uuid.random() for _ in range(n)]
    recs = [r for i, tid in enumerate(tids) for r in _topic(f"t{i}", tid)]
    return tids, replay(EMPTY_IMAGE, _numbered(recs))


def _then(image, *records):
    return replay(image, _numbered(records, image.offset + 1))


def test_images_derived_from_each_other_are_compared_without_hashing_a_topic_id(monkeypatch):
    """A tiered-state change of every topic (a bulk disablement) leaves the topic ids and every partitions map as
    they were: both questions are answered without one Uuid hash."""
    tids, before = _many_topics(50)
    states = [
        make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=TieredState.DISABLING, policy=0)
        for tid in tids
    ]
    after = _then(before, *states)
    hashed = []
    real_hash = Uuid.__hash__
    monkeypatch.setattr(Uuid, "__hash__", lambda self: hashed.append(self) or real_hash(self))
    assert same_topic_ids(before.topics, after.topics)
    assert topics_with_new_partitions(before.topics, after.topics) == []
    assert hashed == []


def test_new_topics_moved_partitions_and_removed_topics_are_found_the_same_with_or_without_aligned_ids():
    tids, before = _many_topics(6)
    new = Uuid.random()
    after = _then(
        before,
        *_topic("fresh", new),
        make_record("PartitionChangeRecord", topic_id=tids[2], partition_id=0, leader=2, isr=[2]),
    )
    assert [t.topic_id for t in topics_with_new_partitions(before.topics, after.topics)] == [tids[2], new]
    assert not same_topic_ids(before.topics, after.topics)

    removed = _then(after, make_record("RemoveTopicRecord", topic_id=tids[4]))
    assert not same_topic_ids(after.topics, removed.topics)
    assert topics_with_new_partitions(after.topics, removed.topics) == []

    # One topic deleted and another created between two rounds: as many topics as before, not the same ids.
    swapped = _then(removed, *_topic("other", newer := Uuid.random()))
    assert len(swapped.topics) == len(after.topics) and not same_topic_ids(after.topics, swapped.topics)
    assert [t.topic_id for t in topics_with_new_partitions(after.topics, swapped.topics)] == [newer]

    # An image rebuilt from a snapshot holds equal ids but other objects: compared by id, with the same answers.
    rebuilt = from_snapshot(removed.offset, removed.to_records())
    assert same_topic_ids(removed.topics, rebuilt.topics)
    assert not same_topic_ids(after.topics, rebuilt.topics)
    changed = topics_with_new_partitions(before.topics, rebuilt.topics)
    assert {t.topic_id for t in changed} == set(rebuilt.topics), "every partitions map is a new object"
    replaced = {**removed.topics}  # same ids, another order: not aligned, still the same set
    first = next(iter(replaced))
    replaced[first] = replaced.pop(first)
    assert same_topic_ids(removed.topics, replaced)
    assert topics_with_new_partitions(removed.topics, replaced) == []


def test_every_partition_change_bumps_the_partition_epoch_and_only_a_new_leader_bumps_the_leader_epoch():
    tid, recs = _cluster()
    image = replay(EMPTY_IMAGE, _numbered(recs))
    changes = [
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, isr=[1]), (1, (1,), 0, 1)),  # shrink
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, isr=[1, 2]), (1, (1, 2), 0, 2)),  # expand
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, leader=2), (2, (1, 2), 1, 3)),
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, leader=2), (2, (1, 2), 1, 4)),  # same
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, leader=-1, isr=[2]), (-1, (2,), 2, 5)),
        (make_record("PartitionChangeRecord", topic_id=tid, partition_id=0, leader=2), (2, (2,), 3, 6)),
    ]
    for record, expected in changes:
        image = replay(image, [(image.offset + 1, record)])
        p = image.topics[tid].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == expected, record
    untouched = image.topics[tid].partitions[1]
    assert (untouched.leader_epoch, untouched.partition_epoch) == (0, 0)

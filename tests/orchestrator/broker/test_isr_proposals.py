"""A leader's ISR changes (orchestrator.broker.isr_proposals.py): who leaves, who joins, and that each change is asked
once per partition epoch. The controller's side of AlterPartition is tested with the controller."""

import asyncio
from dataclasses import replace

import pytest

from orchestrator.broker.isr_proposals import IsrChanges, IsrProposal, propose
from orchestrator.broker.replication import ReplicaStates
from orchestrator.errors import NotController
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, PartitionImage, TopicImage

pytestmark = pytest.mark.unit

TID = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
KEY = (TID, 0)
P = PartitionImage(partition_id=0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=9)
LAG = 30_000


def _fetch(states, follower, offset, *, now, leader_end=100):
    states.follower_fetched(
        KEY, leader_epoch=4, follower=follower, fetch_offset=offset, leader_end=leader_end, now_ms=now
    )


def _propose(states, p=P, *, now, since=0, epoch_start=0):
    return propose(p, KEY, states, now_ms=now, lag_max_ms=LAG, leading_since_ms=since, epoch_start_offset=epoch_start)


def test_a_member_not_caught_up_within_the_lag_time_leaves_and_the_leader_stays():
    states = ReplicaStates()
    _fetch(states, 2, 100, now=1_000)
    _fetch(states, 3, 100, now=1_000)
    assert _propose(states, now=20_000) is None
    _fetch(states, 2, 100, now=25_000)
    assert _propose(states, now=40_000) == (1, 2), "3 last caught up at 1 s"
    assert _propose(states, now=70_000) == (1,), "every follower gone: the leader alone"


def test_a_replica_joins_once_its_log_reaches_the_high_watermark_and_the_start_of_the_leaders_epoch():
    states = ReplicaStates()
    p = replace(P, isr=(1, 2))
    _fetch(states, 2, 100, now=1_000)
    assert states.high_watermark(KEY, leader_epoch=4, leader=1, isr=(1, 2), leader_end=100, log_start=0) == 100
    _fetch(states, 3, 90, now=1_000)
    assert _propose(states, p, now=2_000) is None, "3 is below the high watermark"
    _fetch(states, 3, 100, now=2_000)
    assert _propose(states, p, now=3_000, epoch_start=101) is None, "nothing of the leader's epoch yet"
    assert _propose(states, p, now=3_000, epoch_start=100) == (1, 2, 3), "in replica order"


def test_a_follower_dropped_for_its_lag_is_not_taken_back_on_a_fetch_from_before():
    # 3 fetched at the high watermark at 1 s and was not heard of again (it died there): dropped once its lag passed,
    # it must not be taken back in the next round on that old fetch, dropped again, and so on (the ISR flapped).
    states = ReplicaStates()
    _fetch(states, 2, 100, now=35_000)
    _fetch(states, 3, 100, now=1_000)
    assert _propose(states, now=40_000) == (1, 2)
    dropped = replace(P, isr=(1, 2))
    assert _propose(states, dropped, now=40_100) is None, "3 stays out"
    _fetch(states, 3, 100, now=41_000)
    assert _propose(states, dropped, now=41_100) == (1, 2, 3), "its next fetch takes it back"


def test_a_partition_of_one_replica_is_never_changed():
    assert _propose(ReplicaStates(), replace(P, replicas=(1,), isr=(1,)), now=10**9) is None


def _image(p: PartitionImage) -> MetadataImage:
    topic = TopicImage(topic_id=TID, name="t", partitions={0: p})
    return replace(MetadataImage(), topics={TID: topic})


def test_each_change_is_asked_once_per_partition_epoch_and_again_after_a_failure():
    states = ReplicaStates()
    current = {"p": P}
    asked: list[IsrProposal] = []
    failures = [NotController("moving")]

    async def alter(proposal: IsrProposal) -> None:
        asked.append(proposal)
        if failures:
            raise failures.pop()

    now = {"ms": 0}
    changes = IsrChanges(
        broker_id=1,
        image=lambda: _image(current["p"]),
        replicas=states,
        epoch_start_offset=lambda key, epoch: 0,
        alter=alter,
        lag_max_ms=LAG,
        now_ms=lambda: now["ms"],
    )
    asyncio.run(changes.round())  # begins leading at 0
    assert asked == []
    now["ms"] = 40_000
    asyncio.run(changes.round())
    asyncio.run(changes.round())
    asyncio.run(changes.round())
    expected = IsrProposal(TID, 0, 4, 9, (1,))
    assert asked == [expected, expected], "refused once, asked again, then not again at the same partition epoch"
    current["p"] = replace(P, isr=(1,), partition_epoch=10)  # the image shows it
    asyncio.run(changes.round())
    assert len(asked) == 2


def test_the_partitions_led_are_worked_out_once_per_image_and_the_lag_clock_still_runs(monkeypatch):
    """Which partitions a leader looks after is a walk of the whole image: once per image, not each round; the
    shrink still comes when the lag time passes with the image unchanged."""
    from orchestrator.broker import isr_proposals

    walks = []
    real = isr_proposals.led_with_replicas
    monkeypatch.setattr(isr_proposals, "led_with_replicas", lambda image, b: walks.append(image) or real(image, b))
    image = MetadataImage(topics={TID: TopicImage(topic_id=TID, name="t", partitions={0: P})})
    now = [1_000]
    asked = []

    async def alter(proposal):
        asked.append(proposal.new_isr)

    states = ReplicaStates()
    changes = IsrChanges(
        broker_id=1,
        image=lambda: image,
        replicas=states,
        epoch_start_offset=lambda key, epoch: 0,
        alter=alter,
        lag_max_ms=LAG,
        now_ms=lambda: now[0],
    )
    _fetch(states, 2, 100, now=1_000)
    _fetch(states, 3, 100, now=1_000)
    for t in (1_000, 20_000, 40_000):
        now[0] = t
        _fetch(states, 2, 100, now=t)
        asyncio.run(changes.round())
    assert len(walks) == 1
    assert asked == [(1, 2)], "3 left once the lag time passed, the image the same object all along"

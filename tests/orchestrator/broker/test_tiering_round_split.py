"""A tiering round's split of the open logs into those the broker leads and the others (``split_by_leadership``).

The split must be right (leadership as the image says, a log whose topic or partition the image no longer holds is
not led, the logs' order kept) and linear: the round runs it over every log the broker holds. The split it replaced
tested list membership, comparing topic ids pairwise: about n²/2 comparisons, which at 20,000 logs held a broker's
CPU for a whole round. Linearity is checked by counting topic-id comparisons, not by timing.
"""

from __future__ import annotations

import pytest

from orchestrator.broker.hosted_logs import split_by_leadership
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import make_record

pytestmark = pytest.mark.unit


def _image(topics: int, partitions: int, brokers: int) -> MetadataImage:
    records = []
    for t in range(topics):
        tid = Uuid.random()
        records.append(make_record("TopicRecord", name=f"t-{t}", topic_id=tid))
        for p in range(partitions):
            leader = (t * partitions + p) % brokers
            records.append(
                make_record(
                    "PartitionRecord", partition_id=p, topic_id=tid, replicas=[leader], isr=[leader], leader=leader
                )
            )
    return replay(EMPTY_IMAGE, list(enumerate(records)))


def test_the_logs_split_by_the_images_leaders_in_their_order() -> None:
    image = _image(topics=20, partitions=3, brokers=2)
    keys = [(tid, p) for tid, topic in image.topics.items() for p in topic.partitions]
    gone_topic, gone_partition = (Uuid.random(), 0), (keys[0][0], 99)
    keys = [gone_topic, *reversed(keys), gone_partition]
    led, followed = split_by_leadership(keys, image, broker_id=1)
    assert led == [
        k for k in keys if k not in (gone_topic, gone_partition) and image.topics[k[0]].partitions[k[1]].leader == 1
    ]
    assert followed == [k for k in keys if k not in led]
    assert len(led) == 30 and gone_topic in followed and gone_partition in followed


def test_the_split_compares_no_two_topic_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    image = _image(topics=400, partitions=5, brokers=2)
    # the keys hold copies of the ids (as logs opened from another image would), so every look-up hashes and compares
    keys = [(Uuid(bytes(tid.raw)), p) for tid, topic in image.topics.items() for p in topic.partitions]
    compared = 0
    equal = Uuid.__eq__

    def counting_eq(self: Uuid, other: object) -> bool:
        nonlocal compared
        compared += 1
        return equal(self, other)

    monkeypatch.setattr(Uuid, "__eq__", counting_eq)
    led, followed = split_by_leadership(keys, image, broker_id=0)
    assert len(led) == len(followed) == 1000
    assert compared <= len(keys)  # one per look-up at most; pairwise membership tests made about 500,000 here

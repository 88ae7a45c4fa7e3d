"""What the metadata image says a partition's requests must respect: KIP-320's leader-epoch fence (Fetch,
ListOffsets, OffsetForLeaderEpoch) and the topic's produce rules (its configs as :class:`ProducePolicy`).

Pure functions of the image: they read it and raise or return, and never touch a log.
"""

from __future__ import annotations

from orchestrator.broker.produce_validation import ProducePolicy
from orchestrator.errors import FencedLeaderEpoch, UnknownLeaderEpoch
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.topic_configs import int_or_default


def produce_policy(image: MetadataImage, topic: TopicImage) -> ProducePolicy:
    configs = image.topic_configs(topic.name)
    return ProducePolicy(
        max_message_bytes=int_or_default(configs, "max.message.bytes"),
        log_append_time=configs.get("message.timestamp.type") == "LogAppendTime",
        timestamp_before_max_ms=int_or_default(configs, "message.timestamp.before.max.ms"),
        timestamp_after_max_ms=int_or_default(configs, "message.timestamp.after.max.ms"),
    )


def check_leader_epoch(topic: TopicImage, partition: int, current_leader_epoch: int) -> None:
    """KIP-320's fence: a client's leader epoch (-1: none given) must be the partition's."""
    p = topic.partitions.get(partition)
    if p is None or current_leader_epoch < 0:
        return
    if current_leader_epoch < p.leader_epoch:
        raise FencedLeaderEpoch(
            f"{topic.name}-{partition}: the client's leader epoch {current_leader_epoch} is older than "
            f"{p.leader_epoch}; refresh metadata"
        )
    if current_leader_epoch > p.leader_epoch:
        raise UnknownLeaderEpoch(
            f"{topic.name}-{partition}: the client's leader epoch {current_leader_epoch} is newer than this "
            f"broker's {p.leader_epoch}"
        )

"""What changed between two images of the metadata, told by identity where one was replayed from the other.

Replay is copy-on-write (:mod:`.image`): what a batch did not touch stays the very same object, the topics' keys
(their Uuid objects) in the same order included. So an image and one derived from it are compared key by key and
partitions map by partitions map with ``is``, without hashing a Uuid (a Python-level call). Both functions fall back
to comparing by id when the identities do not line up (e.g. an image rebuilt from a snapshot).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping

from orchestrator.ids import Uuid
from orchestrator.metadata.image import TopicImage

_PARTITIONS = operator.attrgetter("partitions")


def _aligned(before: Mapping[Uuid, TopicImage], now: Mapping[Uuid, TopicImage]) -> bool:
    """Whether both maps hold the very same key objects in the same order (one derived from the other, no topic
    added or removed): checked without hashing."""
    return before is now or (len(before) == len(now) and all(map(operator.is_, before, now)))


def same_topic_ids(before: Mapping[Uuid, TopicImage], now: Mapping[Uuid, TopicImage]) -> bool:
    """Whether two images' ``topics`` hold the same topic ids."""
    return _aligned(before, now) or before.keys() == now.keys()


def topics_with_new_partitions(before: Mapping[Uuid, TopicImage], now: Mapping[Uuid, TopicImage]) -> list[TopicImage]:
    """The topics of ``now`` whose partitions map is not the very object it is in ``before``: topics new since, and
    topics whose partitions were added, moved or changed (leader, ISR, replicas), in ``now``'s order."""
    if _aligned(before, now):
        unchanged = map(operator.is_, map(_PARTITIONS, before.values()), map(_PARTITIONS, now.values()))
        return list(itertools.compress(now.values(), map(operator.not_, unchanged)))
    return [t for t in now.values() if (then := before.get(t.topic_id)) is None or then.partitions is not t.partitions]

"""A topic's tiering as a cluster without our APIs shows it: derived from its configs and the metadata topic, and
rendered for ``tiering status|disable|enable --compat kafka`` (text and JSON, as one :class:`Message`).

Pure: :func:`derive_state` and the renderers read values, never the cluster.

What the configs and the metadata topic tell, and what they cannot:

* ``remote.storage.enable=true`` and copies on: ENABLED. With ``remote.log.copy.disable=true``: retain, DISABLING
  while a copy is in flight (a COPY_SEGMENT_STARTED not finished), then DISABLED.
* ``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true``: delete, DISABLING until every segment
  of the topic is DELETE_SEGMENT_FINISHED, then DISABLED. A partition whose deletion failed stays DISABLING for
  ever (Kafka does not retry); the segments still there are listed.
* ``remote.storage.enable=false`` otherwise: NOT_TIERED when the metadata topic holds no segment of it; else
  DISABLED, its policy retain while live segments remain (a topic turned off before Kafka 3.9's rules, or by our
  own ``remote.log.disable.policy``), delete once none does.
* Not known without our APIs: the tiered epoch (JSON ``tiered_epoch`` null), which brokers still owe an
  acknowledgement (``pending_brokers`` always empty: Kafka's brokers acknowledge nothing), when a leader will retry
  (never), and whether a segment's objects are really gone from the bucket: that is the scan's job
  (``scan run --source kafka``).

The JSON of a topic keeps the keys of ``tiering status --output json`` (``topic``, ``topic_id``, ``state``,
``tiered_epoch``, ``policy``, ``pending_brokers``) and adds ``compat`` ("kafka"), ``configs``, ``segments`` (totals)
and ``partitions`` (per partition: copying, copied, deleting, deleted, segments_remaining, bytes_remaining),
``metadata_history_complete`` and ``metadata_topic_found``. Without the metadata topic a delete is never taken
for finished: a topic whose segments were not recorded there yet would look deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.cli.views import Message
from orchestrator.client.kafka_configs import copy_disabled, delete_on_disable, remote_storage_on
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.metadata.topic_configs import (
    LOCAL_RETENTION_BYTES,
    LOCAL_RETENTION_MS,
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    REMOTE_STORAGE_ENABLE,
)
from remote_storage.rlmm_topic.progress import PartitionProgress, TopicSegments

SHOWN_CONFIGS = (
    REMOTE_STORAGE_ENABLE,
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    LOCAL_RETENTION_MS,
    LOCAL_RETENTION_BYTES,
)
SCAN_AND_RECLAIM = (
    "tieredctl --bootstrap-server BS scan run --source kafka --bucket B --prefix P --inventory MANIFEST --out DIR, "
    "then tieredctl reclaim DIR --execute"
)


def derive_state(
    configs: Mapping[str, str | None], segments: TopicSegments, *, metadata_found: bool = True
) -> tuple[TieredState, DisablePolicy]:
    """The topic's state and policy from its configs and its segments (see the module docstring); without the
    metadata topic (``metadata_found`` false) no delete is known to be finished."""
    if remote_storage_on(configs):
        if not copy_disabled(configs):
            return TieredState.ENABLED, DisablePolicy.NONE
        in_flight = segments.copies_in_flight > 0
        return (TieredState.DISABLING if in_flight else TieredState.DISABLED), DisablePolicy.RETAIN
    if delete_on_disable(configs):
        finished = segments.all_deleted and (metadata_found or bool(segments.segments))
        return (TieredState.DISABLED if finished else TieredState.DISABLING), DisablePolicy.DELETE
    if not segments.segments:
        return TieredState.NOT_TIERED, DisablePolicy.NONE
    return TieredState.DISABLED, DisablePolicy.DELETE if segments.all_deleted else DisablePolicy.RETAIN


@dataclass(frozen=True)
class KafkaTopicStatus:
    """One topic as ``--compat kafka`` sees it."""

    topic: str
    topic_id: Uuid
    partition_count: int
    configs: Mapping[str, str | None]
    segments: TopicSegments
    history_complete: bool = True  # False: the metadata topic's first records of it are gone
    metadata_found: bool = True  # False: the cluster has no metadata topic (yet)

    @property
    def state(self) -> TieredState:
        return derive_state(self.configs, self.segments, metadata_found=self.metadata_found)[0]

    @property
    def policy(self) -> DisablePolicy:
        return derive_state(self.configs, self.segments, metadata_found=self.metadata_found)[1]

    @property
    def unfinished(self) -> list[PartitionProgress]:
        """The partitions that keep it from DISABLED: with delete, those with segments not deleted; otherwise
        those with a copy in flight."""
        if self.policy == DisablePolicy.DELETE:
            return self.remaining
        return [p for p in self.partitions if p.copying]

    @property
    def partitions(self) -> list[PartitionProgress]:
        return self.segments.partitions(self.partition_count)

    @property
    def remaining(self) -> list[PartitionProgress]:
        return [p for p in self.partitions if p.remaining]

    def as_json(self) -> dict[str, Any]:
        parts = self.partitions
        policy = self.policy
        return {
            "topic": self.topic,
            "topic_id": str(self.topic_id),
            "state": self.state.name,
            "tiered_epoch": None,
            "policy": policy.name.lower() if policy != DisablePolicy.NONE else None,
            "pending_brokers": [],
            "compat": "kafka",
            "configs": {k: self.configs.get(k) for k in SHOWN_CONFIGS},
            "segments": {
                name: sum(getattr(p, name) for p in parts) for name in ("copying", "copied", "deleting", "deleted")
            },
            "partitions": [p.as_json() for p in parts],
            "metadata_history_complete": self.history_complete,
            "metadata_topic_found": self.metadata_found,
        }

    def text(self) -> str:
        parts = self.partitions
        totals = {name: sum(getattr(p, name) for p in parts) for name in ("copying", "copied", "deleting", "deleted")}
        policy = self.policy
        head = f"{self.topic}: {self.state.name}" + (
            f" ({policy.name.lower()})" if policy != DisablePolicy.NONE else ""
        )
        lines = [
            head + f"  [from Kafka's configs and the metadata topic; topic id {self.topic_id}]",
            "  configs: " + ", ".join(f"{k}={self.configs.get(k)}" for k in SHOWN_CONFIGS),
            "  segments: " + ", ".join(f"{n} {c}" for n, c in totals.items()),
        ]
        lines += [f"  {_partition_line(p)}" for p in self.unfinished]
        if not self.metadata_found:
            lines.append("  the cluster has no metadata topic: no segment of it is known")
        if not self.history_complete:
            lines.append("  the metadata topic's first records are gone: segments copied before them are not counted")
        return "\n".join(lines)


def _partition_line(p: PartitionProgress) -> str:
    return (
        f"partition {p.partition}: {p.remaining} segment(s) remaining, {p.bytes_remaining} bytes "
        f"(copying {p.copying}, copied {p.copied}, deleting {p.deleting}; deleted {p.deleted})"
    )


def status_message(statuses: Sequence[KafkaTopicStatus]) -> Message:
    return Message([s.as_json() for s in statuses], "\n".join(s.text() for s in statuses) or "no topics")


def stalled_message(change: Message, status: KafkaTopicStatus, *, stalled_s: float) -> tuple[Message, str]:
    """What ``--wait`` shows when the topic's segments stopped moving: the change's result (``change``, from
    :func:`change_message`) marked stalled, and the error's message listing what remains per partition and naming the
    scan and reclaim that finish the job."""
    remaining = status.remaining
    listed = "; ".join(
        f"partition {p.partition}: {p.remaining} segment(s), {p.bytes_remaining} bytes" for p in remaining
    )
    what = "deletion" if status.policy == DisablePolicy.DELETE else "copying"
    message = (
        f"{status.topic}: the remote {what} stopped moving ({stalled_s:g}s without a segment changing state) with "
        f"{sum(p.remaining for p in remaining)} segment(s) left ({listed or 'none'}). Kafka does not retry a failed "
        f"deletion: find and remove what is left with {SCAN_AND_RECLAIM}"
    )
    data = change.data | {"stalled": True, "stalled_seconds": stalled_s, "next": SCAN_AND_RECLAIM}
    return Message(data, change.text), message


def change_message(
    status: KafkaTopicStatus, *, sent: Mapping[str, Any] | None, replaced: Mapping[str, str] | None = None
) -> Message:
    """A change's result: what was sent (None: nothing, already so) and where the topic stands."""
    data = status.as_json() | {"sent": sent}
    if sent is None:
        first = f"{status.topic}: already so, nothing sent"
    else:
        set_ = ", ".join(f"{k}={v}" for k, v in sent["set"].items())
        deleted = ", ".join(sent["delete"])
        first = f"{status.topic}: sent " + "; ".join(x for x in (set_, deleted and f"deleted {deleted}") if x)
    lines = [first]
    if replaced:
        lines.append(
            "  replaced topic-level "
            + ", ".join(f"{k}={v}" for k, v in replaced.items())
            + ": 'tieredctl configs alter' sets them again after 'tiering enable'"
        )
    return Message(data, "\n".join([*lines, status.text()]))

"""The ``__remote_log_metadata`` topic's name and defaults, and the settings our cluster lays it out by.

Kafka's defaults (``TopicBasedRemoteLogMetadataManagerConfig``): 50 partitions, retention.ms -1, replication 3.

Which record version we write (:attr:`RemoteLogMetadataTopicSettings.record_version`):

* **0, the default.** Every Kafka release with tiered storage (3.6 on, when CustomMetadata joined version 0)
  reads it. Kafka's generated reader refuses any version above the highest it knows (``UnsupportedVersionException:
  Can't read version 1 of ...``), and Kafka's releases define version 0 only (4.0 added ``TxnIndexEmpty`` as tag 0
  of version 0, which older readers skip as an unknown tag; version 1 is newer than every release we could check,
  up to 4.3), so a version-1 record would stop a stock 3.9 or 4.x reader at its offset.
* **1**, for readers that know it: it adds BrokerLeaderEpoch and (updates, partition deletes) EndOffset. Worth it
  once the writer knows those values; left at their defaults they are not written at all (tagged fields).

Our ``TieredEpoch`` (tag 10950) rides along at both versions; Kafka readers skip it.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import InvalidArgument

TOPIC_NAME = "__remote_log_metadata"
DEFAULT_PARTITIONS = 50
DEFAULT_RETENTION_MS = -1
DEFAULT_RECORD_VERSION = 0
RECORD_VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class RemoteLogMetadataTopicSettings:
    """How our cluster lays out ``__remote_log_metadata``."""

    # Kafka's remote.log.metadata.topic.num.partitions default. Changing it for a topic already written moves every
    # topic-partition's records to another partition: readers that key on the partition must start over.
    partitions: int = DEFAULT_PARTITIONS
    # The version of the records we publish (see the module docstring): 0 is read by every Kafka release.
    record_version: int = DEFAULT_RECORD_VERSION

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 0x7FFFFFFF:
            raise InvalidArgument(f"remote log metadata topic partitions must be at least 1, got {self.partitions}")
        if self.record_version not in RECORD_VERSIONS:
            raise InvalidArgument(
                f"remote log metadata record version must be one of {RECORD_VERSIONS}, got {self.record_version}"
            )

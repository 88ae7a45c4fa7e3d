"""The ``__remote_log_metadata`` topic's name, configs and defaults, and the settings our cluster lays it out by.

Kafka's defaults (``TopicBasedRemoteLogMetadataManagerConfig``): 50 partitions, retention.ms -1, replication 3; its
``TopicBasedRemoteLogMetadataManager.createRemoteLogMetadataTopicRequest`` creates the topic with ``retention.ms``,
``cleanup.policy=delete`` and ``remote.storage.enable=false`` (the metadata of the remote tier is never tiered).

Our layout (:data:`TOPIC_CONFIGS`, :data:`REPLICATION_FACTOR`):

* Kafka's three configs, as Kafka sets them;
* ``segment.bytes`` and ``segment.ms`` at Kafka's defaults (1 GiB, 7 days), set on the topic: a Kafka broker's
  defaults give the topic those, while our brokers' own defaults are small (demo-sized segments that tier within
  seconds), which would cut a topic kept for ever into thousands of tiny segment files;
* one replica per partition: our brokers do not replicate local data (ARCHITECTURE §2). Nothing is lost with it: every
  partition's log is a function of the store's RLMM alone (``orchestrator/broker/rlmm_publisher.py``), so a leader
  rebuilds whatever its log lacks from the store.

Which record version we write (:attr:`RemoteLogMetadataTopicSettings.record_version`):

* **0, the default.** Every Kafka release with tiered storage (3.6 on, when CustomMetadata joined version 0)
  reads it. Kafka's generated reader refuses any version above the highest it knows (``UnsupportedVersionException:
  Can't read version 1 of ...``), and Kafka's releases define version 0 only (4.0 added ``TxnIndexEmpty`` as tag 0
  of version 0, which older readers skip as an unknown tag; version 1 is newer than every release we could check,
  up to 4.3), so a version-1 record would stop a stock 3.9 or 4.x reader at its offset.
* **1**, for readers that know it: it adds BrokerLeaderEpoch and (updates, partition deletes) EndOffset. Worth it
  once the writer knows those values; left at their defaults they are not written at all (tagged fields).

Our ``TieredEpoch`` (tag 10950) rides along at both versions; Kafka readers skip it.

The settings group itself lives with the other process settings (:mod:`orchestrator.settings`, table
``[remote_log_metadata]``): it is re-exported here, where the layout it chooses is described.
"""

from __future__ import annotations

from orchestrator.metadata.topic_configs import REMOTE_STORAGE_ENABLE, RETENTION_MS, SEGMENT_BYTES, SEGMENT_MS
from orchestrator.settings import RLMM_RECORD_VERSIONS, RemoteLogMetadataTopicSettings

__all__ = [
    "DEFAULT_PARTITIONS",
    "DEFAULT_RECORD_VERSION",
    "DEFAULT_RETENTION_MS",
    "RECORD_VERSIONS",
    "REPLICATION_FACTOR",
    "TOPIC_CONFIGS",
    "TOPIC_NAME",
    "RemoteLogMetadataTopicSettings",
]

TOPIC_NAME = "__remote_log_metadata"
DEFAULT_PARTITIONS = RemoteLogMetadataTopicSettings().partitions
DEFAULT_RETENTION_MS = -1
DEFAULT_RECORD_VERSION = RemoteLogMetadataTopicSettings().record_version
RECORD_VERSIONS = RLMM_RECORD_VERSIONS
REPLICATION_FACTOR = 1  # local data is not replicated (see the module docstring)

TOPIC_CONFIGS: dict[str, str] = {
    RETENTION_MS: str(DEFAULT_RETENTION_MS),
    "cleanup.policy": "delete",
    REMOTE_STORAGE_ENABLE: "false",
    SEGMENT_BYTES: str(1 << 30),
    SEGMENT_MS: str(7 * 24 * 3600 * 1000),
}
"""The configs the controller creates ``__remote_log_metadata`` with (see the module docstring)."""

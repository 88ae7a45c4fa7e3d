"""Kafka's ``__remote_log_metadata`` topic, as pure functions: its layout, value framing, partitioner, formatter.

Apache Kafka's ``TopicBasedRemoteLogMetadataManager`` keeps the remote log metadata in an internal topic; these
modules write and read that topic's records exactly as Kafka does, so any Kafka consumer (and Kafka's own console
formatter) can read what we publish, and we can read what Kafka brokers wrote:

* :mod:`.layout` — the topic's name and defaults, and the settings that choose its partition count and the record
  version we write;
* :mod:`.serde` — a record value framed as ``RemoteLogMetadataSerde`` frames it (null key);
* :mod:`.partitioner` — the partition ``RemoteLogMetadataTopicPartitioner`` picks for a topic-partition;
* :mod:`.formatter` — a decoded record printed as Kafka's ``RemoteLogMetadataFormatter`` prints it, and as JSON.

Nothing here does I/O: the publisher and ``tieredctl rlmm dump`` call them.
"""

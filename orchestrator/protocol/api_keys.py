"""Every api key this project speaks, in one place: Kafka's numbers for Kafka's APIs, ours outside Kafka's range.

A member's name is its schema's name in UPPER_SNAKE (``INCREMENTAL_ALTER_CONFIGS`` is
``IncrementalAlterConfigsRequest``/``Response``); a unit test checks every member against the schema files.
``DisableRemoteTopic`` is 10950 (KIP-950 left it open), and the keys after it are ours too
(``DeleteRemotePartitions``, 10954: a deleted topic's remote data, KIP-405 partition deletion;
``AppendRemoteLogMetadata``, 10955: a broker's RLMM records, appended by the active controller;
``ReportCopyStates``, 10957: a broker's copies to remote storage in flight or failing, for ``tiering status``).
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    SASL_HANDSHAKE = 17
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    ENVELOPE = 58
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DISABLE_REMOTE_TOPIC = 10950
    DESCRIBE_TIERED_STATE = 10951
    DELETE_REMOTE_PARTITIONS = 10954
    APPEND_REMOTE_LOG_METADATA = 10955
    REPORT_COPY_STATES = 10957

    @property
    def schema_stem(self) -> str:
        """``INCREMENTAL_ALTER_CONFIGS`` -> ``IncrementalAlterConfigs`` (the schemas add Request / Response)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

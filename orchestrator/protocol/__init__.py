"""The Kafka wire protocol: JSON message schemas in Kafka's format, a schema-driven codec, and framing.

RPC bodies, request/response headers, cluster metadata records and remote log metadata records all go through
the same codec, driven by the schema files in ``schemas/``. Api keys of our own (outside Kafka's range):
``DisableRemoteTopic`` = 10950, ``DescribeTieredState`` = 10951; metadata record ``TieredStateRecord`` = 10950.
"""

DISABLE_REMOTE_TOPIC_API_KEY = 10950
DESCRIBE_TIERED_STATE_API_KEY = 10951

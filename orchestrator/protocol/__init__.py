"""The Kafka wire protocol: JSON message schemas in Kafka's format, a schema-driven codec, and framing.

RPC bodies, request/response headers, cluster metadata records and remote log metadata records all go through
the same codec, driven by the schema files in ``schemas/``. :mod:`.api_keys` names every api key (ours sit
outside Kafka's range, from 10950); the metadata record ``TieredStateRecord`` is type 10950. :mod:`.messages`
types every body (generated from the schemas by :mod:`.typegen`). :mod:`.record_batch` reads and writes the
records inside Produce and Fetch (Kafka's record batch v2), which no schema describes.
"""

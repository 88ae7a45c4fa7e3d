"""Kafka-protocol networking: an asyncio server, a multiplexing client connection and pool, and an admin client.

* :mod:`orchestrator.net.server` — :class:`KafkaServer` serves framed Kafka requests to async handlers, answers
  ApiVersions itself, and closes only the offending connection on malformed input or a failing handler.
* :mod:`orchestrator.net.connection` — :class:`KafkaConnection` keeps many requests in flight on one connection,
  matched by correlation id; :class:`ConnectionPool` shares one connection per address.
* :mod:`orchestrator.net.admin` — :class:`AdminClient` bootstraps like a Kafka admin client, learns the nodes and
  the controller from Metadata, and follows a controller failover (NOT_CONTROLLER) by itself.

Layering: this package depends on :mod:`orchestrator.protocol` and :mod:`orchestrator.errors` only; the
controller and the broker agents build on it, never the other way round.
"""

from orchestrator.net.admin import AdminClient, parse_bootstrap
from orchestrator.net.connection import ConnectionPool, KafkaConnection
from orchestrator.net.server import Handler, KafkaServer

__all__ = ["AdminClient", "ConnectionPool", "Handler", "KafkaConnection", "KafkaServer", "parse_bootstrap"]

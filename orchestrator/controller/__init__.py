"""The controller: topic configs, the tiering state machine, the disablement queue and the synchronous core.

``configs`` (the topic config catalogue), ``tiering`` (DESIGN §4's per-topic state machine) and ``queue`` (the
disablement queue) are pure; ``core`` applies them to the metadata store. The asyncio driver that serves the
Kafka protocol and sends DisableRemoteTopic lives outside this package and calls ``core``.
"""

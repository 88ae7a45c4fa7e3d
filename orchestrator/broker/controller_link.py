"""A broker incarnation's link to the active controller: its registration and its heartbeats.

Each process start is a new incarnation (a fresh incarnation id) and registers with the address the others reach
it at (``host`` and ``advertised_port``, else the port it bound); the controller answers with the broker epoch that
fences requests meant for another incarnation. Heartbeats then carry the image's offset every interval, each followed
by a ReportCopyStates (our key 10957) while any upload of this broker is in flight or its copy pass failed (and once
more when none is left, which clears the controller's view): what ``tiering status`` shows of them; a heartbeat
answered STALE_BROKER_EPOCH (the controller fenced this incarnation) makes the broker register again.

A leader's ISR changes go to the active controller with :meth:`ControllerLink.alter_partition` (AlterPartition,
Kafka's key 56, sent at version 2: plain broker ids, because this broker's Fetch carries no follower broker epochs
for version 3's KIP-903 check). It answers the partition's state after the change (:class:`AlterPartitionResult`) or
raises the refusal's :class:`KafkaError`; the controller answers a repeat of an applied change with the same state and
writes nothing, so it is sent again when unanswered like the others.

These requests are idempotent, so one the controller does not answer within ``request_timeout_ms`` is sent again
(the AdminClient forgets a silent controller and asks the other controllers of the bootstrap list who is active): a
frozen active controller costs this broker about one request timeout, after which it beats the controller that
took the lease. That one gives every broker a full session from its start, so when the request timeout is shorter
than lease TTL + session timeout the broker is not even fenced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from orchestrator.broker.remote_log_manager import PartitionCopyState
from orchestrator.errors import StaleBrokerEpoch, TieredError, for_code
from orchestrator.ids import Uuid
from orchestrator.net.admin import AdminClient
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import BrokerSettings

log = structlog.get_logger(__name__)

ALTER_PARTITION_VERSIONS = (2, 2)  # topic ids, ISR members as plain broker ids


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """A partition's state as the controller answered an AlterPartition that it accepted: what the leader goes on
    from (the next change is based on ``partition_epoch``)."""

    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int


class ControllerLink:
    def __init__(
        self,
        settings: BrokerSettings,
        *,
        advertised_port: Callable[[], int],
        image_offset: Callable[[], int],
        copy_states: Callable[[], list[m.PartitionCopyState]] = list,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.incarnation_id = Uuid.random()
        self.log_dirs: tuple[Uuid, ...] = ()  # the data directory's id (directory_id.py), set before registering
        self.broker_epoch = -1  # none until registered
        self._advertised_port = advertised_port  # known once the server has bound its port
        self._image_offset = image_offset
        self._copy_states = copy_states
        self._sleep = sleep
        self._reported_copies = False  # whether the last report sent named any partition (one more clears it)

    async def register(self, controllers: AdminClient) -> None:
        listener: m.Listener = {
            "name": "PLAINTEXT",
            "host": self.settings.host,
            "port": self._advertised_port(),
            "security_protocol": 1 if self.settings.tls.enabled else 0,
        }
        body: m.BrokerRegistrationRequest = {
            "broker_id": self.settings.broker_id,
            "cluster_id": self.settings.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [listener],
            "features": [],
            "rack": self.settings.rack,
            "log_dirs": list(self.log_dirs),
        }
        # Idempotent: the controller gives a retried registration of the same incarnation the same epoch, so one that
        # timed out (a frozen controller) is sent again to whichever controller Metadata then names.
        resp = await controllers.call(
            ApiKey.BROKER_REGISTRATION, (0, 4), body, m.BrokerRegistrationResponse, idempotent=True
        )
        if resp["error_code"] != 0:
            raise StaleBrokerEpoch(f"registration refused with error {resp['error_code']}")
        self.broker_epoch = resp["broker_epoch"]
        log.info("broker.registered", broker_epoch=self.broker_epoch)

    async def heartbeat_loop(self, controllers: AdminClient) -> None:
        """Heart-beat the active controller every interval, registering first when this incarnation has no epoch."""
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            try:
                if self.broker_epoch < 0:
                    await self.register(controllers)
                heartbeat: m.BrokerHeartbeatRequest = {
                    "broker_id": self.settings.broker_id,
                    "broker_epoch": self.broker_epoch,
                    "current_metadata_offset": self._image_offset(),
                    "want_fence": False,
                    "want_shut_down": False,
                }
                resp = await controllers.call(
                    ApiKey.BROKER_HEARTBEAT, (0, 1), heartbeat, m.BrokerHeartbeatResponse, idempotent=True
                )
                if resp["error_code"] == StaleBrokerEpoch.code:
                    log.warning("broker.heartbeat_stale_epoch", broker_epoch=self.broker_epoch)
                    self.broker_epoch = -1
                    continue
                await self._report_copy_states(controllers)
            except TieredError as exc:
                log.warning("broker.heartbeat_failed", error=exc.name, detail=exc.message)
            except OSError as exc:
                log.warning("broker.heartbeat_failed", error=type(exc).__name__, detail=str(exc))
            await self._sleep(interval)

    async def alter_partition(
        self,
        controllers: AdminClient,
        *,
        topic_id: Uuid,
        partition: int,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: Sequence[int],
    ) -> AlterPartitionResult:
        """Ask the active controller to make ``new_isr`` the ISR of a partition this broker leads in ``leader_epoch``,
        based on ``partition_epoch``. Returns the partition's state after it; raises the :class:`KafkaError` of a
        refusal (STALE_BROKER_EPOCH for the whole request; FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER,
        INVALID_UPDATE_VERSION, INVALID_REQUEST, INELIGIBLE_REPLICA, UNKNOWN_TOPIC_ID... for the partition), and
        what :meth:`AdminClient.call` raises when no controller answers."""
        entry: m.AlterPartitionRequestPartitionData = {
            "partition_index": partition,
            "leader_epoch": leader_epoch,
            "new_isr": list(new_isr),
            "partition_epoch": partition_epoch,
        }
        body: m.AlterPartitionRequest = {
            "broker_id": self.settings.broker_id,
            "broker_epoch": self.broker_epoch,
            "topics": [{"topic_id": topic_id, "partitions": [entry]}],
        }
        resp = await controllers.call(
            ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSIONS, body, m.AlterPartitionResponse, idempotent=True
        )
        where = f"partition {partition} of topic id {topic_id}"
        if resp["error_code"] != 0:
            raise for_code(resp["error_code"])(f"AlterPartition of {where} refused")
        answers = [p for t in resp["topics"] if t["topic_id"] == topic_id for p in t["partitions"]]
        answer = next((p for p in answers if p["partition_index"] == partition), None)
        if answer is None:
            raise for_code(-1)(f"the controller's AlterPartition answer does not name {where}")
        if answer["error_code"] != 0:
            raise for_code(answer["error_code"])(f"AlterPartition of {where} to ISR {list(new_isr)} refused")
        return AlterPartitionResult(
            leader_id=answer["leader_id"],
            leader_epoch=answer["leader_epoch"],
            isr=tuple(answer["isr"]),
            partition_epoch=answer["partition_epoch"],
        )

    async def _report_copy_states(self, controllers: AdminClient) -> None:
        """Send this broker's copies in flight or failing, when there are any or the last report had some."""
        states = self._copy_states()
        if not states and not self._reported_copies:
            return
        body: m.ReportCopyStatesRequest = {
            "broker_id": self.settings.broker_id,
            "broker_epoch": self.broker_epoch,
            "copy_states": states,
        }
        resp = await controllers.call(
            ApiKey.REPORT_COPY_STATES, (0, 0), body, m.ReportCopyStatesResponse, idempotent=True
        )
        if resp["error_code"] == 0:
            self._reported_copies = bool(states)
        else:
            log.warning("broker.copy_report_refused", error_code=resp["error_code"], detail=resp["error_message"])


def stale_broker_epoch(requested: int, current: int) -> StaleBrokerEpoch | None:
    """A controller's request meant for another incarnation of this broker (-1: for whichever one serves it)."""
    if requested >= 0 and requested != current:
        return StaleBrokerEpoch(f"request for broker epoch {requested}; this incarnation has {current}")
    return None


def copy_state_messages(states: Mapping[tuple[Uuid, int], PartitionCopyState]) -> list[m.PartitionCopyState]:
    """The copy states as ReportCopyStates carries them, by partition."""
    return [
        m.PartitionCopyState(
            topic_id=topic_id,
            partition=partition,
            in_flight_since_ms=s.in_flight_since_ms,
            in_flight=s.in_flight,
            stalled=s.stalled,
            last_error=s.last_error,
            last_error_ms=s.last_error_ms,
            failed_passes=s.failed_passes,
        )
        for (topic_id, partition), s in sorted(states.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
    ]

"""Broker membership: registration, heartbeats, unregistration, and fencing of brokers whose session expired.

Broker liveness (the last heartbeat of each broker) is held in memory only: a new controller gives every registered
broker a full session from its start. Partition records for brokers leaving and rejoining come from
``partitions.py``; every write goes through :meth:`ControllerState.append`.

Design choices (KRaft's rules):
* broker epoch = the offset of the broker's RegisterBrokerRecord; a registration is fenced until a heartbeat reports
  a metadata offset at or past it. A registration with the same incarnation id is a retry and gets the same epoch;
  another incarnation is refused with DUPLICATE_BROKER_REGISTRATION while the old one's session lives, and then
  replaces it (the old incarnation leaves its partitions' ISRs and leaderships in the same append). A registration
  whose log directory ids share none with the previous one's (a disk replaced by an empty one, KIP-858) leaves as a
  broker that holds nothing: even a last ISR member, when an eligible leader replica can take over, and the ELR
  (``partitions.leave_records(lost=True)``; logged ``broker.disk_replaced``).
* A broker is fenced (and leaves every ISR and leadership) when its session expires, when it asks (WantFence,
  WantShutDown), and when it is unregistered; it is unfenced (and rejoins) by a heartbeat that is caught up.
* With ``auto_leader_rebalance``, every tick gives each live in-sync preferred replica its leadership back (checking
  only the topics whose partitions changed since the last tick, unless a broker's registration changed).
* A registered broker's copies in flight or failing (ReportCopyStates, sent beside its heartbeats) are kept in memory
  for ``tiering status`` (``copy_reports.py``).
* Unregistering (decommissioning) a broker removes it from every pending set of the disablement queue, so topics
  that only waited for it complete at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from orchestrator.admin_api.responses import at_newest
from orchestrator.errors import (
    BrokerIdNotRegistered,
    DuplicateBrokerRegistration,
    InconsistentClusterId,
    InvalidRequest,
    KafkaError,
    StaleBrokerEpoch,
    StaleControllerEpoch,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.records import make_record
from orchestrator.protocol import messages as m
from orchestrator.settings import BrokerMembership

from .copy_reports import CopyReports
from .disablement import DisablementDriver
from .partitions import LeaderBalance, leave_records, preferred_leader_changes, rejoin_records
from .state import ControllerState

log = structlog.get_logger(__name__)


def replaced_disk(before: Sequence[Uuid], now: Sequence[Uuid]) -> bool:
    """Whether a broker that registered with log directories ``before`` now registers with none of them (KIP-858's
    directory ids): its disk was replaced by an empty one. A registration without ids (an older broker) says
    nothing either way."""
    return bool(before) and bool(now) and not set(before) & set(now)


class BrokerLifecycle:
    def __init__(
        self,
        state: ControllerState,
        driver: DisablementDriver,
        settings: BrokerMembership,
        *,
        copy_reports: CopyReports | None = None,
    ) -> None:
        self._state = state
        self._copy_reports = copy_reports if copy_reports is not None else CopyReports()
        self._driver = driver
        self._settings = settings
        now = state.now_ms()
        self._last_heartbeat: dict[int, int] = dict.fromkeys(state.image.brokers, now)
        self._leader_balance = LeaderBalance()  # what the last tick's check of preferred leaders found

    def broker_registration(self, body: m.BrokerRegistrationRequest) -> m.BrokerRegistrationResponse:
        req = at_newest("BrokerRegistrationRequest", body)
        state = self._state
        image = state.refresh()
        broker_id, incarnation = req["broker_id"], req["incarnation_id"]
        now = state.now_ms()
        try:
            if req["cluster_id"] != self._settings.cluster_id:
                ours = self._settings.cluster_id
                raise InconsistentClusterId(
                    f"broker {broker_id} belongs to cluster '{req['cluster_id']}', this is '{ours}'"
                )
            if broker_id < 0:
                raise InvalidRequest(f"broker id {broker_id} is negative")
            existing = image.brokers.get(broker_id)
            if existing is not None and existing.incarnation_id == incarnation:
                self._last_heartbeat[broker_id] = now  # a retried registration: same epoch
                retried = m.BrokerRegistrationResponse(broker_epoch=existing.broker_epoch)
                return at_newest("BrokerRegistrationResponse", retried)
            if existing is not None and self._session_alive(broker_id, now):
                raise DuplicateBrokerRegistration(
                    f"broker {broker_id} is registered by another incarnation ({existing.incarnation_id}) whose "
                    f"session has not expired; retry after {self._settings.session_timeout_ms} ms without heartbeats"
                )
            broker_epoch = state.next_offset()
            log_dirs = list(req.get("log_dirs") or [])
            lost = existing is not None and replaced_disk(existing.log_dirs, log_dirs)
            if lost and existing is not None:
                previous = [str(d) for d in existing.log_dirs]
                log.warning(
                    "broker.disk_replaced",
                    broker_id=broker_id,
                    log_dirs=[str(d) for d in log_dirs],
                    previous_log_dirs=previous,
                )
            records = [
                make_record(
                    "RegisterBrokerRecord",
                    broker_id=broker_id,
                    incarnation_id=incarnation,
                    broker_epoch=broker_epoch,
                    end_points=[dict(listener) for listener in req["listeners"]],
                    features=[dict(f) for f in req["features"]],
                    rack=req["rack"],
                    fenced=True,
                    log_dirs=log_dirs,
                ),
                *(leave_records(image, broker_id, lost=lost) if existing is not None else []),
            ]
            offset = state.append(records)
            if offset - len(records) + 1 != broker_epoch:  # pragma: no cover - the lease makes this core the writer
                log.error("broker.epoch_mismatch", broker_id=broker_id, expected=broker_epoch, offset=offset)
            self._last_heartbeat[broker_id] = now
            log.info(
                "broker.registered",
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                incarnation_id=str(incarnation),
                previous_epoch=None if existing is None else existing.broker_epoch,
            )
            registered = m.BrokerRegistrationResponse(broker_epoch=broker_epoch)
            return at_newest("BrokerRegistrationResponse", registered)
        except StaleControllerEpoch:
            raise
        except KafkaError as exc:
            log.warning("broker.registration_refused", broker_id=broker_id, error=exc.name, detail=exc.message)
            refused = m.BrokerRegistrationResponse(error_code=exc.code, broker_epoch=-1)
            return at_newest("BrokerRegistrationResponse", refused)

    def broker_heartbeat(self, body: m.BrokerHeartbeatRequest) -> m.BrokerHeartbeatResponse:
        req = at_newest("BrokerHeartbeatRequest", body)
        state = self._state
        image = state.refresh()
        broker_id, broker_epoch = req["broker_id"], req["broker_epoch"]
        registration = image.brokers.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            log.info("broker.heartbeat_stale_epoch", broker_id=broker_id, broker_epoch=broker_epoch)
            stale = m.BrokerHeartbeatResponse(error_code=StaleBrokerEpoch.code, is_caught_up=False, is_fenced=True)
            return at_newest("BrokerHeartbeatResponse", stale)
        self._last_heartbeat[broker_id] = state.now_ms()
        caught_up = req["current_metadata_offset"] >= registration.broker_epoch
        fenced = registration.fenced
        leaving = bool(req["want_fence"] or req["want_shut_down"])
        if leaving and not fenced:
            fence = make_record("FenceBrokerRecord", id=broker_id, epoch=broker_epoch)
            state.append([fence, *leave_records(image, broker_id)])
            fenced = True
            log.info("broker.fenced", broker_id=broker_id, broker_epoch=broker_epoch, reason="requested")
        elif not leaving and fenced and caught_up:
            unfence = make_record("UnfenceBrokerRecord", id=broker_id, epoch=broker_epoch)
            state.append([unfence, *rejoin_records(image, broker_id, rebalance=self._settings.auto_leader_rebalance)])
            fenced = False
            log.info("broker.unfenced", broker_id=broker_id, broker_epoch=broker_epoch)
        answer = m.BrokerHeartbeatResponse(
            is_caught_up=caught_up, is_fenced=fenced, should_shut_down=bool(req["want_shut_down"])
        )
        return at_newest("BrokerHeartbeatResponse", answer)

    def report_copy_states(self, body: m.ReportCopyStatesRequest) -> m.ReportCopyStatesResponse:
        """A broker's copies in flight or failing (``copy_reports.py``); refused STALE_BROKER_EPOCH from an
        incarnation that is not the registered one."""
        req = at_newest("ReportCopyStatesRequest", body)
        broker_id, broker_epoch = req["broker_id"], req["broker_epoch"]
        registration = self._state.image.brokers.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            err = StaleBrokerEpoch(f"broker {broker_id} at epoch {broker_epoch} is not the registered incarnation")
            refused = m.ReportCopyStatesResponse(error_code=err.code, error_message=err.message)
            return at_newest("ReportCopyStatesResponse", refused)
        self._copy_reports.update(broker_id, req["copy_states"])
        return at_newest("ReportCopyStatesResponse", m.ReportCopyStatesResponse())

    def unregister_broker(self, body: m.UnregisterBrokerRequest) -> m.UnregisterBrokerResponse:
        req = at_newest("UnregisterBrokerRequest", body)
        state = self._state
        image = state.refresh()
        broker_id = req["broker_id"]
        registration = image.brokers.get(broker_id)
        if registration is None:
            err = BrokerIdNotRegistered(f"broker {broker_id} is not registered")
            unknown = m.UnregisterBrokerResponse(error_code=err.code, error_message=err.message)
            return at_newest("UnregisterBrokerResponse", unknown)
        owed = sorted(str(t) for t, entry in state.queue.topics.items() if broker_id in entry.pending)
        record = make_record("UnregisterBrokerRecord", broker_id=broker_id, broker_epoch=registration.broker_epoch)
        state.append([record, *leave_records(image, broker_id)])
        self._last_heartbeat.pop(broker_id, None)
        self._copy_reports.forget(broker_id)
        log.info("broker.unregistered", broker_id=broker_id, broker_epoch=registration.broker_epoch, released=owed)
        self._driver.complete_finished()
        return at_newest("UnregisterBrokerResponse", m.UnregisterBrokerResponse(error_message=None))

    def fence_expired(self, now: int) -> None:
        """Fence every unfenced broker that sent no heartbeat for a session timeout (it leaves ISRs and leaderships).

        A broker this controller has not heard from yet gets a full session from ``now``.
        """
        state = self._state
        for broker_id in sorted(state.image.brokers):
            registration = state.image.brokers.get(broker_id)
            if registration is None or registration.fenced:
                continue
            last = self._last_heartbeat.setdefault(broker_id, now)
            if now - last < self._settings.session_timeout_ms:
                continue
            fence = make_record("FenceBrokerRecord", id=broker_id, epoch=registration.broker_epoch)
            state.append([fence, *leave_records(state.image, broker_id)])
            log.warning("broker.fenced", broker_id=broker_id, reason="session timeout", silent_ms=now - last)

    def balance_leaders(self) -> None:
        """With ``auto_leader_rebalance``, give every live in-sync preferred replica its partition's leadership
        back (``partitions.py``), in one append."""
        if not self._settings.auto_leader_rebalance:
            return
        records, checked = preferred_leader_changes(self._state.image, self._leader_balance)
        if records:
            self._state.append(records)
            log.info("controller.preferred_leaders_elected", partitions=len(records))
        self._leader_balance = checked

    def _session_alive(self, broker_id: int, now: int) -> bool:
        last = self._last_heartbeat.get(broker_id)
        return last is not None and now - last < self._settings.session_timeout_ms

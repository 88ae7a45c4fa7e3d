"""The controller's logic, synchronous and free of networking: typed request bodies in, typed response bodies out.

:class:`ControllerCore` is what the active controller runs. The process (``service.py`` and its rooms) decodes Kafka
requests, calls the method for the api (``admin_dispatch.py``), encodes the returned body; its sender
(``sender.py``) calls :meth:`ControllerCore.tick` on a timer, sends the DisableRemoteTopic and DeleteRemotePartitions
requests :meth:`ControllerCore.due_disable_requests` and :meth:`ControllerCore.due_remote_delete_requests` return,
and feeds every outcome (reply, error, or timeout) back, those of one exchange in one call
(:meth:`ControllerCore.on_disable_responses`). Time and randomness are injected
(``now_ms``, ``rng``), so tests drive the core with a fake clock and a seeded generator. The core is not
thread-safe: one task calls it.

This module is a facade: it builds the state and the three parts that act on it, and delegates.

* ``state.py``: the image, the disablement queue, who this controller is; the one way to write (fenced appends).
* ``admin.py``: the admin API (topics, partitions, configs, metadata).
* ``membership.py``: broker registration, heartbeats, unregistration, fencing of expired sessions.
* ``isr_requests.py``: AlterPartition, partition leaders' ISR changes (decided by the pure ``isr_changes.py``).
* ``disablement.py``: DisableRemoteTopic out and in, completing finished topics (delete: only once the RLMM, read
  through the core's own :class:`RemoteLogMetadataManager` over the store, shows the remote data gone), stalled
  reporting, progress.
* ``topic_deletion.py``: a deleted topic's remote data (KIP-405 partition deletion): marking, DeleteRemotePartitions
  out and in, rebuilt from the RLMM at every start.
* ``internal_topics.py``: the ``__remote_log_metadata`` topic, created when missing.

Below them, pure: ``partitions.py`` (partition records, placement, leadership), ``tiering.py`` (ARCHITECTURE §4's state
machine), and the retry queue (``retry_queue.py``) with its two policies, ``disablement_queue.py`` (the disablement
queue) and ``deletion_queue.py`` (the remote deletion queue). The reads
(Metadata, DescribeConfigs) and the response shaping are shared with every node (:mod:`orchestrator.admin_api`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import structlog

from orchestrator.errors import TieredError
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.store import MetadataStore
from orchestrator.metrics import ControllerMetrics
from orchestrator.protocol import messages as m
from orchestrator.settings import (
    BrokerMembership,
    DisablementSettings,
    RemoteLogMetadataTopicSettings,
    TopicDefaults,
)
from remote_storage.rlmm import RemoteLogMetadataManager

from . import deletion_queue as dlq
from . import disablement_queue as dq
from . import retry_queue as rq
from .admin import AdminApi
from .copy_reports import CopyReports
from .disablement import DisablementDriver, DisableOutcome, DisableRequestBody
from .internal_topics import RemoteLogMetadataTopicCreator
from .isr_requests import IsrRequests
from .membership import BrokerLifecycle
from .security_admin import SecurityAdmin
from .state import ControllerState
from .topic_deletion import DeleteOutcome, DeleteRemotePartitionsBody, RemoteDeletionDriver

log = structlog.get_logger(__name__)


class ControllerCore:
    def __init__(
        self,
        store: MetadataStore,
        *,
        holder: str,
        controller_epoch: int,
        now_ms: Callable[[], int],
        rng: random.Random,
        membership: BrokerMembership = BrokerMembership(),  # frozen: sharing the defaults is safe
        topic_defaults: TopicDefaults = TopicDefaults(),
        disablement: DisablementSettings = DisablementSettings(),
        metrics: ControllerMetrics | None = None,
        follower: MetadataFollower | None = None,
        remote_log_metadata: RemoteLogMetadataTopicSettings | None = None,
    ) -> None:
        """``metrics`` records each completed disablement's duration (none recorded without it). ``follower`` is
        the standby's follower of ``store``, current while it waited: the core continues from its image (a
        takeover replays the log's tail, not the whole log). ``remote_log_metadata``: the core creates the
        ``__remote_log_metadata`` topic with these settings when it is missing (``internal_topics.py``); None, the
        default for a core without brokers that publish it, creates nothing."""
        self.membership = membership
        self.topic_defaults = topic_defaults
        self.disablement = disablement
        self._state = ControllerState(
            store, holder=holder, controller_epoch=controller_epoch, now_ms=now_ms, rng=rng, follower=follower
        )
        remote_log = RemoteLogMetadataManager(store)
        self._driver = DisablementDriver(self._state, disablement, remote_log=remote_log, metrics=metrics)
        self._deletion = RemoteDeletionDriver(self._state, disablement, remote_log=remote_log)
        self._deletion.sync()  # a start or a failover: every partition MARKED or STARTED and not FINISHED
        self._copy_reports = CopyReports()
        self._brokers = BrokerLifecycle(self._state, self._driver, membership, copy_reports=self._copy_reports)
        self._security = SecurityAdmin(self._state)
        self._isr_requests = IsrRequests(self._state)
        self._internal_topic = (
            None if remote_log_metadata is None else RemoteLogMetadataTopicCreator(self._state, remote_log_metadata)
        )
        self._admin = AdminApi(
            self._state,
            self._driver,
            topic_defaults=topic_defaults,
            remote_deletion=self._deletion,
        )
        log.info(
            "controller.started",
            holder=holder,
            controller_epoch=controller_epoch,
            log_end_offset=self.image.offset + 1,
            disabling_topics=len(self.queue.topics),
            pending_acks=rq.pending_count(self.queue),
            deleting_topics=len(self._deletion.queue.topics),
        )

    # --- state, read-only ---------------------------------------------------------------------------------------

    @property
    def holder(self) -> str:
        return self._state.holder

    @property
    def controller_epoch(self) -> int:
        return self._state.controller_epoch

    @property
    def image(self) -> MetadataImage:
        return self._state.image

    def refresh(self) -> MetadataImage:
        """The image caught up with the store (what another controller appended is in it)."""
        return self._state.refresh()

    @property
    def queue(self) -> dq.DisablementQueue:
        return self._state.queue

    # --- admin API ----------------------------------------------------------------------------------------------

    def create_topics(self, body: m.CreateTopicsRequest, version: int) -> m.CreateTopicsResponse:
        return self._admin.create_topics(body, version)

    def delete_topics(self, body: m.DeleteTopicsRequest, version: int) -> m.DeleteTopicsResponse:
        return self._admin.delete_topics(body, version)

    def create_partitions(self, body: m.CreatePartitionsRequest, version: int) -> m.CreatePartitionsResponse:
        return self._admin.create_partitions(body, version)

    def incremental_alter_configs(
        self, body: m.IncrementalAlterConfigsRequest, version: int
    ) -> m.IncrementalAlterConfigsResponse:
        return self._admin.incremental_alter_configs(body, version)

    def alter_configs(self, body: m.AlterConfigsRequest, version: int) -> m.AlterConfigsResponse:
        return self._admin.alter_configs(body, version)

    def create_acls(self, body: m.CreateAclsRequest, version: int) -> m.CreateAclsResponse:
        return self._security.create_acls(body, version)

    def describe_acls(self, body: m.DescribeAclsRequest, version: int) -> m.DescribeAclsResponse:
        return self._security.describe_acls(body, version)

    def delete_acls(self, body: m.DeleteAclsRequest, version: int) -> m.DeleteAclsResponse:
        return self._security.delete_acls(body, version)

    def alter_user_scram_credentials(
        self, body: m.AlterUserScramCredentialsRequest, version: int
    ) -> m.AlterUserScramCredentialsResponse:
        return self._security.alter_user_scram_credentials(body, version)

    def describe_user_scram_credentials(
        self, body: m.DescribeUserScramCredentialsRequest, version: int
    ) -> m.DescribeUserScramCredentialsResponse:
        return self._security.describe_user_scram_credentials(body, version)

    @property
    def deletion_queue(self) -> dlq.RemoteDeletionQueue:
        return self._deletion.queue

    def describe_tiered_state(self, body: m.DescribeTieredStateRequest) -> m.DescribeTieredStateResponse:
        """Every topic's tiered state (with its copies in flight or failing, as its partitions' leaders last reported
        them), and the deleted topics whose remote data is still being deleted; a name asked for that only such a
        deleted topic has is listed there, not answered as unknown."""
        names = body.get("topics")
        deleting = self._deletion.describe(None if names is None else list(names))
        response = self._driver.describe_tiered_state(body)
        being_deleted = {d["name"] for d in deleting}
        topics = response["topics"]
        image = self._state.image
        for described in topics:
            topic = image.topics.get(described["topic_id"]) if not described["error_code"] else None
            if topic is not None:  # its copies to remote storage in flight or failing, as the leaders report them
                described["copies"] = self._copy_reports.for_topic(topic, image)
        response["topics"] = [t for t in topics if not (t["error_code"] and t["name"] in being_deleted)]
        response["deleting_topics"] = deleting
        return response

    # --- broker lifecycle ---------------------------------------------------------------------------------------

    def broker_registration(self, body: m.BrokerRegistrationRequest) -> m.BrokerRegistrationResponse:
        return self._brokers.broker_registration(body)

    def broker_heartbeat(self, body: m.BrokerHeartbeatRequest) -> m.BrokerHeartbeatResponse:
        return self._brokers.broker_heartbeat(body)

    def report_copy_states(self, body: m.ReportCopyStatesRequest) -> m.ReportCopyStatesResponse:
        return self._brokers.report_copy_states(body)

    def unregister_broker(self, body: m.UnregisterBrokerRequest) -> m.UnregisterBrokerResponse:
        return self._brokers.unregister_broker(body)

    def alter_partition(self, body: m.AlterPartitionRequest, version: int) -> m.AlterPartitionResponse:
        """A partition leader's ISR changes (``isr_requests.py``, the rules in ``isr_changes.py``)."""
        return self._isr_requests.alter_partition(body, version)

    def tick(self) -> None:
        """Fence brokers whose session expired, give in-sync preferred replicas their leadership back, time out lost
        DisableRemoteTopic requests, complete topics, report the (topic, broker) pairs that newly stalled, reconcile
        the remote deletions with the RLMM and report the (deleted topic, broker) pairs that newly stalled, and create
        the ``__remote_log_metadata`` topic when it is missing and due."""
        self._state.refresh()
        now = self._state.now_ms()
        self._brokers.fence_expired(now)
        self._brokers.balance_leaders()
        self._driver.expire_requests(now)
        self._driver.complete_finished()
        self._driver.report_stalled(now)
        self._deletion.sync()
        self._deletion.report_stalled(now)
        if self._internal_topic is not None:
            self._internal_topic.tick(now)

    # --- DisableRemoteTopic -------------------------------------------------------------------------------------

    def due_disable_requests(self) -> list[tuple[int, DisableRequestBody]]:
        """The DisableRemoteTopic requests to send now, as (broker id, request body); they are now in flight.

        Each body carries ``attempt`` besides the schema's fields (:class:`DisableRequestBody`): give it back to
        :meth:`on_disable_response` as it is. Raises :class:`StaleControllerEpoch` once the lease has moved on.
        """
        return self._driver.due_requests()

    def on_disable_response(
        self,
        broker_id: int,
        request_body: DisableRequestBody,
        response_body: m.DisableRemoteTopicResponse | None,
        error: TieredError | None,
    ) -> None:
        """Feed the outcome (reply, error, or neither: a timeout) of a request :meth:`due_disable_requests` gave out;
        see :meth:`DisablementDriver.on_responses`."""
        self._driver.on_responses(broker_id, [(request_body, response_body, error)])

    def on_disable_responses(self, broker_id: int, outcomes: Sequence[DisableOutcome]) -> None:
        """Feed the outcomes of several requests to one broker at once (the topics of one batched request): DISABLED
        is appended once for every topic they complete; see :meth:`DisablementDriver.on_responses`."""
        self._driver.on_responses(broker_id, outcomes)

    # --- DeleteRemotePartitions (a deleted topic's remote data) ----------------------------------------------

    def due_remote_delete_requests(self) -> list[tuple[int, DeleteRemotePartitionsBody]]:
        """The DeleteRemotePartitions requests to send now; give each body back to :meth:`on_remote_delete_response`
        as it is. Raises :class:`StaleControllerEpoch` once the lease has moved on."""
        return self._deletion.due_requests()

    def on_remote_delete_response(
        self,
        broker_id: int,
        request_body: DeleteRemotePartitionsBody,
        response_body: m.DeleteRemotePartitionsResponse | None,
        error: TieredError | None,
    ) -> None:
        """Feed the outcome of a request :meth:`due_remote_delete_requests` gave out."""
        self._deletion.on_responses(broker_id, [(request_body, response_body, error)])

    def on_remote_delete_responses(self, broker_id: int, outcomes: Sequence[DeleteOutcome]) -> None:
        """Feed the outcomes of several requests to one broker at once."""
        self._deletion.on_responses(broker_id, outcomes)

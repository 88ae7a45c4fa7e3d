"""The run plays a deposed controller, so that invariant 6's second half is checked from outside the cluster.

ARCHITECTURE §4 invariant 6: a controller that lost the lease changes nothing, and a broker refuses its requests.
The first half (the metadata log's controller epochs never go down) the checker reads from the log. This module is
the second: each time the log shows a controller epoch higher than any before (a failover took place), the run
sends every running broker, with a controller's own credentials (on a secured cluster, its TLS certificate and SCRAM
login), the DisableRemoteTopic (version 1) the controller of the epoch before could still send:
every topic the log created and did not remove, at its current tiered epoch, with the delete policy, at that older
controller epoch. A broker must refuse the whole request with STALE_CONTROLLER_EPOCH before it changes anything (or,
when it has seen no newer epoch and cannot read the store's lease, with KAFKA_STORAGE_ERROR: it cannot tell).

Pure parts: :func:`stale_request` builds the request from the log records read so far. The edge,
:meth:`DeposedController.maybe_probe`, sends it and keeps each broker's answer (:class:`~chaos.checker.
DeposedAnswer`) for the checker. A broker that does not answer in time (paused, dead, cut off, restarting) is
recorded as unanswered and judged on nothing: what it would have said is unknown.

Invariants: one probe per new controller epoch; a probe never reaches a broker the run has paused; the request's
controller epoch is one below an epoch the log has committed, so it is stale whatever the lease says by then.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from chaos import checker as ck
from chaos.history import History
from chaos.rig import Rig
from orchestrator.errors import TieredError
from orchestrator.ids import Uuid
from orchestrator.local.state import LocalClusterState, is_ours
from orchestrator.net.client_security import ClientSecurity
from orchestrator.net.connection import KafkaConnection
from orchestrator.net.tls import node_client_security
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import load_controller_settings

ANSWER_TIMEOUT_S = 3.0
REFUSED, NO_LEASE, UNANSWERED = (
    "deposed controller refused",
    "deposed controller refused, no lease read",
    "deposed controller unanswered",
)
# The coverage table's rows: requests refused as stale, refused for want of the lease (the store unreachable, the
# broker had seen no newer epoch), not answered.
ROWS = (REFUSED, NO_LEASE, UNANSWERED)
DELETE_POLICY = 2


def highest_controller_epoch(log: Iterable[ck.LogRecord]) -> int:
    """The highest controller epoch that wrote any of ``log`` (-1: none)."""
    return max((r.controller_epoch for r in log if r.controller_epoch is not None), default=-1)


def stale_request(log: Iterable[ck.LogRecord], controller_epoch: int) -> m.DisableRemoteTopicRequest:
    """What the controller of ``controller_epoch`` could still send: every topic the log created and did not
    remove, at its latest tiered epoch, with the delete policy."""
    epochs: dict[str, tuple[Uuid, int]] = {}  # str(topic id) -> (the id, its latest tiered epoch)
    for r in log:
        if r.name not in ("TopicRecord", "TieredStateRecord", "RemoveTopicRecord"):
            continue
        topic_id = r.fields["topic_id"]
        key = str(topic_id)
        if r.name == "TopicRecord":
            epochs[key] = (topic_id, 0)
        elif r.name == "TieredStateRecord" and key in epochs:
            epochs[key] = (topic_id, int(r.fields["tiered_epoch"]))
        elif r.name == "RemoveTopicRecord":
            epochs.pop(key, None)
    topics: list[m.DisableTopic] = [
        {"topic_id": tid, "tiered_epoch": e, "policy": DELETE_POLICY, "assigned_partitions": []}
        for _, (tid, e) in sorted(epochs.items())
    ]
    return {"controller_epoch": controller_epoch, "broker_epoch": -1, "topics": topics}


def count(answers: Iterable[ck.DeposedAnswer]) -> Counter[str]:
    """The :data:`ROWS` counts of a run's answers (an answer other than a refusal as stale is the checker's)."""
    out: Counter[str] = Counter(dict.fromkeys(ROWS, 0))
    for a in answers:
        if a.error_code is None:
            out[UNANSWERED] += 1
        elif a.error_code == ck.STALE_CONTROLLER_EPOCH:
            out[REFUSED] += 1
        elif a.error_code == ck.KAFKA_STORAGE_ERROR:
            out[NO_LEASE] += 1
    return out


class DeposedController:
    def __init__(self, rig: Rig, history: History) -> None:
        self.rig = rig
        self.history = history
        self.answers: list[ck.DeposedAnswer] = []
        self._probed_for = -1  # the highest controller epoch a probe was sent after
        self._identity: ClientSecurity | None = None

    def maybe_probe(self, log: list[ck.LogRecord], paused: Iterable[tuple[str, int]]) -> None:
        """Probe every running broker when ``log`` (the records read so far) shows a controller epoch above the
        log's first one (no one was deposed before that) and above every epoch probed after so far."""
        epochs = [r.controller_epoch for r in log if r.controller_epoch is not None]
        if not epochs:
            return
        epoch = max(epochs)
        if epoch <= max(self._probed_for, epochs[0]):
            return
        self._probed_for = epoch
        request = stale_request(list(log), epoch - 1)
        skip = set(paused)
        brokers = [
            p
            for p in LocalClusterState.load(self.rig.cluster_dir).processes
            if p.role == "broker" and ("broker", p.id) not in skip and is_ours(p)
        ]
        for p in brokers:
            code, why = asyncio.run(self._ask(p.port, request))
            answer = ck.DeposedAnswer(p.id, epoch - 1, epoch, code, why)
            self.answers.append(answer)
            self.history.record(
                "deposed_probe",
                broker=p.id,
                sent_epoch=epoch - 1,
                committed_epoch=epoch,
                topics=len(request["topics"]),
                error_code=code,
                unanswered=why,
            )

    def _controller_identity(self) -> ClientSecurity:
        """How a controller of the cluster connects to brokers (its TLS settings and SCRAM login, from its settings
        file): a deposed controller keeps its credentials, so the request is judged by the fence, not refused as
        an unauthorized client's would be (CLUSTER_AUTHORIZATION_FAILED on a cluster with ACLs)."""
        if self._identity is None:
            state = LocalClusterState.load(self.rig.cluster_dir)
            controller = next(p for p in state.processes if p.role == "controller")
            settings = load_controller_settings(str(controller.config))
            self._identity = node_client_security(settings.tls, settings.security)
        return self._identity

    async def _ask(self, port: int, request: m.DisableRemoteTopicRequest) -> tuple[int | None, str | None]:
        security = self._controller_identity()
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                conn = await KafkaConnection.open(
                    "127.0.0.1", port, ssl_context=security.ssl_context(), sasl=security.sasl
                )
                try:
                    answer = await conn.request(ApiKey.DISABLE_REMOTE_TOPIC, 1, request, timeout_s=ANSWER_TIMEOUT_S)
                finally:
                    await conn.close()
        except (TieredError, OSError, TimeoutError) as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
        return int(answer["error_code"]), None

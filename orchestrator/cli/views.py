"""What a command shows, as values: each command computes a view, and each format renders it
(:mod:`.render_text`, :mod:`.render_json`; :class:`~orchestrator.cli.output.Output` picks the one ``--output``
asks for).

A view holds what the command got (the client's statuses, a local cluster's record, a scan's summary...), never
how it looks. A new kind of result is a new frozen dataclass here, listed in :data:`VIEWS`, plus one function in
each renderer (``@TEXT.register(TheView)``, ``@JSON.register(TheView)``); a view that says nothing in a format has
a function that returns nothing. ``tests/orchestrator/cli/test_views.py`` checks that both formats render every
view.

A view that says how far off a time is (a pending broker's next attempt) carries the ``now_ms`` it was computed
at, so that rendering stays a pure function of the view.

The reclaim executor and rich's renderable appear here for their types only (``TYPE_CHECKING``): every command
loads this module, and importing them would load boto3 for ``tieredctl topic list`` too, and rich for a command
that prints JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar, get_args

from orchestrator.client import FetchedRecord, RemoteDeletionStatus, ScramUser, TieringStatus, TopicChange
from orchestrator.local.state import LocalClusterState, Stopped
from orchestrator.metadata.records import MetadataRecord
from orchestrator.security.acls import AclBinding

if TYPE_CHECKING:  # boto3 and rich: for the types only
    from rich.console import RenderableType

    from policies.reclaim_executor import ReclaimResult


class PartitionRow(TypedDict):
    """One partition of ``topic describe``."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    under_replicated: bool  # fewer in-sync replicas than replicas


class BrokerRow(TypedDict):
    """One node of ``broker list``; ``controller`` marks the active controller."""

    node_id: int
    host: str
    port: int
    controller: bool


ScanTextRenderer = Callable[[Mapping[str, Any]], "RenderableType"]


@dataclass(frozen=True)
class Message:
    """A one-line result: ``data`` is the JSON document, ``text`` the line for people."""

    data: Any
    text: str


@dataclass(frozen=True)
class ClusterStarted:
    """``cluster up``: where the new local cluster answers."""

    state: LocalClusterState


@dataclass(frozen=True)
class ClusterStopped:
    """``cluster down``: the processes that were stopped, and what was kept or deleted."""

    stopped: Stopped


@dataclass(frozen=True)
class ClusterStatus:
    """``cluster status``: :func:`orchestrator.local.cluster.status`'s document."""

    status: Mapping[str, Any]


@dataclass(frozen=True)
class TopicList:
    """``topic list``: every topic with its id, partitions and tiered state; ``internal`` names the cluster's
    internal topics (Metadata's ``is_internal``), listed only when asked."""

    statuses: Sequence[TieringStatus]
    internal: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TopicDescription:
    """``topic describe``: tiered state, partitions (by index) and configs of one topic."""

    status: TieringStatus
    partitions: Sequence[PartitionRow]
    configs: Mapping[str, str | None]


@dataclass(frozen=True)
class ConsumedRecord:
    """``topic consume``: the ``index``-th record read (from 0), shown as it arrives."""

    record: FetchedRecord
    partition: int
    index: int


@dataclass(frozen=True)
class RlmmRecord:
    """``rlmm dump``: one record of a remote log metadata topic, at ``partition`` and ``offset``: ``record`` as
    decoded, or (``record`` None) ``error``, why its value of ``size`` bytes does not decode."""

    partition: int
    offset: int
    record: MetadataRecord | None
    error: str | None = None
    size: int = 0


@dataclass(frozen=True)
class RlmmDumpEnded:
    """``rlmm dump`` stopped: how many records it printed (``undecodable`` of them not decoded), and why: ``end``
    (the end of every partition, with --from-beginning), ``max-records``, ``timeout`` (no record for --timeout
    seconds) or ``interrupted`` (Ctrl-C)."""

    records: int
    undecodable: int
    reason: str


@dataclass(frozen=True)
class TopicConfigs:
    """``configs describe``: every config of a topic."""

    configs: Mapping[str, str | None]


@dataclass(frozen=True)
class BrokerList:
    """``broker list``: live brokers and the controllers."""

    rows: Sequence[BrokerRow]


@dataclass(frozen=True)
class TieringChanged:
    """A topic's tiered state after a change (``policy``: the one a disable asked for)."""

    status: TieringStatus
    policy: str | None = None


@dataclass(frozen=True)
class TieringReport:
    """``tiering status``: state, epoch, policy and pending brokers of each topic, then the deleted topics whose
    remote data is still being deleted."""

    statuses: Sequence[TieringStatus]
    deletions: Sequence[RemoteDeletionStatus]
    now_ms: int  # wall clock, as the controller's times are


@dataclass(frozen=True)
class TieringTimedOut:
    """``tiering disable|enable --wait`` ran out of time: where the topic stands (the error follows)."""

    status: TieringStatus
    now_ms: int  # wall clock, as the controller's times are


@dataclass(frozen=True)
class BulkTieringChanged:
    """``tiering disable`` of many topics: each topic's outcome (accepted, or its error) and, for those accepted,
    its tiered state now (``statuses`` by name)."""

    changes: Sequence[TopicChange]
    statuses: Mapping[str, TieringStatus]


@dataclass(frozen=True)
class ScanSummary:
    """A scan's summary and the path of its HTML report. ``render_text`` is the scan's own per-topic table
    (:func:`remote_storage.scan.report.render_text`), handed in so that the CLI's common modules do not load the
    scan."""

    summary: Mapping[str, Any]
    report: Path | None
    render_text: ScanTextRenderer


@dataclass(frozen=True)
class ScanOverThreshold:
    """``scan run`` found more anomalies than ``--max-anomalies``: why the exit status is ``exit_status``."""

    summary: Mapping[str, Any]
    threshold: int
    exit_status: int


@dataclass(frozen=True)
class ReclaimOutcome:
    """``reclaim``: what was planned, skipped and deleted (warnings and refusals are on stderr)."""

    result: ReclaimResult


@dataclass(frozen=True)
class ScramUsers:
    """``users list``: each user's SCRAM mechanisms with their iterations (a password, salt or key never)."""

    users: Sequence[ScramUser]


@dataclass(frozen=True)
class AclList:
    """``acls list``: the ACLs that matched."""

    bindings: Sequence[AclBinding]


@dataclass(frozen=True)
class AclsAdded:
    """``acls add``: the ACLs created (or already there)."""

    bindings: Sequence[AclBinding]


@dataclass(frozen=True)
class AclsRemoved:
    """``acls remove``: the ACLs deleted, none when nothing matched."""

    bindings: Sequence[AclBinding]


View = (
    Message
    | ClusterStarted
    | ClusterStopped
    | ClusterStatus
    | TopicList
    | TopicDescription
    | ConsumedRecord
    | RlmmRecord
    | RlmmDumpEnded
    | TopicConfigs
    | BrokerList
    | TieringChanged
    | TieringReport
    | TieringTimedOut
    | BulkTieringChanged
    | ScanSummary
    | ScanOverThreshold
    | ReclaimOutcome
    | ScramUsers
    | AclList
    | AclsAdded
    | AclsRemoved
)
VIEWS: tuple[type[Any], ...] = get_args(View)
"""Every kind of view, which every format renders."""

V = TypeVar("V")
R = TypeVar("R")


class Renderers(Generic[R]):
    """One format's table of view type -> the function that renders a view of that type as ``R``."""

    def __init__(self, format_name: str) -> None:
        self.format_name = format_name
        self._functions: dict[type[Any], Callable[[Any], R]] = {}

    def register(self, view_type: type[V]) -> Callable[[Callable[[V], R]], Callable[[V], R]]:
        """Decorator: the function renders views of ``view_type`` (one function per type)."""

        def add(function: Callable[[V], R]) -> Callable[[V], R]:
            if view_type in self._functions:
                raise TypeError(f"{view_type.__name__} already has a {self.format_name} rendering")
            self._functions[view_type] = function
            return function

        return add

    def render(self, view: View) -> R:
        function = self._functions.get(type(view))
        if function is None:
            raise TypeError(f"no {self.format_name} rendering of {type(view).__name__}")
        return function(view)

    @property
    def view_types(self) -> frozenset[type[Any]]:
        return frozenset(self._functions)

"""``tieredctl tiering``: disable and re-enable tiered storage per topic (KIP-950), and watch it happen.

``tiering disable`` takes one topic or many (several names, ``--all-tiered``, or ``--regex``): many go in one
IncrementalAlterConfigs (chunks of 1,000), each topic accepted or refused on its own, and ``--wait`` shows one bar
over all of them. Deleting the remote data of topics chosen by a pattern (``--policy delete`` with ``--all-tiered``
or ``--regex``) needs ``--yes``; without it nothing is changed.

With ``--wait`` a command polls DescribeTieredState behind a progress bar (stderr, text only) until the topic
reaches the state asked for; at the timeout it shows where the topic stands and fails with REQUEST_TIMED_OUT
(exit status 1): the change keeps going in the background.

On a cluster without our tiering APIs (ApiVersions), or with ``--compat kafka``, the three commands drive Kafka's
own configs instead and follow progress in the metadata topic (:mod:`.tiering_kafka`); there ``--wait`` also stops
when the remote data stops moving (``--stall-timeout``), with exit status 4.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable

import click

from orchestrator.cli import tiering_kafka
from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import DEFAULT_TIMEOUT_S, Ctx
from orchestrator.cli.progress import counted_columns, progress_bar
from orchestrator.cli.views import BulkTieringChanged, TieringChanged, TieringReport, TieringTimedOut
from orchestrator.client import RemoteDeletionStatus, TieredClient, TieringStatus
from orchestrator.errors import RequestTimedOut, for_code
from orchestrator.metadata.records import TieredState

POLL_INTERVAL_S = 0.1  # how often --wait asks for the waited-for topics' tiered state (one small request)
COMPAT_HELP = "kafka: use Kafka's own configs and its metadata topic (the default on a cluster without our APIs)"
BULK_TIMEOUT_S = 120.0  # a request's timeout in a change of many topics (one client session: all its requests)


@click.group(cls=NounGroup)
def tiering() -> None:
    """KIP-950: disable and re-enable tiered storage per topic, and watch it happen."""


def _wait_for(obj: Ctx, name: str, target: str, timeout: float) -> TieringStatus:
    """Poll DescribeTieredState with a live progress bar until NAME reaches ``target`` or the timeout."""

    async def poll(c: TieredClient) -> TieringStatus:
        deadline = time.monotonic() + timeout
        with progress_bar(obj.output, *counted_columns()) as bar:
            task = bar.add_task(f"{name}: brokers acknowledged", total=None, extra="")
            while True:
                st = (await c.tiering_status([name]))[0]
                # Out of every broker that owes an acknowledgement (an enable owes none: the bar has no total).
                total = st.required_brokers or None
                bar.update(task, completed=st.acknowledged_brokers, total=total, extra=_progress_extra(st))
                if st.state.name == target:
                    return st
                if time.monotonic() > deadline:
                    return st
                await asyncio.sleep(POLL_INTERVAL_S)

    return obj.run(poll)


def _progress_extra(st: TieringStatus) -> str:
    """The bar's tail: segments deleted and to go, and the first pending broker's last error, by name."""
    to_go = f", {st.segments_remaining} to go" if st.segments_remaining else ""
    extra = f"segments deleted {st.segments_deleted}" + to_go
    if st.owed_partitions:
        extra += f"; remote data owed by {len(st.owed_partitions)} partition(s)"
    for p in st.pending_brokers:
        if p.last_error:
            extra += f"; broker {p.broker_id} retrying: {p.last_error.split(':', 1)[0]}"
            break
    return extra


def _finish_wait(obj: Ctx, st: TieringStatus, target: str, timeout: float) -> None:
    """Show the topic in ``target``, or show where it stands and fail with REQUEST_TIMED_OUT."""
    if st.state.name == target:
        obj.output.show(TieringChanged(st))
        return
    obj.output.show(TieringTimedOut(st, now_ms=obj.output.now_ms()))
    pending = ", ".join(
        f"broker {p.broker_id} ({p.attempts} attempts): {p.last_error or 'no answer yet'}" for p in st.pending_brokers
    )
    raise RequestTimedOut(
        f"{st.topic} is still {st.state.name} after {timeout:g}s; pending {pending or 'none'}. It keeps going in the "
        "background; follow it with 'tieredctl tiering status' (a dead broker can be removed with "
        "'tieredctl broker decommission ID')"
    )


@tiering.command("disable")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--all-tiered", is_flag=True, help="every topic whose tiered storage is ENABLED")
@click.option(
    "--regex",
    metavar="PATTERN",
    help="every ENABLED topic whose whole name matches PATTERN (a Python regular expression, re.fullmatch)",
)
@click.option(
    "--policy",
    type=click.Choice(["retain", "delete"]),
    default="retain",
    show_default=True,
    help="retain: remote data stays readable until retention; delete: remove it all now",
)
@click.option(
    "--yes",
    is_flag=True,
    help="with --policy delete and --all-tiered or --regex: delete the matched topics' remote data",
)
@click.option("--wait", is_flag=True, help="show progress and return when DISABLED (or at the timeout)")
@click.option(
    "--timeout", default=300.0, show_default=True, type=click.FloatRange(0.1, None), help="seconds, with --wait"
)
@click.option("--compat", type=click.Choice(["kafka"]), default=None, help=COMPAT_HELP)
@click.option(
    "--stall-timeout",
    default=tiering_kafka.DEFAULT_STALL_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(0.1, None),
    help="with --compat kafka --wait: seconds without a segment moving before it stops (exit status 4)",
)
@click.pass_obj
def tiering_disable(
    obj: Ctx,
    names: tuple[str, ...],
    all_tiered: bool,
    regex: str | None,
    policy: str,
    yes: bool,
    wait: bool,
    timeout: float,
    compat: str | None,
    stall_timeout: float,
) -> None:
    """Disable tiered storage (ENABLED -> DISABLING, epoch+1; DISABLED once every broker acknowledged) on the topics
    NAME..., on every tiered topic (--all-tiered), or on those whose name matches --regex: one request for all of
    them, each topic accepted or refused on its own. With --compat kafka: Kafka's configs, a topic at a time
    (retain: remote.log.copy.disable=true, local.retention.ms=-2, local.retention.bytes=-2; delete:
    remote.storage.enable=false, remote.log.delete.on.disable=true)."""
    if sum((bool(names), all_tiered, regex is not None)) != 1:
        raise click.UsageError("name the topics one way: NAME..., --all-tiered, or --regex PATTERN")
    # One command, one session: its first request fixes the requests' timeout (a bulk change's is longer).
    session_timeout_s = DEFAULT_TIMEOUT_S if len(names) == 1 else BULK_TIMEOUT_S
    kafka = tiering_kafka.uses_kafka_configs(obj, compat, timeout_s=session_timeout_s)
    if len(names) == 1 and not kafka:
        _disable_one(obj, names[0], policy, wait, timeout)
        return
    chosen = list(dict.fromkeys(names)) if names else _select(obj, regex, kafka=kafka)
    if policy == "delete" and not names and not yes:
        shown = ", ".join(chosen[:10]) + (f" and {len(chosen) - 10} more" if len(chosen) > 10 else "")
        raise click.UsageError(
            f"--policy delete would delete the remote data of {len(chosen)} topic(s): {shown}. Add --yes to go ahead."
        )
    if kafka:
        options = {"timeout_s": timeout, "stall_timeout_s": stall_timeout, "session_timeout_s": session_timeout_s}
        tiering_kafka.disable(obj, chosen, policy, wait=wait, **options)
        return
    changes = obj.run(lambda c: c.disable_tiering_many(chosen, policy), timeout_s=BULK_TIMEOUT_S)
    accepted = [c.topic for c in changes if c.ok]
    statuses: dict[str, TieringStatus] = {}
    timed_out: list[TieringStatus] = []
    if accepted and wait:
        statuses = _wait_for_all(obj, accepted, timeout)
        timed_out = [st for st in statuses.values() if st.state.name != "DISABLED"]
    elif accepted:
        statuses = {st.topic: st for st in obj.run(lambda c: c.tiering_status(accepted), timeout_s=BULK_TIMEOUT_S)}
    obj.output.show(BulkTieringChanged(changes, statuses))
    failed = [c for c in changes if not c.ok]
    if failed:
        first = failed[0]
        listed = "; ".join(f"{c.topic}: {c.error}" for c in failed[:5]) + ("; ..." if len(failed) > 5 else "")
        raise for_code(first.error_code)(
            f"{len(failed)} of {len(changes)} topic(s) were not disabled ({listed}); the others were"
        )
    if timed_out:
        pending = ", ".join(st.topic for st in timed_out[:5]) + (", ..." if len(timed_out) > 5 else "")
        raise RequestTimedOut(
            f"{len(timed_out)} of {len(accepted)} topic(s) are still DISABLING after {timeout:g}s ({pending}). They "
            "keep going in the background; follow them with 'tieredctl tiering status'"
        )


def _select(obj: Ctx, regex: str | None, *, kafka: bool) -> list[str]:
    """The ENABLED topics (all of them, or those whose whole name matches ``regex``), by name; a usage error if
    none is. ``kafka``: ENABLED as Kafka's configs say (our tiered state otherwise)."""
    pattern = None
    if regex is not None:
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise click.BadParameter(f"{regex!r} is not a regular expression: {exc}", param_hint="--regex") from exc
    if kafka:
        enabled = tiering_kafka.enabled_topics(obj, timeout_s=BULK_TIMEOUT_S)
    else:
        statuses = obj.run(lambda c: c.tiering_status(), timeout_s=BULK_TIMEOUT_S)
        enabled = [st.topic for st in statuses if st.state == TieredState.ENABLED]
    chosen = sorted(n for n in enabled if pattern is None or pattern.fullmatch(n))
    if not chosen:
        what = "no topic has tiered storage ENABLED" if pattern is None else f"no ENABLED topic matches {regex!r}"
        raise click.UsageError(f"{what}: nothing to disable ('tieredctl tiering status' lists every topic's state)")
    return chosen


def _wait_for_all(obj: Ctx, names: list[str], timeout: float) -> dict[str, TieringStatus]:
    """Poll DescribeTieredState for ``names`` (one request a poll) behind one progress bar over all of them until
    every one is DISABLED or the timeout; returns their last statuses by name."""

    async def poll(c: TieredClient) -> dict[str, TieringStatus]:
        deadline = time.monotonic() + timeout
        with progress_bar(obj.output, *counted_columns()) as bar:
            task = bar.add_task("topics DISABLED", total=len(names), extra="")
            while True:
                statuses = {st.topic: st for st in await c.tiering_status(names)}
                done = sum(1 for st in statuses.values() if st.state.name == "DISABLED")
                bar.update(task, completed=done, extra=_bulk_extra(statuses.values()))
                if done == len(names) or time.monotonic() > deadline:
                    return statuses
                await asyncio.sleep(POLL_INTERVAL_S)

    return obj.run(poll, timeout_s=BULK_TIMEOUT_S)


def _bulk_extra(statuses: Iterable[TieringStatus]) -> str:
    """The bar's tail for many topics: how many are still DISABLING, brokers pending, and the first error seen."""
    disabling = [st for st in statuses if st.state.name == "DISABLING"]
    if not disabling:
        return ""
    pending = sum(len(st.pending_brokers) for st in disabling)
    extra = f"{len(disabling)} DISABLING, {pending} broker acknowledgement(s) pending"
    for st in disabling:
        for p in st.pending_brokers:
            if p.last_error:
                return f"{extra}; {st.topic} broker {p.broker_id} retrying: {p.last_error.split(':', 1)[0]}"
    return extra


def _disable_one(obj: Ctx, name: str, policy: str, wait: bool, timeout: float) -> None:
    obj.run(lambda c: c.disable_tiering(name, policy))
    if wait:
        _finish_wait(obj, _wait_for(obj, name, "DISABLED", timeout), "DISABLED", timeout)
    else:
        obj.output.show(TieringChanged(obj.run(lambda c: c.tiering_status([name]))[0], policy=policy))


@tiering.command("enable")
@click.argument("name")
@click.option("--wait", is_flag=True, help="return once the topic is ENABLED")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0.1, None))
@click.option("--compat", type=click.Choice(["kafka"]), default=None, help=COMPAT_HELP)
@click.pass_obj
def tiering_enable(obj: Ctx, name: str, wait: bool, timeout: float, compat: str | None) -> None:
    """Re-enable tiered storage on NAME (DISABLED -> ENABLED, epoch+1). With --compat kafka:
    remote.storage.enable=true, and the overrides a disable set deleted."""
    if tiering_kafka.uses_kafka_configs(obj, compat):
        tiering_kafka.enable(obj, name, wait=wait, timeout_s=timeout)
        return
    obj.run(lambda c: c.enable_tiering(name))
    if wait:
        _finish_wait(obj, _wait_for(obj, name, "ENABLED", timeout), "ENABLED", timeout)
    else:
        obj.output.show(TieringChanged(obj.run(lambda c: c.tiering_status([name]))[0]))


@tiering.command("status")
@click.argument("name", required=False)
@click.option("--compat", type=click.Choice(["kafka"]), default=None, help=COMPAT_HELP)
@click.pass_obj
def tiering_status(obj: Ctx, name: str | None, compat: str | None) -> None:
    """State, tiered epoch, policy, acknowledged brokers, and each pending broker's attempts, next attempt and last
    error (with its cause) of one or every topic; under the delete policy, each partition whose remote data is still
    owed, with who deletes it (its leader, or the live broker a leaderless partition is assigned to); and each deleted
    topic whose remote data is still being deleted (state DELETED), with what is left and which brokers delete it.
    Without NAME, the cluster's internal topics (never tiered) are left out. With --compat kafka: each topic's state
    derived from its configs and the metadata topic (no epoch, no pending brokers: Kafka has none)."""
    if tiering_kafka.uses_kafka_configs(obj, compat):
        tiering_kafka.status(obj, name)
        return
    names = None if name is None else [name]

    async def both(c: TieredClient) -> tuple[list[TieringStatus], list[RemoteDeletionStatus]]:
        statuses = await c.tiering_status(names)
        if names is None:
            internal = await c.internal_topics()
            statuses = [s for s in statuses if s.topic not in internal]
        return statuses, await c.remote_deletions(names)

    statuses, deletions = obj.run(both)
    obj.output.show(TieringReport(statuses, deletions, now_ms=obj.output.now_ms()))

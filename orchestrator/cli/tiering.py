"""``tieredctl tiering``: disable and re-enable tiered storage per topic (KIP-950), and watch it happen.

With ``--wait`` a command polls DescribeTieredState behind a progress bar (stderr, text only) until the topic
reaches the state asked for; at the timeout it shows where the topic stands and fails with REQUEST_TIMED_OUT
(exit status 1): the change keeps going in the background.
"""

from __future__ import annotations

import asyncio
import time

import click
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.progress import progress_bar
from orchestrator.client import RemoteDeletionStatus, TieredClient, TieringStatus
from orchestrator.errors import RequestTimedOut

POLL_INTERVAL_S = 0.25


@click.group(cls=NounGroup)
def tiering() -> None:
    """KIP-950: disable and re-enable tiered storage per topic, and watch it happen."""


def _wait_for(obj: Ctx, name: str, target: str, timeout: float) -> TieringStatus:
    """Poll DescribeTieredState with a live progress bar until NAME reaches ``target`` or the timeout."""

    async def poll(c: TieredClient) -> TieringStatus:
        deadline = time.monotonic() + timeout
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
        )
        with progress_bar(obj.output, *columns) as bar:
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

    return obj.run(poll, timeout_s=30)


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
        obj.output.tiering_state(st)
        return
    obj.output.tiering_timed_out(st)
    pending = ", ".join(
        f"broker {p.broker_id} ({p.attempts} attempts): {p.last_error or 'no answer yet'}" for p in st.pending_brokers
    )
    raise RequestTimedOut(
        f"{st.topic} is still {st.state.name} after {timeout:g}s; pending {pending or 'none'}. It keeps going in the "
        "background; follow it with 'tieredctl tiering status' (a dead broker can be removed with "
        "'tieredctl broker decommission ID')"
    )


@tiering.command("disable")
@click.argument("name")
@click.option(
    "--policy",
    type=click.Choice(["retain", "delete"]),
    default="retain",
    show_default=True,
    help="retain: remote data stays readable until retention; delete: remove it all now",
)
@click.option("--wait", is_flag=True, help="show progress and return when DISABLED (or at the timeout)")
@click.option(
    "--timeout", default=300.0, show_default=True, type=click.FloatRange(0.1, None), help="seconds, with --wait"
)
@click.pass_obj
def tiering_disable(obj: Ctx, name: str, policy: str, wait: bool, timeout: float) -> None:
    """Disable tiered storage on NAME (ENABLED -> DISABLING, epoch+1; DISABLED once every broker acknowledged)."""
    obj.run(lambda c: c.disable_tiering(name, policy))
    if wait:
        _finish_wait(obj, _wait_for(obj, name, "DISABLED", timeout), "DISABLED", timeout)
    else:
        obj.output.tiering_state(obj.run(lambda c: c.tiering_status([name]))[0], policy=policy)


@tiering.command("enable")
@click.argument("name")
@click.option("--wait", is_flag=True, help="return once the topic is ENABLED")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0.1, None))
@click.pass_obj
def tiering_enable(obj: Ctx, name: str, wait: bool, timeout: float) -> None:
    """Re-enable tiered storage on NAME (DISABLED -> ENABLED, epoch+1)."""
    obj.run(lambda c: c.enable_tiering(name))
    if wait:
        _finish_wait(obj, _wait_for(obj, name, "ENABLED", timeout), "ENABLED", timeout)
    else:
        obj.output.tiering_state(obj.run(lambda c: c.tiering_status([name]))[0])


@tiering.command("status")
@click.argument("name", required=False)
@click.pass_obj
def tiering_status(obj: Ctx, name: str | None) -> None:
    """State, tiered epoch, policy, acknowledged brokers, and each pending broker's attempts, next attempt and last
    error (with its cause) of one or every topic; under the delete policy, each partition whose remote data is still
    owed, with who deletes it (its leader, or the live broker a leaderless partition is assigned to); and each deleted
    topic whose remote data is still being deleted (state DELETED), with what is left and which brokers delete it."""
    names = None if name is None else [name]

    async def both(c: TieredClient) -> tuple[list[TieringStatus], list[RemoteDeletionStatus]]:
        return await c.tiering_status(names), await c.remote_deletions(names)

    statuses, deletions = obj.run(both)
    obj.output.tiering_status(statuses, deletions=deletions)

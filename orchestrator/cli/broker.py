"""``tieredctl broker``: run a broker agent (``start``), list the live brokers and controllers (``list``), and
remove a dead broker for good (``decommission``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from orchestrator.cli import options
from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx

if TYPE_CHECKING:  # 'broker start' (a broker process) loads neither the views nor the client: only the others do
    from orchestrator.cli.views import BrokerRow
    from orchestrator.client import TieredClient
    from orchestrator.protocol import messages as m


@click.group(cls=NounGroup)
def broker() -> None:
    """Broker agents."""


@broker.command("start")
@options.config_file
def broker_start(config_path: str) -> None:
    """Run a broker agent in the foreground."""
    from orchestrator.broker.agent import main as run_broker  # imported when run: every other command starts fast

    run_broker(config_path)


@broker.command("list")
@click.pass_obj
def broker_list(obj: Ctx) -> None:
    """Live (unfenced) brokers and the controllers, with the active controller marked."""
    from orchestrator.cli.views import BrokerList

    md, active = obj.run(_nodes_and_active_controller)
    rows: list[BrokerRow] = [
        {
            "node_id": b["node_id"],
            "host": b["host"],
            "port": b["port"],
            "controller": b["node_id"] == active,
        }
        for b in md["brokers"]
    ]
    obj.output.show(BrokerList(rows))


async def _nodes_and_active_controller(c: TieredClient) -> tuple[m.MetadataResponse, int | None]:
    """Metadata's nodes, and the active controller (Metadata's ``controller_id`` names a forwarding broker)."""
    md = await c.metadata([])
    return md, c.admin.controller_id


@broker.command("decommission")
@click.argument("broker_id", type=int)
@click.pass_obj
def broker_decommission(obj: Ctx, broker_id: int) -> None:
    """Remove a dead broker for good: it leaves every pending disablement (UnregisterBroker)."""
    from orchestrator.cli.views import Message

    obj.run(lambda c: c.decommission_broker(broker_id))
    obj.output.show(Message({"broker_id": broker_id, "decommissioned": True}, f"decommissioned broker {broker_id}"))

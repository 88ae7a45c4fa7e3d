"""One command, one session: every request of a command goes through one client on one event loop, opened by the
first request and closed when the command ends, however it ends; an error of a step is still exit status 1.

The client here is a real :class:`TieredClient` that is never asked to connect (the steps only look at it);
the same against a live cluster, counting connections, is in ``test_commands.py``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.output import Output
from orchestrator.cli.root import TieredGroup
from orchestrator.cli.session import CommandSession
from orchestrator.client import TieredClient
from orchestrator.errors import BrokerNotAvailable

pytestmark = pytest.mark.unit


class RecordedClient(TieredClient):
    """A client that says when it is closed."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__("127.0.0.1:9", timeout_s=timeout_s)
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1
        await super().close()


@dataclass
class Clients:
    """Every client the sessions under test made, in order."""

    made: list[RecordedClient] = field(default_factory=list)

    def connect(self, timeout_s: float) -> TieredClient:
        client = RecordedClient(timeout_s)
        self.made.append(client)
        return client


async def _where(client: TieredClient) -> tuple[TieredClient, asyncio.AbstractEventLoop]:
    return client, asyncio.get_running_loop()


def test_every_step_of_a_session_runs_on_one_client_and_one_event_loop_opened_by_the_first():
    clients, session = Clients(), CommandSession()
    assert not session.is_open and clients.made == []
    first = session.run(_where, connect=clients.connect, timeout_s=10)
    second = session.run(_where, connect=clients.connect, timeout_s=10)
    assert first == second and len(clients.made) == 1 and first[0] is clients.made[0]
    assert clients.made[0].timeout_s == 10
    session.close()
    assert clients.made[0].closed == 1 and first[1].is_closed() and not session.is_open


def test_closing_a_session_that_sent_nothing_opens_nothing_and_closing_twice_closes_once():
    clients, session = Clients(), CommandSession()
    session.close()
    assert clients.made == []
    session.run(_where, connect=clients.connect, timeout_s=5)
    session.close()
    session.close()
    assert [c.closed for c in clients.made] == [1]


def test_a_step_asking_another_timeout_than_the_session_has_is_refused():
    clients, session = Clients(), CommandSession()
    session.run(_where, connect=clients.connect, timeout_s=30)
    with pytest.raises(ValueError, match="timeout of 30s, not 120s"):
        session.run(_where, connect=clients.connect, timeout_s=120)
    session.close()


def test_a_session_that_cannot_be_opened_leaves_nothing_open():
    def no_cluster(_timeout_s: float) -> TieredClient:
        raise click.UsageError("no cluster to talk to")

    session = CommandSession()
    with pytest.raises(click.UsageError):
        session.run(_where, connect=no_cluster, timeout_s=30)
    assert not session.is_open


@dataclass(frozen=True)
class RecordingCtx(Ctx):
    """The commands' context, its sessions' clients recorded."""

    clients: Clients = field(default_factory=Clients)

    def new_client(self, timeout_s: float) -> TieredClient:
        return self.clients.connect(timeout_s)


def _cli() -> click.Group:
    """A root group (errors of ours become exit status 1) with one noun whose command runs three steps, the last
    failing when asked to."""

    @click.group(cls=NounGroup)
    def noun() -> None:
        pass

    @noun.command("steps")
    @click.option("--fail", is_flag=True)
    @click.pass_obj
    def steps(obj: Ctx, fail: bool) -> None:
        seen = {obj.run(_where), obj.run(_where)}

        async def last(client: TieredClient) -> None:
            seen.add(await _where(client))
            if fail:
                raise BrokerNotAvailable("the third step failed")

        obj.run(last)
        click.echo(f"{len(seen)} client and loop")

    root = TieredGroup(name="tieredctl", lazy_commands={})
    root.add_command(noun)
    return root


@pytest.mark.parametrize("fail", [False, True])
def test_a_command_of_several_steps_opens_one_session_and_closes_it_when_it_ends(fail):
    obj = RecordingCtx(output=Output("text"), bootstrap_server=None)
    result = CliRunner().invoke(_cli(), ["noun", "steps", *(["--fail"] if fail else [])], obj=obj)
    assert [c.closed for c in obj.clients.made] == [1]
    assert not obj.session.is_open
    if fail:
        assert result.exit_code == 1 and "BROKER_NOT_AVAILABLE" in result.output and "third step" in result.output
    else:
        assert result.exit_code == 0 and result.output == "1 client and loop\n"

"""``tieredctl users``: SCRAM users (SASL/SCRAM logins) created, listed and removed from the CLI (KIP-554).

A password is read from ``--password-file`` or asked twice with hidden input (the prompt on stderr, so that
``--output json`` keeps stdout for its one document). It goes no further than this process: the client sends a
random salt and the salted password (:func:`orchestrator.client.scram_upsertion_request`), and nothing printed,
logged or put in JSON names it.
"""

from __future__ import annotations

from typing import IO

import click

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.views import Message, ScramUsers
from orchestrator.client import SCRAM_MECHANISMS
from orchestrator.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

DEFAULT_MECHANISM = "SCRAM-SHA-512"

_mechanism_choice = click.Choice(SCRAM_MECHANISMS)  # as Kafka spells them, case included


@click.group(cls=NounGroup)
def users() -> None:
    """SCRAM users: the logins of SASL/SCRAM clients."""


def read_password_file(file: IO[str]) -> str:
    """The password in ``file``: its content without one final newline (as ``echo secret >file`` leaves it)."""
    content = file.read()
    password = content.removesuffix("\n").removesuffix("\r")
    if not password:
        raise click.BadParameter(f"{file.name} holds no password", param_hint="--password-file")
    return password


@users.command("add")
@click.argument("name")
@click.option(
    "--mechanism", default=DEFAULT_MECHANISM, show_default=True, type=_mechanism_choice, help="the SCRAM mechanism"
)
@click.option(
    "--iterations",
    default=DEFAULT_ITERATIONS,
    show_default=True,
    type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
    help="PBKDF2 iterations of the credential",
)
@click.option(
    "--password-file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="read the password from FILE ('-': stdin; one final newline is dropped); default: ask for it twice",
)
@click.pass_obj
def users_add(obj: Ctx, name: str, mechanism: str, iterations: int, password_file: IO[str] | None) -> None:
    """Create user NAME, or replace its credential for --mechanism (its other mechanism's is kept)."""
    if password_file is not None:
        password = read_password_file(password_file)
    else:
        password = click.prompt(f"Password of {name}", hide_input=True, confirmation_prompt=True, err=True)
    obj.run(lambda c: c.upsert_scram_user(name, password, mechanism=mechanism, iterations=iterations))
    data = {"user": name, "mechanism": mechanism, "iterations": iterations}
    obj.output.show(Message(data, f"user {name}: {mechanism} credential set ({iterations} iterations)"))


@users.command("list")
@click.argument("names", nargs=-1)
@click.pass_obj
def users_list(obj: Ctx, names: tuple[str, ...]) -> None:
    """Users with SCRAM credentials (NAMES only, if given), with their mechanisms and iterations."""
    found = obj.run(lambda c: c.describe_scram_users(list(names) or None))
    obj.output.show(ScramUsers(sorted(found, key=lambda u: u.name)))


@users.command("remove")
@click.argument("name")
@click.option("--mechanism", default=None, type=_mechanism_choice, help="only this credential; default: all of them")
@click.pass_obj
def users_remove(obj: Ctx, name: str, mechanism: str | None) -> None:
    """Remove user NAME's SCRAM credentials (its ACLs stay: 'tieredctl acls remove --principal User:NAME')."""
    mechanisms = None if mechanism is None else [mechanism]
    removed = obj.run(lambda c: c.delete_scram_user(name, mechanisms=mechanisms))
    data = {"user": name, "removed": removed}
    credentials = f"credential{'s' if len(removed) > 1 else ''}"
    obj.output.show(Message(data, f"user {name}: removed {', '.join(removed)} {credentials}"))

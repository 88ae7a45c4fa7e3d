"""The click classes of every noun and command: global options accepted after the command as well as before it.

``tieredctl -o json tiering status`` and ``tieredctl tiering status -o json`` mean the same, as with kubectl and the
AWS CLI. Each noun is a :class:`NounGroup` (``@click.group(cls=NounGroup)``), whose commands are :class:`LeafCommand`
without saying so; a noun that is itself a command (``reclaim``) is ``@click.command(cls=LeafCommand)``. A leaf
command appends :func:`~orchestrator.cli.options.global_options` to its own parameters (after them in ``--help``);
what they do is said there, once. ``tests/orchestrator/cli/test_global_options.py`` checks that every command of
every noun is a :class:`LeafCommand`.

A leaf command is also where one command's client session ends (:mod:`orchestrator.cli.session`): when it returns
or raises, the session its requests opened is closed, before the root group turns an error into an exit status.
"""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli.context import Ctx
from orchestrator.cli.options import global_options


class LeafCommand(click.Command):
    """A command that also takes the global options after its name and its own arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        own = {opt for param in self.params for opt in param.opts}
        extra = global_options(after_command=True)
        clashes = own & {opt for param in extra for opt in param.opts}
        if clashes:
            raise TypeError(f"command {self.name!r} declares the global option(s) {sorted(clashes)} itself")
        self.params.extend(extra)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, then close the client session its requests opened (one command, one session)."""
        try:
            return super().invoke(ctx)
        finally:
            if isinstance(ctx.obj, Ctx):
                ctx.obj.session.close()


class NounGroup(click.Group):
    """A noun (``topic``, ``tiering``...): its commands are :class:`LeafCommand` unless they say otherwise."""

    command_class = LeafCommand

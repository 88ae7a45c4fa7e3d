"""How a command's result reaches the user: one :class:`Output` in the format ``--output`` asks for, text or JSON.

A command computes a view (a value of :mod:`.views`) and hands it to :meth:`Output.show`; the format's renderer
(:mod:`.render_text` or :mod:`.render_json`) decides how it looks. Invariants, kept in both formats:

- stdout carries only the command's result: lines and tables for people, or with ``--output json`` one JSON
  document (``json.dumps(data, indent=2, default=str)``, never through rich, never wrapped to the terminal width),
  or, for a command that streams records (``rlmm dump``), one compact JSON document per line (JSON Lines);
- stderr carries everything else: progress lines and bars (text only), warnings and errors (both formats);
- text is wrapped to the terminal's width only on a terminal, never on a pipe or a file
  (:func:`~orchestrator.cli.render_text.console`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from orchestrator.clock import wall_ms

if TYPE_CHECKING:  # the renderers (and the views and client types they know) load when a result is shown
    from orchestrator.cli.views import View

OUTPUT_FORMATS = ("text", "json")
"""``--output`` choices, in the order ``--help`` lists them."""


class Output:
    """What a command shows, in one format: its result (:meth:`show`), its progress, warnings and errors."""

    def __init__(self, output_format: str = "text", *, clock_ms: Callable[[], int] = wall_ms) -> None:
        """``output_format``: one of :data:`OUTPUT_FORMATS`; ``clock_ms``: the wall clock in ms, read by
        :meth:`now_ms`."""
        if output_format not in OUTPUT_FORMATS:
            raise ValueError(f"no output format {output_format!r}: one of {', '.join(OUTPUT_FORMATS)}")
        self.format = output_format
        self._clock_ms = clock_ms

    @property
    def shows_progress(self) -> bool:
        """Progress lines and bars (stderr) are for people: shown with text output only."""
        return self.format == "text"

    def show(self, view: View) -> None:
        """The command's result (or, for a view that goes there in text, what precedes its error on stderr)."""
        from orchestrator.cli.render_json import JSON, JsonLine
        from orchestrator.cli.render_text import TEXT, print_pieces

        if self.format == "text":
            print_pieces(TEXT.render(view))
            return
        document = JSON.render(view)
        if isinstance(document, JsonLine):
            click.echo(json.dumps(document.document, separators=(",", ":"), default=str))
        elif document is not None:
            click.echo(json.dumps(document, indent=2, default=str))

    def now_ms(self) -> int:
        """The wall clock in ms, for a view that says how far off a time is (the controller's times are wall-clock
        ms)."""
        return self._clock_ms()

    def progress(self, message: str, *, level: int = 0) -> None:
        """A step of a long command, on stderr and in text only; ``level`` 1 is a step within a step (indented)."""
        if self.shows_progress:
            click.echo(f"{'  ' * level}{message}", err=True)

    def warning(self, message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    def error(self, message: str) -> None:
        click.echo(f"error: {message}", err=True)

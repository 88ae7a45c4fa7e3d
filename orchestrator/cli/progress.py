"""Progress bars: on stderr and for people only, so that stdout stays the command's result.

A bar is drawn with text output and is disabled (draws nothing) with ``--output json``.
"""

from __future__ import annotations

from rich.progress import Progress, ProgressColumn

from orchestrator.cli.output import Output
from orchestrator.cli.render_text import console


def progress_bar(output: Output, *columns: str | ProgressColumn, transient: bool = False) -> Progress:
    """A live bar on stderr with ``columns``; ``transient`` ones are erased when done."""
    return Progress(*columns, disable=not output.shows_progress, console=console(stderr=True), transient=transient)

"""Progress bars: on stderr and for people only, so that stdout stays the command's result.

A bar is drawn with text output and is disabled (draws nothing) with ``--output json``. rich is imported when a
bar is made, not when a command module is: a command that prints JSON (a pipeline's, a bench's) never loads it,
about 50 ms of every such call's start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.cli.output import Output

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn


def progress_bar(output: Output, *columns: str | ProgressColumn, transient: bool = False) -> Progress:
    """A live bar on stderr with ``columns``; ``transient`` ones are erased when done."""
    from rich.progress import Progress

    from orchestrator.cli.render_text import console

    return Progress(*columns, disable=not output.shows_progress, console=console(stderr=True), transient=transient)


def counted_columns() -> tuple[ProgressColumn, ...]:
    """A wait's bar: what is counted, the bar, done of total, the task's ``extra`` text, time elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    return (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[extra]}"),
        TimeElapsedColumn(),
    )

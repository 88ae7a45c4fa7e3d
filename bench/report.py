"""A figure beside its same-run reference, and the table that prints them."""

from __future__ import annotations

import resource
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    reference_name: str
    reference_value: float
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        return self.value / self.reference_value if self.reference_value else float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def print_figures(title: str, figures: list[Figure]) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("figure", "value", "reference (same run)", "ref value", "ratio"):
        table.add_column(col, justify="right" if col in ("value", "ref value", "ratio") else "left")
    for f in figures:
        table.add_row(
            f.name,
            f"{f.value:,.1f} {f.unit}",
            f.reference_name,
            f"{f.reference_value:,.1f} {f.unit}",
            f"{f.ratio:.2f}x" + ("" if f.higher_is_better else " (lower is better)"),
        )
    Console(width=160).print(table)

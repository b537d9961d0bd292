"""Console output of the command line: messages, paths and JSON are never hard-wrapped.

rich wraps what it prints at the console width (the terminal's, or ``$COLUMNS``, or 80 columns
when the output is not a terminal). That split long error messages and paths across lines, so
they could not be copied, grepped or matched in a log. Every console made here soft-wraps: a
terminal wraps a long line for display only, and a pipe or a log gets each message on one line.
Dynamic text (paths, error messages, user input) goes through :func:`plain`, so a ``[`` in a
path is printed, not taken for rich markup. Tables still fit the console width. JSON is printed
with ``print`` (never through rich).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

__all__ = ["console", "error", "plain", "table_console"]

TABLE_WIDTH_WHEN_PIPED = 132  # columns for tables when stdout is not a terminal


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A rich console that never hard-wraps (``soft_wrap``), with no syntax highlighting and no
    ``:emoji:`` codes (a path such as ``a:smile:b`` stays as written)."""
    return Console(stderr=stderr, soft_wrap=True, highlight=False, emoji=False, width=width)


def table_console() -> Console:
    """The stdout console for tables: the terminal's width on a terminal, else
    :data:`TABLE_WIDTH_WHEN_PIPED` columns (tables are not squeezed into 80 columns in a log)."""
    con = console()
    return con if con.is_terminal else console(width=TABLE_WIDTH_WHEN_PIPED)


def plain(value: Any) -> str:
    """``str(value)`` with rich markup escaped, for paths and messages inside a markup string."""
    return escape(str(value))


def error(con: Console, problem: Any, label: str = "error") -> None:
    """Print ``label: problem`` (e.g. an exception) on one line, the label in bold red."""
    con.print(f"[bold red]{label}:[/] {plain(problem)}")

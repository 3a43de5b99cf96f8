"""Plain text for the terminal: one-line messages and tables."""

from __future__ import annotations

from typing import Callable, Sequence

from madengine.core.values import one_line

__all__ = ["one_line", "table", "status_painter", "STATUS_COLOURS"]

#: ANSI colours of the statuses (only on a TTY, and never with NO_COLOR or --no-color)
STATUS_COLOURS = {"SUCCESS": "\x1b[32m", "FAILURE": "\x1b[1;31m", "SKIPPED": "\x1b[33m"}
_RESET = "\x1b[0m"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int = 60,
          wrap: Sequence[int] = (), paint: Callable[[int, str], str] | None = None) -> str:
    """Columns padded to their widest cell; cells longer than ``max_width`` are cut, except in the
    ``wrap`` columns, whose text continues on the next lines. ``paint(column, padded cell)`` may
    colour a cell (it must not change its visible width)."""
    def clip(value: object) -> str:
        text = "" if value is None else one_line(str(value))
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    import textwrap  # only for wrapped columns: not on the start-up path of every command

    grids: list[list[list[str]]] = []  # per row, per column, the cell's lines
    for row in rows:
        grid = []
        for i, value in enumerate(row):
            text = "" if value is None else " ".join(str(value).split())
            grid.append(textwrap.wrap(text, max_width, break_on_hyphens=False) or [""] if i in wrap else [clip(value)])
        grids.append(grid)
    widths = [len(h) for h in headers]
    for grid in grids:
        for i, lines in enumerate(grid):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for grid in grids:
        for n in range(max(len(lines) for lines in grid)):
            cells = []
            for i, (lines, width) in enumerate(zip(grid, widths)):
                cell = (lines[n] if n < len(lines) else "").ljust(width)
                cells.append(paint(i, cell) if paint and n == 0 else cell)
            out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def status_painter(column: int) -> Callable[[int, str], str]:
    """Colours the status words of ``column``."""
    def paint(index: int, cell: str) -> str:
        colour = STATUS_COLOURS.get(cell.strip()) if index == column else None
        return f"{colour}{cell}{_RESET}" if colour else cell

    return paint

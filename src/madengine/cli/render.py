"""Plain text for the terminal: one-line messages and tables."""

from __future__ import annotations

from typing import Sequence


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters escaped (``\\n``, ``\\x1b``): a message
    stays one line, and text from files or flags cannot move the cursor or recolour the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int = 60) -> str:
    def clip(value: object) -> str:
        text = "" if value is None else one_line(str(value))
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    cells = [[clip(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join([line, rule, *body])

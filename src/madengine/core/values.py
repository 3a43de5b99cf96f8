"""Numbers and short value texts from user files: one reading of "a whole number", "a timeout" and
"a port" for every file (models.json, contexts, data.json, credential.json, tools.json).

JSON lets a file say ``Infinity``, ``NaN``, ``1e999`` or an integer of thousands of digits, and
``str.isdigit()`` accepts ``'²'``; these readers turn all of them into ``None`` (the caller raises
its typed error naming the file and field), never into an exception of the standard library.
"""

from __future__ import annotations

import math
from typing import Any

#: the longest timeout accepted (seconds, about 68 years): larger values overflow the OS's timers
MAX_TIMEOUT = 2**31 - 1
_MAX_DIGITS = 18  # fits in 64 bits; far beyond any count, port or duration madengine reads


def brief(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages that must stay one short line."""
    try:
        text = repr(value)
    except Exception:  # a user object's broken __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


#: the most characters one part of a message (a file, a field, the message, the hint) keeps: a value
#: pasted by mistake (a whole file in a flag) is cut in the middle, where the least is lost
PART_LIMIT = 500


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` with newlines and other control characters escaped (``\\n``, ``\\x1b``): a message
    stays one line, and text from files or flags cannot move the cursor or recolour the terminal.
    With a ``limit``, a longer result keeps its start and its end around ``…(N characters cut)…``."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    if limit is None or len(text) <= limit:
        return text
    cut = len(text) - limit
    while True:  # the marker's own length decides how much is cut: settles in two rounds at most
        marker = f"…({cut} characters cut)…"
        keep = max(limit - len(marker), 2)
        if len(text) - keep == cut:
            break
        cut = len(text) - keep
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head):]


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is one: an int (not a bool), an integral finite float, or text of
    ASCII digits with an optional sign; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None  # is_integer() is False for NaN and infinities
    if not isinstance(value, str):
        return None
    text = value.strip()
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_DIGITS:
        return None
    return int(text)


def seconds(value: Any, *, maximum: float = MAX_TIMEOUT) -> float | None:
    """A finite number of seconds in ``0..maximum`` (int, float or ASCII numeric text); else None."""
    if isinstance(value, bool) or (isinstance(value, str) and (not value.isascii() or len(value) > 64)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and 0 <= number <= maximum else None


def timeout_seconds(value: Any) -> int | None:
    """A timeout in whole seconds (0 = never) up to :data:`MAX_TIMEOUT`, or None."""
    number = seconds(value)
    return None if number is None else int(number)


def port_number(value: Any) -> int | None:
    """A TCP port (1..65535), or None."""
    number = whole_number(value)
    return number if number is not None and 0 < number < 65536 else None

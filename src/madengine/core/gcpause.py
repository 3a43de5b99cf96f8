"""Pausing the cyclic garbage collector while many long-lived objects are made.

Loading a 10,000-model catalog makes ~100,000 containers that all live to the end of the
command; every few hundred allocations CPython would scan them again for cycles, a third of the
load's time. None of them forms a cycle, so nothing is lost by not scanning them.

When the command owns its process (the ``madengine`` program, not a library call or an
in-process test), what a paused block made is also frozen, so that later collections skip it
for good; refcounting still frees it. A library caller's process is left as it was: freezing
there would also keep whatever garbage cycles it had at that moment.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

_freeze = False


def own_the_process() -> None:
    """Declare that this process is one madengine command (called by the program's entry)."""
    global _freeze
    _freeze = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, restoring its previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()


def settle() -> None:
    """What lives now lives long (a server's data, made once per data version): later collections
    skip it. Only in a process a command owns."""
    if _freeze:
        gc.freeze()

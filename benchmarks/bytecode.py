"""Byte-compile the installed madengine package before a benchmark times its start-up.

A wheel install writes every module's ``.pyc`` at install time. An editable install leaves it to
the first import, which never happens when ``PYTHONDONTWRITEBYTECODE`` is set (as on the
development machine): every command would then compile ~60 modules (~0.1 s) that a user's
install has compiled already.
"""

from __future__ import annotations

import compileall
import os


def compile_madengine() -> None:
    import madengine

    compileall.compile_dir(os.path.dirname(madengine.__file__), quiet=1)

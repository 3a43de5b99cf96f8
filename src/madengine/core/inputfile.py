"""Opening a file the user named: a regular file, or one error line; never a read without end.

A path on the command line (``--perf-csv``, ``--additional-context-file``, ``--single-result``, a
data or credential file, ...) may name something that is not a file: a folder, a FIFO (whose open
waits for a writer and whose read waits forever), a device (``/dev/zero`` never ends: reading it
whole takes every byte of memory, in a C loop that Ctrl-C does not stop). Every reader of such a
path opens it here: it is looked at before it is opened (a device is never opened), opened without
waiting (``O_NONBLOCK``: a FIFO swapped in meanwhile cannot block the open) and looked at again
once open, so what is read is the regular file that was checked. A configuration document is read
whole up to :data:`MAX_CONFIG_BYTES`; CSV files are streamed by their readers.
"""

from __future__ import annotations

import io
import os
import stat
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from madengine.core.errors import MadEngineError

#: the most a configuration document (a context, data.json, credential.json, a manifest, a result
#: JSON, ...) may hold: far beyond any real one, and small enough to read whole
MAX_CONFIG_BYTES = 64 << 20
#: the most a recorded document read whole (a trace, a profile) may hold
MAX_RECORD_BYTES = 1 << 30
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))
_HINT = "a pipe or a device is never read: name a regular file"


def not_regular(mode: int) -> str | None:
    """Why a file of ``mode`` cannot be read as a user's file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a regular file"
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"not a regular file ({kind})"


def check_input(path: str | os.PathLike[str], *, shown: str | None = None,
                error: "type[MadEngineError] | None" = None, missing: str | None = "file not found",
                hint: str | None = None) -> bool:
    """Whether ``path`` is a regular file (False: it does not exist and ``missing`` is None; else an
    ``error`` saying ``missing``); anything else there (a folder, FIFO, device) is an ``error``."""
    fail = _error_class(error)
    shown = shown or os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing is None:
            return False
        raise fail(missing, path=shown, hint=hint) from None
    except OSError as exc:
        raise fail(_cannot(exc), path=shown, hint=hint) from None
    require_regular(mode, shown, fail)
    return True


def open_input(path: str | os.PathLike[str], *, shown: str | None = None, error: "type[MadEngineError] | None" = None,
               missing: str = "file not found", hint: str | None = None, text: bool = False) -> IO[Any]:
    """``path`` opened for reading (bytes; ``text``: UTF-8 with universal newlines left to the
    reader, as csv wants), once it is known to be a regular file; every other outcome is one
    ``error`` (default :class:`~madengine.core.errors.InputError`) naming ``shown``."""
    fail = _error_class(error)
    shown = shown or os.fspath(path)
    check_input(path, shown=shown, error=fail, missing=missing, hint=hint)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise fail(missing, path=shown, hint=hint) from None
    except OSError as exc:
        raise fail(_cannot(exc), path=shown, hint=hint) from None
    try:
        require_regular(os.fstat(fd).st_mode, shown, fail)  # what was opened may not be what was looked at
        os.set_blocking(fd, True)
        handle: IO[Any] = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return io.TextIOWrapper(handle, encoding="utf-8", newline="") if text else handle


def read_input(path: str | os.PathLike[str], *, limit: int = MAX_CONFIG_BYTES, shown: str | None = None,
               error: "type[MadEngineError] | None" = None, missing: str = "file not found",
               hint: str | None = None) -> bytes:
    """The whole of the regular file ``path``, at most ``limit`` bytes (more is an ``error``)."""
    fail = _error_class(error)
    shown = shown or os.fspath(path)
    with open_input(path, shown=shown, error=fail, missing=missing, hint=hint) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise fail(_cannot(exc), path=shown, hint=hint) from None
    if len(data) > limit:
        raise fail(f"larger than {_size(limit)}, more than a file of this kind may hold", path=shown,
                   hint="check that the path names the file meant")
    return data


def require_regular(mode: int, shown: str, error: "type[MadEngineError] | None" = None) -> None:
    """An ``error`` naming ``shown`` unless ``mode`` (of a stat) is a regular file's."""
    problem = not_regular(mode)
    if problem:
        raise _error_class(error)(problem, path=shown, hint=None if stat.S_ISDIR(mode) else _HINT)


def _cannot(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied (check the file's permissions)"
    return f"cannot read ({exc.strerror or exc})"


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def _error_class(error: "type[MadEngineError] | None") -> "type[MadEngineError]":
    if error is not None:
        return error
    from madengine.core.errors import InputError

    return InputError

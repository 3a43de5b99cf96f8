"""Typed errors with the data needed to render them as one line, and the process exit statuses.

Core modules raise these; only the CLI renders them (once) and turns them into an exit status.
"""

from __future__ import annotations

import enum

from madengine.core.redact import redact
from madengine.core.values import PART_LIMIT, one_line


class ExitStatus(enum.IntEnum):
    """Process exit statuses of every ``madengine`` command (documented in ``--help``)."""

    OK = 0  #: everything selected ran (or was skipped on purpose) and succeeded
    FAILED = 1  #: at least one model, build, task or check failed, or a row is kept outside perf.csv
    BAD_INPUT = 2  #: bad usage or input: flags, files, JSON, tags, context, credentials, services
    INTERNAL = 3  #: a bug in madengine (unexpected exception); run with --debug for the traceback
    HANGUP = 129  #: stopped by SIGHUP; as INTERRUPTED
    INTERRUPTED = 130  #: stopped by Ctrl-C; everything finished before it was recorded, the rest is "not run"
    TERMINATED = 143  #: stopped by SIGTERM (a CI system's cancel or timeout); as INTERRUPTED


class Interrupted(KeyboardInterrupt):
    """A signal that stops a command as Ctrl-C does: SIGTERM or SIGHUP, which CI systems send on
    cancel and timeout. The command ends cleanly and exits 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        import signal

        return signal.Signals(self.signum).name


def interruption(exc: BaseException) -> str:
    """How a stop reads in a row's reason: 'interrupted by SIGTERM', or 'interrupted' for Ctrl-C."""
    return f"interrupted by {exc.name}" if isinstance(exc, Interrupted) else "interrupted"


def interrupt_status(exc: BaseException) -> int:
    """The exit status of a command stopped by ``exc``: 130 for Ctrl-C, 128 + N for signal N."""
    return 128 + exc.signum if isinstance(exc, Interrupted) else int(ExitStatus.INTERRUPTED)


class MadEngineError(Exception):
    """Base of every error madengine raises on purpose.

    ``path`` names the file (or flag) at fault, ``field`` the model/field/key inside it, and
    ``hint`` says what to do. ``str()`` gives the one line the CLI prints (and a FAILURE row's
    reason): every part with its secrets masked, its control characters escaped (a newline in a tag
    or a data name reads ``\\n``) and at most :data:`~madengine.core.values.PART_LIMIT` characters.
    """

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        where = ": ".join(_part(p) for p in (self.path, self.field) if p)
        text = f"{where}: {_part(self.message)}" if where else _part(self.message)
        if self.hint:
            text = f"{text} ({_part(self.hint)})"
        return text


def _part(text: object) -> str:
    """One part of an error's line: redacted before it is cut, so no piece of a secret survives."""
    return one_line(redact(str(text)), PART_LIMIT)


class InputError(MadEngineError):
    """Bad user input: a flag value, a file, a JSON document."""


class CatalogError(InputError):
    """A model catalog source is malformed or a selection cannot be made."""


class UnknownTagError(CatalogError):
    """A tag selected no model."""

    def __init__(self, tag: str, suggestions: list[str]) -> None:
        hint = ("did you mean: " + ", ".join(suggestions)) if suggestions else "run 'madengine discover' to list models"
        super().__init__(f"tag '{tag}' selects no model", path="--tags", hint=hint)
        self.tag = tag
        self.suggestions = suggestions


class ContextError(InputError):
    """An additional context (string or file) is malformed or has a value of the wrong type."""


class ConfigError(InputError):
    """A configuration file (data.json, tools.json, credential.json, manifest) is malformed."""


class LaunchError(InputError):
    """A ``distributed`` block (models.json or context) is malformed, or asks for what the host or
    executor cannot give: an unknown launcher, too few nodes, more ranks than devices, a taken port."""


class CredentialError(InputError):
    """Credentials are missing, malformed or refused."""


class ServiceError(MadEngineError):
    """An external service (Docker engine, database, SMTP, Slurm) cannot be used."""


class ExecutionError(MadEngineError):
    """A step of a model run failed; the runner turns it into a FAILURE row with ``reason``."""

    exit_status = ExitStatus.FAILED


class EngineUnavailable(ExecutionError):
    """The Docker engine stopped answering during a run (connection cut, dockerd restarted)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"docker engine unavailable: {detail}")
        self.detail = detail


class EngineNotResponding(EngineUnavailable):
    """The Docker engine takes calls but does not answer them in time (its process hangs)."""

    def __init__(self, detail: str) -> None:
        ExecutionError.__init__(self, f"docker engine not responding: {detail}")
        self.detail = detail


class BuildError(ExecutionError):
    """An image build failed."""

    def __init__(self, message: str, *, log_path: str | None = None) -> None:
        super().__init__(message, hint=f"build log: {log_path}" if log_path else None)
        self.log_path = log_path

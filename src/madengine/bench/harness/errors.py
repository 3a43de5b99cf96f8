"""Errors of the portable harness (madengine's typed errors are not importable in a container)."""

from __future__ import annotations


class HarnessError(Exception):
    """A model cannot be benchmarked; ``hint`` says what to do."""

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}" if self.field else self.message
        return f"{text} ({self.hint})" if self.hint else text


class HarnessInputError(HarnessError):
    """Bad input for a benchmark: a shape, an axis, a provider, a file, an option."""


class ProviderNotInitialised(HarnessError):
    """The asked execution provider is offered but did not initialise (ORT would run elsewhere)."""


class PrecisionUnsupported(HarnessError):
    """The asked precision cannot run here: the provider has no mode for it, or the hardware would only
    emulate it. An UNSUPPORTED result with this reason, never a run at another precision."""

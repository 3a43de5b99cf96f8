"""How the core reports progress without printing: the CLI passes a :class:`Reporter`."""

from __future__ import annotations


class Reporter:
    """Receives progress from the run pipeline. The default discards everything."""

    def message(self, text: str) -> None:
        """A progress line (e.g. 'building ci-foo')."""

    def output(self, key: str, line: str) -> None:
        """One line of a model's (or build's) output, when live output is on."""

    def data(self, text: str) -> None:
        """Output a machine reads (e.g. a submitted job id, a rendered script): stdout in the CLI."""

"""Command-line options as data: one table row per flag says how the parser reads it and how a value
is written back as argv (a Slurm task's ``madengine run``, the perf.csv ``args`` cell of a
benchmark), so a flag is spelled, typed and defaulted in one place.

A :class:`Flag` names the flag, the key its value has (the parser's ``dest``) and, when the value
belongs to a typed options object (``RunOptions``, ``BuildOptions``...), that object's field.
``parse`` turns the text into the same value the options object holds (a ``ValueError``'s message is
the usage error); :func:`argv` writes values back; :func:`option_values` and :func:`flag_values`
carry values between a parsed namespace and an options object. The parser itself is built by the
CLI (``madengine.cli.flags.add_flags``); this module never imports argparse.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Mapping, Sequence

from madengine.core.values import MAX_TIMEOUT, seconds


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag. ``names[0]`` is the spelling written back; ``dest`` the key of its value (in the
    parsed namespace and in the mapping :func:`argv` reads); ``field`` the attribute of the options
    object that holds it ('' when none does; ``None`` means the same as ``dest``)."""

    names: tuple[str, ...]
    dest: str
    help: str
    parse: Callable[[str], Any] | None = None
    default: Any = None
    #: takes no value; ``negated``: the option holds the opposite (``--no-trace`` ↔ ``trace``)
    switch: bool = False
    negated: bool = False
    #: may be given again, each value kept (a list)
    repeat: bool = False
    #: a value may follow or not; this is the value without one
    bare: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    field: str | None = None
    #: the value as argv text
    show: Callable[[Any], str] = str
    #: written even at its default (the perf.csv ``args`` cell states every setting of a measurement)
    always: bool = False

    @property
    def attribute(self) -> str:
        return self.dest if self.field is None else self.field


def argv(flags: Sequence[Flag], values: Mapping[str, Any]) -> list[str]:
    """The flags of ``values`` (by ``dest``; a missing key is not written), in the table's order.
    None and False are never written, a value equal to the default only when ``always``; True is the
    bare flag; a list repeats the flag once per item. A value a parser would take for an option
    (``-x``) is joined to its flag (``--flag=-x``)."""
    out: list[str] = []
    for flag in flags:
        if flag.dest not in values:
            continue
        value = values[flag.dest]
        if value is None or value is False or (value == flag.default and not flag.always):
            continue
        name = flag.names[0]
        if value is True:
            out.append(name)
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            text = flag.show(item)
            # argparse reads a word that starts with '-' and has no space as an option, not a value
            out += [f"{name}={text}"] if text.startswith("-") and " " not in text else [name, text]
    return out


def option_values(flags: Sequence[Flag], namespace: Any) -> dict[str, Any]:
    """The options-object fields of a parsed namespace (flags with a field only)."""
    return {flag.attribute: value for flag, value in _carried(flags, namespace, lambda flag: flag.dest)}


def flag_values(flags: Sequence[Flag], options: Any) -> dict[str, Any]:
    """The values an options object holds, by ``dest``: what :func:`argv` writes back."""
    return {flag.dest: value for flag, value in _carried(flags, options, lambda flag: flag.attribute)}


def _carried(flags: Sequence[Flag], source: Any, name: Callable[[Flag], str]) -> Iterator[tuple[Flag, Any]]:
    """Each flag with a field, with its value read from ``source`` (turned over for a negated switch)."""
    for flag in flags:
        if flag.attribute:
            value = getattr(source, name(flag))
            yield flag, (not value) if flag.negated else value


# -- parsers of flag text (their ValueError's message is what the user reads) ---------------------
def whole(minimum: int) -> Callable[[str], int]:
    """A whole number of ``minimum`` or more."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"'{text}' is not a whole number") from None
        if value < minimum:
            raise ValueError(f"must be {minimum} or more")
        return value

    parse.__name__ = f"whole_from_{minimum}"
    return parse


def timeout(text: str) -> int | None:
    """Seconds a model may run: -1 (None: the model's own, else the default), 0 (never) or 1 up."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a whole number of seconds") from None
    if value < -1 or value > MAX_TIMEOUT:
        raise ValueError(f"must be -1 (model/default), 0 (never) or 1 to {MAX_TIMEOUT} seconds")
    return None if value == -1 else value


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"'{text}' is not true/false")


def duration(text: str) -> float:
    """A number of seconds, more than 0 and finite."""
    value = seconds(text)
    if not value:  # None (not a finite number up to MAX_TIMEOUT) or 0
        raise ValueError(f"'{text}' is not a number of seconds (more than 0, at most {MAX_TIMEOUT})")
    return value


def names_list(what: str) -> Callable[[str], list[str]]:
    """A comma-separated list of names (at least one)."""
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if not names:
            raise ValueError(f"names no {what}")
        return names

    parse.__name__ = f"{what}_names"
    return parse

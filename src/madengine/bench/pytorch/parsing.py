"""Parsers of the user input that ``madengine bench SCRIPT.py`` takes (pure, no torch).

* ``SCRIPT.py::HASH1,HASH2``: a script and the model hashes to take from it (:func:`parse_script_spec`);
* ``# labels: name::x author::y test_group::daily,monthly`` lines at the top of a script
  (:func:`parse_labels_line`, :func:`read_script_labels`) and ``--labels KEY::VALUE`` filters
  (:func:`parse_label_filter`, :func:`labels_match`);
* ``--script-args "..."``: split like a POSIX shell, never run by one (:func:`parse_script_args`);
* ``--rebuild if_needed|always|never`` (:func:`parse_rebuild`).

Every parser raises :class:`madengine.core.errors.InputError` naming the flag or file at fault.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

from madengine.core.errors import InputError

#: a model hash: the first 8 hex digits of a sha256 (see :mod:`madengine.bench.pytorch.hashing`)
HASH_LENGTH = 8
_HASH = re.compile(r"[0-9a-f]{%d}" % HASH_LENGTH)
#: label keys and values: no spaces (tokens are space-separated), no ``::`` inside, no commas in keys
_LABEL_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
LABELS_MARKER = "# labels:"
#: how many leading lines of a script may hold its ``# labels:`` line
LABEL_LINES = 5

REBUILD_POLICIES = ("if_needed", "always", "never")


@dataclasses.dataclass(frozen=True)
class ScriptSpec:
    """One script to benchmark and the model hashes selected in it (empty: every model)."""

    path: Path
    hashes: tuple[str, ...] = ()


def parse_script_spec(text: str) -> ScriptSpec:
    """``dir/script.py`` or ``dir/script.py::1a2b3c4d,5e6f7a8b`` (split at the last ``::``)."""
    path, sep, selection = text.rpartition("::")
    if not sep:
        return ScriptSpec(Path(text))
    if not path:
        raise InputError(f"'{text}' names no script before '::'", path=text, hint="write SCRIPT.py::HASH1,HASH2")
    hashes = []
    for item in selection.split(","):
        value = item.strip().lower()
        if not _HASH.fullmatch(value):
            raise InputError(f"'{item}' is not a model hash ({HASH_LENGTH} hex digits)", path=text,
                             hint="run with --analyze-only to list the hashes")
        if value not in hashes:
            hashes.append(value)
    return ScriptSpec(Path(path), tuple(hashes))


def parse_labels_line(line: str) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The labels of one ``# labels: key::v1,v2 key2::v3`` line, and the tokens that are not labels.

    Malformed tokens are returned (for a warning), not raised: a script's metadata never stops a
    benchmark. A key given twice keeps the values of both, in order, without repeats.
    """
    text = line.strip()
    if not text.startswith(LABELS_MARKER):
        return {}, []
    labels: dict[str, list[str]] = {}
    problems = []
    for token in text[len(LABELS_MARKER):].split():
        key, sep, values = token.partition("::")
        items = [v for v in values.split(",") if v]
        if not sep or not _LABEL_KEY.fullmatch(key) or not items or any("::" in v for v in items):
            problems.append(token)
            continue
        known = labels.setdefault(key, [])
        known += [v for v in items if v not in known]
    return {key: tuple(values) for key, values in labels.items()}, problems


def read_script_labels(path: Path) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The first ``# labels:`` line among the script's first :data:`LABEL_LINES` lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for _, line in zip(range(LABEL_LINES), handle):
                if line.strip().startswith(LABELS_MARKER):
                    return parse_labels_line(line)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=str(path)) from None
    return {}, []


def parse_label_filter(texts: list[str]) -> dict[str, frozenset[str]]:
    """``--labels KEY::V1,V2`` flags → key → accepted values (a key given twice accepts both)."""
    wanted: dict[str, set[str]] = {}
    for text in texts:
        for token in text.split():
            key, sep, values = token.partition("::")
            items = [v for v in values.split(",") if v]
            if not sep or not _LABEL_KEY.fullmatch(key) or not items or any("::" in v for v in items):
                raise InputError(f"'{token}' is not KEY::VALUE[,VALUE...]", path="--labels",
                                 hint="e.g. --labels test_group::daily")
            wanted.setdefault(key, set()).update(items)
    return {key: frozenset(values) for key, values in wanted.items()}


def labels_match(labels: dict[str, tuple[str, ...]], wanted: dict[str, frozenset[str]]) -> bool:
    """True when, for every wanted key, the script has that key with at least one wanted value."""
    return all(key in labels and not wanted[key].isdisjoint(labels[key]) for key in wanted)


def labels_text(labels: dict[str, tuple[str, ...]]) -> str:
    """Labels as perf.csv ``tags`` text, in the script's own spelling: ``author::y name::x``."""
    return " ".join(f"{key}::{','.join(values)}" for key, values in sorted(labels.items()))


def parse_script_args(text: str) -> list[str]:
    """``--script-args`` → the script's ``sys.argv[1:]``, split like a POSIX shell (quotes kept together)."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise InputError(f"cannot split {text!r}: {exc}", path="--script-args",
                         hint="balance the quotes, e.g. --script-args \"--name 'two words'\"") from None


def parse_rebuild(text: str) -> str:
    """``if_needed`` (also ``if-needed``), ``always`` or ``never``, in any case."""
    value = text.strip().lower().replace("-", "_")
    if value not in REBUILD_POLICIES:
        raise InputError(f"unknown rebuild policy '{text}'", path="--rebuild", hint="use " + ", ".join(REBUILD_POLICIES))
    return value

"""What a Dockerfile declares, read the way Docker reads it: its instructions, ``ARG`` names with
their defaults, and the images it builds ``FROM``.

Docker's rules followed here (https://docs.docker.com/reference/dockerfile/):

* parser directives (``# escape=`` and the like) only at the very top; ``escape`` changes the
  line-continuation character from ``\\`` to the one given (`` ` `` on Windows images);
* a line ending in the escape character (trailing blanks allowed) continues on the next; comment
  lines (``#`` first) are dropped, also inside a continued instruction;
* heredocs (``RUN <<EOF`` … ``EOF``, ``<<-`` strips leading tabs) are an instruction's body, never
  instructions of their own;
* instructions are case-insensitive; ``ARG name[=default] [name[=default] ...]`` declares one or more
  names, defaults may be quoted; ARGs before the first ``FROM`` are global (usable in ``FROM``),
  ARGs after it belong to their stage. Either way a build argument of that name reaches the build.

A build argument whose name the Dockerfile never declares changes nothing in the image (Docker
only warns that it was not consumed), so it is neither passed nor part of the build-inputs hash
(:mod:`madengine.execution.build`). Docker's predefined proxy arguments are usable without a
declaration and are passed through.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Iterator, Mapping

#: build args Docker makes available without an ARG line (and leaves out of the build cache)
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
PREDEFINED_ARGS = frozenset(_PROXIES) | frozenset(name.lower() for name in _PROXIES)

_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")
_HEREDOC = re.compile(r"(?:^|\s)<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_.]*)\2")
_HEREDOC_KEYWORDS = ("RUN", "COPY", "ADD")
_INSTRUCTION = re.compile(r"^\s*([A-Za-z]+)(?:\s+(.*))?$", re.DOTALL)
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::?([-+])([^}]*))?\}|(\w+))")


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, ARG, RUN, ...
    arguments: str  # the rest of the instruction, continuation lines joined
    line: int  # 1-based line where it starts


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, in order."""
    escape = _escape_character(text)
    continued = re.compile(re.escape(escape) + r"[ \t]*$")
    out: list[Instruction] = []
    lines = iter(enumerate(text.splitlines(), start=1))
    for number, line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        joined = line.lstrip()
        while continued.search(joined):  # Docker joins the lines as they are: "A=x\" + "y" is "A=xy"
            joined = continued.sub("", joined)
            following = _next_code_line(lines)
            if following is None:
                break
            joined += following
        match = _INSTRUCTION.match(joined)
        if match is None:
            continue
        keyword, arguments = match.group(1).upper(), (match.group(2) or "").strip()
        if keyword in _HEREDOC_KEYWORDS:
            _skip_heredocs(arguments, lines)
        out.append(Instruction(keyword, arguments, number))
    return out


def _escape_character(text: str) -> str:
    """The ``# escape=`` parser directive of the top of the file (``\\`` when none)."""
    for line in text.splitlines():
        match = _DIRECTIVE.match(line.strip())
        if not match:
            break  # directives end at the first line that is not one
        if match.group(1).lower() == "escape" and match.group(2) in ("\\", "`"):
            return match.group(2)
    return "\\"


def _next_code_line(lines: Iterator[tuple[int, str]]) -> str | None:
    """The next line of a continued instruction: comment lines (and empty ones) are skipped."""
    for _, line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            return line
    return None


def _skip_heredocs(arguments: str, lines: Iterator[tuple[int, str]]) -> None:
    """Consume the bodies of the heredocs an instruction opens (each up to its delimiter line)."""
    for match in _HEREDOC.finditer(arguments):
        strip_tabs, word = match.group(1) == "-", match.group(3)
        for _, line in lines:
            if (line.lstrip("\t") if strip_tabs else line) == word:
                break


def _words(arguments: str) -> list[str]:
    """Shell-like words (quotes respected); plain whitespace splitting if the quotes are unbalanced."""
    try:
        return shlex.split(arguments, comments=False, posix=True)
    except ValueError:
        return arguments.split()


def declared_args(text: str) -> dict[str, str | None]:
    """Every ARG name the Dockerfile declares (global or in any stage), with its first default
    (``None`` when declared without one), in the order declared."""
    declared: dict[str, str | None] = {}
    for instruction in instructions(text):
        if instruction.keyword != "ARG":
            continue
        for word in _words(instruction.arguments):
            name, has_default, default = word.partition("=")
            if name and (name not in declared or declared[name] is None):
                declared[name] = default if has_default else declared.get(name)
    return declared


def global_arg_defaults(text: str) -> dict[str, str]:
    """The defaults of the ARGs before the first FROM: the values a FROM line can use."""
    defaults: dict[str, str] = {}
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            for word in _words(instruction.arguments):
                name, has_default, default = word.partition("=")
                if name and has_default:
                    defaults[name] = default
    return defaults


def substitute(word: str, values: Mapping[str, str]) -> str:
    """``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME:+alternative}`` of ``values``; an
    unknown name without a default is left as written."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        operator, operand = match.group(2), match.group(3) or ""
        value = values.get(name)
        if operator == "-":
            return value if value else operand
        if operator == "+":
            return operand if value else ""
        return match.group(0) if value is None else value

    return _VARIABLE.sub(one, word)


def from_images(text: str, build_args: Mapping[str, str]) -> list[str]:
    """The images the build starts from, in order: each ``FROM`` image (``${ARG}`` resolved from the
    build args, then the global ARG defaults) and each ``COPY --from=<image>``, never a stage name
    and never ``scratch``."""
    values = {**global_arg_defaults(text), **build_args}
    stages: set[str] = set()
    images: list[str] = []
    for instruction in instructions(text):
        words = _words(instruction.arguments)
        if instruction.keyword == "FROM":
            rest = [w for w in words if not w.startswith("--")]
            if not rest:
                continue
            image = substitute(rest[0], values)
            if len(rest) >= 3 and rest[1].lower() == "as":
                stages.add(rest[2].lower())
            if image.lower() not in stages and image.lower() != "scratch" and image not in images:
                images.append(image)
        elif instruction.keyword in ("COPY", "ADD"):
            for word in words:
                source = word[len("--from="):] if word.startswith("--from=") else ""
                if source and source.lower() not in stages and not source.isdigit() and source not in images:
                    images.append(source)
    return images


def consumed_args(text: str, offered: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The offered build args that reach the build (declared by an ARG, or Docker's predefined
    proxy args), and the names of those dropped because nothing declares them."""
    declared = declared_args(text)
    passed = {k: v for k, v in offered.items() if k in declared or k in PREDEFINED_ARGS}
    return passed, [k for k in offered if k not in passed]

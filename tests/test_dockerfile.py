"""madengine.execution.dockerfile: ARG declarations and FROM images, read as Docker reads them
(known cases and Hypothesis properties: a Dockerfile is user input)."""

from __future__ import annotations

import shlex

from hypothesis import given
from hypothesis import strategies as st

from madengine.execution.build import base_image
from madengine.execution.dockerfile import consumed_args, declared_args, from_images, instructions

EVERYTHING = """\
# syntax=docker/dockerfile:1
# escape=\\
ARG BASE=madengine-base:bookworm OTHER
ARG  X="a b" \\
   # a comment inside a continued instruction
   Y=2
FROM ${BASE} AS build
arg lower
RUN cat <<EOF > /x
ARG NOT_AN_INSTRUCTION=1
EOF
RUN echo $((1<<2)) && \\
    echo ARG ALSO_NOT=1
FROM build
COPY --from=build /x /y
COPY --from=helper:3 /a /b
ARG JOINED=1\\
2
ONBUILD ARG LATER
"""


def test_arg_lines_multiple_names_defaults_quotes_continuations_and_both_sides_of_from():
    assert declared_args(EVERYTHING) == {"BASE": "madengine-base:bookworm", "OTHER": None, "X": "a b", "Y": "2",
                                         "lower": None, "JOINED": "12"}


def test_heredoc_bodies_and_comments_are_not_instructions():
    keywords = [i.keyword for i in instructions(EVERYTHING)]
    assert keywords == ["ARG", "ARG", "FROM", "ARG", "RUN", "RUN", "FROM", "COPY", "COPY", "ARG", "ONBUILD"]
    assert instructions(EVERYTHING)[5].arguments.endswith("echo ARG ALSO_NOT=1")


def test_escape_directive_changes_the_continuation_character():
    text = "# escape=`\nFROM base\nARG A=1 `\n  B=2\nARG C=x\\\n"
    assert declared_args(text) == {"A": "1", "B": "2", "C": "x\\"}


def test_images_the_build_starts_from():
    assert from_images(EVERYTHING, {}) == ["madengine-base:bookworm", "helper:3"]
    assert from_images(EVERYTHING, {"BASE": "other:1"})[0] == "other:1"
    assert from_images("FROM scratch\nCOPY a /\n", {}) == []
    assert from_images("ARG V\nFROM img:${V:-latest}\n", {}) == ["img:latest"]
    assert base_image("FROM --platform=linux/amd64 debian:12 AS b\nFROM b\n", {}) == "debian:12"


def test_only_declared_args_and_docker_proxies_reach_the_build():
    passed, unused = consumed_args("FROM x\nARG BATCH_SIZE\n", {"ITERS": "5", "BATCH_SIZE": "16", "http_proxy": "p"})
    assert passed == {"BATCH_SIZE": "16", "http_proxy": "p"} and unused == ["ITERS"]
    assert consumed_args("FROM x\nARG iters\n", {"ITERS": "5"}) == ({}, ["ITERS"])  # names are case-sensitive


# --- properties ---------------------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
VALUES = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_.:/ "), max_size=12)


@st.composite
def arg_dockerfiles(draw):
    """A Dockerfile of ARG lines in every form Docker accepts, and the names (with defaults) it declares."""
    declared: dict[str, str | None] = {}
    lines = [draw(st.sampled_from(["", "# syntax=docker/dockerfile:1\n"]))]
    for position in range(draw(st.integers(1, 5))):
        if position == draw(st.integers(0, 4)):
            lines.append(draw(st.sampled_from(["FROM base:1\n", "from base AS stage\n", "FROM --platform=x b\n"])))
        words = []
        for name in draw(st.lists(NAMES, min_size=1, max_size=3, unique=True)):
            value = draw(st.none() | VALUES)
            words.append(name if value is None else f"{name}={shlex.quote(value)}")
            if name not in declared or declared[name] is None:
                declared[name] = value if value is not None else declared.get(name)
        keyword = draw(st.sampled_from(["ARG", "arg", "Arg"]))
        separator = draw(st.sampled_from([" ", "  ", " \\\n  ", " \\  \n# note\n\t"]))
        lines.append(draw(st.sampled_from(["", "  "])) + keyword + " " + separator.join(words) + "\n")
        lines.append(draw(st.sampled_from(["", "# ARG COMMENTED=1\n", "RUN echo ARG NOPE=1\n", "\n",
                                           "RUN <<EOT\nARG INSIDE=1\nEOT\n"])))
    return "".join(lines), declared


@given(arg_dockerfiles())
def test_every_declared_arg_is_found_with_its_default(case):
    text, declared = case
    assert declared_args(text) == declared


@given(arg_dockerfiles(), st.dictionaries(NAMES, VALUES, max_size=5))
def test_consumed_args_are_exactly_the_declared_offered_ones(case, offered):
    text, declared = case
    passed, unused = consumed_args(text, offered)
    assert passed == {k: v for k, v in offered.items() if k in declared}
    assert set(unused) == set(offered) - set(declared)


@given(st.text(max_size=300))
def test_any_text_parses_without_an_exception(text):
    declared_args(text)
    from_images(text, {})

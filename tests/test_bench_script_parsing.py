"""Property tests of the parsers of ``madengine bench SCRIPT.py``'s user input (no torch needed):
``# labels:`` lines, ``--labels`` filters, ``SCRIPT.py::HASH`` selections, ``--script-args`` and
``--rebuild``. Derandomized; 500 examples each under CI=true."""

from __future__ import annotations

import shlex
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import IN_CI
from madengine.bench.pytorch import parsing
from madengine.core.errors import InputError

PROPERTIES = settings(derandomize=True, max_examples=500 if IN_CI else 150, deadline=None)

key_text = st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=12)
value_text = st.text(string.ascii_letters + string.digits + "_.-/+@", min_size=1, max_size=12)
labels_strategy = st.dictionaries(key_text, st.lists(value_text, min_size=1, max_size=4, unique=True), max_size=5)
hash_text = st.text("0123456789abcdef", min_size=8, max_size=8)


def labels_line(labels: dict[str, list[str]]) -> str:
    return "# labels: " + " ".join(f"{key}::{','.join(values)}" for key, values in labels.items())


@PROPERTIES
@given(labels_strategy)
def test_a_labels_line_round_trips(labels):
    parsed, problems = parsing.parse_labels_line(labels_line(labels))
    assert problems == []
    assert parsed == {key: tuple(values) for key, values in labels.items()}
    assert parsing.parse_labels_line(parsing.labels_text(parsed).join(["# labels: ", ""]))[0] == parsed


@PROPERTIES
@given(st.text(max_size=120))
def test_any_labels_line_parses_to_well_formed_labels_or_reports_tokens(text):
    parsed, problems = parsing.parse_labels_line("# labels:" + text)
    for key, values in parsed.items():
        assert key and "::" not in key and not any(c.isspace() for c in key)
        assert values and all(v and "," not in v and "::" not in v and not any(c.isspace() for c in v)
                              for v in values)
    tokens = text.split()
    assert len(problems) <= len(tokens)
    assert parsing.parse_labels_line(text) == ({}, []) or text.strip().startswith("# labels:")


def test_labels_examples():
    line = "# labels: name::x author::y test_group::daily,monthly broken nokey:: ::novalue"
    labels, problems = parsing.parse_labels_line(line)
    assert labels == {"name": ("x",), "author": ("y",), "test_group": ("daily", "monthly")}
    assert problems == ["broken", "nokey::", "::novalue"]
    assert parsing.parse_labels_line("#labels name::x") == ({}, [])  # MLAgility's guide spells it so; no labels


@PROPERTIES
@given(labels_strategy, st.data())
def test_labels_match_a_filter_made_of_their_own_values(labels, data):
    assume_some = {k: v for k, v in labels.items()}
    if not assume_some:
        assert parsing.labels_match({}, {})
        return
    keys = data.draw(st.lists(st.sampled_from(sorted(assume_some)), min_size=1, unique=True))
    flags = [f"{key}::{data.draw(st.sampled_from(assume_some[key]))}" for key in keys]
    wanted = parsing.parse_label_filter(flags)
    own = {key: tuple(values) for key, values in labels.items()}
    assert parsing.labels_match(own, wanted)
    other = {key: frozenset({"value-no-script-has"}) for key in keys}
    assert not parsing.labels_match(own, other)
    assert not parsing.labels_match({}, wanted)


@PROPERTIES
@given(st.lists(st.text(max_size=20), max_size=4))
def test_label_filter_parses_or_raises_input_error(texts):
    try:
        wanted = parsing.parse_label_filter(texts)
    except InputError as exc:
        assert exc.path == "--labels"
        return
    assert all(values for values in wanted.values())


@PROPERTIES
@given(st.text(string.ascii_letters + string.digits + "/._- ", min_size=1, max_size=30).filter(lambda t: t.strip()),
       st.lists(hash_text, min_size=1, max_size=4), st.booleans())
def test_script_spec_takes_the_hashes_after_the_last_double_colon(path, hashes, upper):
    text = f"{path}.py::" + ",".join(h.upper() if upper else h for h in hashes)
    spec = parsing.parse_script_spec(text)
    assert str(spec.path) == str(parsing.Path(f"{path}.py"))
    assert spec.hashes == tuple(dict.fromkeys(hashes))


@PROPERTIES
@given(st.text(max_size=40))
def test_any_script_spec_parses_or_raises_input_error(text):
    try:
        spec = parsing.parse_script_spec(text)
    except InputError:
        assert "::" in text
        return
    assert all(len(h) == parsing.HASH_LENGTH for h in spec.hashes)


@pytest.mark.parametrize("text", ["model.py::", "model.py::xyz", "model.py::1a2b3c4d,", "::1a2b3c4d",
                                  "model.py::1a2b3c4d5"])
def test_bad_selections_are_one_line_errors(text):
    with pytest.raises(InputError) as error:
        parsing.parse_script_spec(text)
    assert "\n" not in str(error.value)


@PROPERTIES
@given(st.lists(st.text(max_size=15), max_size=6))
def test_script_args_round_trip_through_shell_quoting(arguments):
    assert parsing.parse_script_args(shlex.join(arguments)) == arguments


@PROPERTIES
@given(st.text(max_size=40))
def test_any_script_args_split_or_raise_input_error(text):
    try:
        arguments = parsing.parse_script_args(text)
    except InputError as exc:
        assert exc.path == "--script-args"
        return
    assert isinstance(arguments, list) and all(isinstance(a, str) for a in arguments)


@PROPERTIES
@given(st.sampled_from(parsing.REBUILD_POLICIES), st.lists(st.booleans(), min_size=9, max_size=9), st.booleans())
def test_rebuild_policies_in_any_case_and_spelling(policy, upper, dashes):
    text = "".join(c.upper() if u else c for c, u in zip(policy, upper + [False] * 9))
    if dashes:
        text = text.replace("_", "-")
    assert parsing.parse_rebuild(f" {text} ") == policy


@PROPERTIES
@given(st.text(max_size=20))
def test_any_other_rebuild_value_is_an_input_error(text):
    if text.strip().lower().replace("-", "_") in parsing.REBUILD_POLICIES:
        return
    with pytest.raises(InputError):
        parsing.parse_rebuild(text)

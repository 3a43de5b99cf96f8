"""Property: no parser of user input lets anything escape but madengine's typed errors.

Each parser of tests/fuzz_targets.py gets derandomized Hypothesis cases (500 under CI=true, 100 on a
laptop; see the profiles in conftest.py), after the inputs that once escaped (``EXAMPLES``). Each
typed error it raises must read as one short line (no control character, at most ``LONGEST_LINE``).
``benchmarks/fuzz_inputs.py`` runs 10,000 per parser and prints the counts.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz_targets import EXAMPLES, PENDING, TARGETS
from madengine.core.errors import MadEngineError
from madengine.core.values import PART_LIMIT

#: four parts (file, field, message, hint) of at most PART_LIMIT characters each, and their separators
LONGEST_LINE = 4 * PART_LIMIT + 20


def assert_one_short_line(text: str) -> None:
    assert len(text.splitlines()) <= 1 and text.isprintable(), repr(text[:400])
    assert len(text) <= LONGEST_LINE, len(text)


def _case(name: str):
    marks = [pytest.mark.xfail(strict=True, reason=PENDING[name])] if name in PENDING else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_case(name) for name in TARGETS])
def test_only_typed_errors_escape(name, tmp_path_factory, monkeypatch):
    strategy, run = TARGETS[name]
    workdir = tmp_path_factory.mktemp("fuzz")
    monkeypatch.chdir(workdir)

    def check(value):
        try:
            run(value, workdir)
        except MadEngineError as exc:  # a typed error: the CLI prints it as one line, exit 2
            assert_one_short_line(str(exc))

    for known in reversed(EXAMPLES.get(name, [])):
        check = example(known)(check)
    given(strategy)(check)()


# -- the rendering of every error, and the GPU list of a context --------------------------------------
parts = st.one_of(st.none(), st.text(), st.text(alphabet=st.characters(max_codepoint=0x20)),
                  st.integers(0, 5000).map(lambda n: "x\n" * n))


@given(parts, parts, st.text() | st.sampled_from(["a\nb", "\r\n", "\x1b[2J", "\u2028", "y" * 50_000]), parts)
def test_any_error_reads_as_one_short_line(path, field, message, hint):
    """Whatever user text an error quotes (a tag, a data name, a key, a whole file pasted into a flag),
    its line has no control character and at most LONGEST_LINE characters; short text is kept whole."""
    text = str(MadEngineError(message, path=path, field=field, hint=hint))
    assert_one_short_line(text)
    if len(message) <= 100 and message.isprintable():
        assert message in text


@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 6)), max_size=5), st.sampled_from([",", " , "]))
def test_gpu_lists_read_back_the_indices_they_name(ranges, separator):
    from madengine.context.context import MAX_GPU_INDEX, parse_gpu_list

    pieces, expected = [], set()
    for first, width in ranges:
        last = min(first + width, MAX_GPU_INDEX)
        pieces.append(f"{first}-{last}" if last != first else str(first))
        expected.update(range(first, last + 1))
    assert parse_gpu_list(separator.join(pieces)) == sorted(expected)


@given(st.one_of(st.text(max_size=20), st.integers(), st.floats(), st.none(), st.lists(st.integers(), max_size=2)))
def test_a_gpu_list_is_indices_or_an_error_naming_docker_gpus(value):
    from madengine.context.context import MAX_GPU_INDEX, parse_gpu_list
    from madengine.core.errors import ContextError

    try:
        ids = parse_gpu_list(value)
    except ContextError as exc:
        assert exc.field == "docker_gpus"
        assert_one_short_line(str(exc))
    else:
        assert ids == sorted(set(ids)) and all(0 <= i <= MAX_GPU_INDEX for i in ids)

"""Property: no parser of user input lets anything escape but madengine's typed errors.

Each parser of tests/fuzz_targets.py gets derandomized Hypothesis cases (500 under CI=true, 100 on a
laptop; see the profiles in conftest.py), after the inputs that once escaped (``EXAMPLES``).
``benchmarks/fuzz_inputs.py`` runs 10,000 per parser and prints the counts.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given

from fuzz_targets import EXAMPLES, PENDING, TARGETS
from madengine.core.errors import MadEngineError


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
        except MadEngineError:
            pass  # a typed error: the CLI prints it as one line, exit 2

    for known in reversed(EXAMPLES.get(name, [])):
        check = example(known)(check)
    given(strategy)(check)()

"""The CLI as users and CI meet it: help, exit codes, one-line errors, discover output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_process


def test_help_lists_commands_and_exit_codes():
    done = run_process("--help")
    assert done.returncode == 0
    for word in ("run", "discover", "report", "database", "build", "bench", "exit codes", "130"):
        assert word in done.stdout


def test_version():
    done = run_process("--version")
    assert done.returncode == 0 and done.stdout.startswith("madengine ")


def test_no_command_is_usage_error():
    assert run_process().returncode == 2


def test_discover_table_and_json(model_repo, cli):
    table = cli("discover")
    assert table.code == 0 and "dummy_multi" in table.stdout
    result = cli("discover", "--tags", "sub/all", "dummy:batch-size=8", "--json")
    assert result.code == 0
    models = json.loads(result.stdout)
    assert [m["name"] for m in models] == ["dummy", "sub/model1", "sub/model2"]
    assert models[0]["args"] == "--batch-size 8" and models[0]["custom_field"] == {"kept": True}
    for key in ("name", "tags", "args", "dockerfile", "scripts"):
        assert key in models[1]


def _one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_unknown_tag(model_repo):
    _one_line_error(run_process("discover", "--tags", "dumm"), "tag 'dumm' selects no model", "did you mean: dummy")


def test_malformed_models_json(model_repo):
    (model_repo / "models.json").write_text("[{]")
    _one_line_error(run_process("discover"), "models.json: malformed JSON at line 1")
    _one_line_error(run_process("run", "--tags", "dummy"), "models.json: malformed JSON")


def test_bad_get_models_json(model_repo):
    (model_repo / "scripts" / "dyn" / "get_models_json.py").write_text("def list_models():\n    return 5\n")
    _one_line_error(run_process("discover"), "get_models_json.py", "not a list")


def test_bad_context_string(model_repo):
    _one_line_error(run_process("run", "--tags", "dummy", "--additional-context", "{'a': "),
                    "--additional-context: not a JSON object or Python dict literal")


def test_missing_context_file(model_repo):
    _one_line_error(run_process("run", "--tags", "dummy", "--additional-context-file", "nope.json"),
                    "nope.json: file not found")


def test_bad_flag_value(model_repo):
    done = run_process("run", "--tags", "dummy", "--timeout", "soon")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_debug_shows_traceback(model_repo):
    done = run_process("discover", "--tags", "dumm", env={"MADENGINE_DEBUG": "1"})
    assert done.returncode == 2 and "Traceback" in done.stderr


def test_run_without_tags(model_repo):
    _one_line_error(run_process("run"), "--tags: no models selected")


def test_model_dir(tmp_path):
    done = run_process("discover", "--json", cwd=tmp_path, env={"MODEL_DIR": str(FIXTURES / "repo")})
    assert done.returncode == 0 and "dummy" in {m["name"] for m in json.loads(done.stdout)}
    assert list(tmp_path.iterdir()) == []

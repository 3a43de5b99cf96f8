"""Context parsing and merging, and Dockerfile selection by # CONTEXT headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from madengine.context import build_context, deep_merge, parse_context_string, select_dockerfiles
from madengine.context.dockerfiles import matches, read_context_header
from madengine.core.errors import ConfigError, ContextError, ExecutionError

FIXTURE = Path(__file__).parent / "fixtures" / "repo"


def test_json_and_python_literal_forms():
    assert parse_context_string('{"gpu_vendor": "AMD"}') == {"gpu_vendor": "AMD"}
    assert parse_context_string("{'tools': [{'name': 'x'}], 'flag': True}") == {"tools": [{"name": "x"}], "flag": True}


@pytest.mark.parametrize("text", ["{'a': __import__('os').system('true')}", "not a dict", "[1, 2]", "{'a': 1"])
def test_bad_context_strings_are_rejected_never_evaluated(text):
    with pytest.raises(ContextError) as info:
        parse_context_string(text)
    assert str(info.value).startswith("--additional-context")


def test_deep_merge_later_wins_nested():
    merged = deep_merge({"a": 1, "d": {"x": 1, "y": 2}}, {"d": {"y": 3, "z": 4}, "b": 2})
    assert merged == {"a": 1, "b": 2, "d": {"x": 1, "y": 3, "z": 4}}


def test_file_then_string_override_detected(tmp_path):
    ctx_file = tmp_path / "ctx.json"
    ctx_file.write_text('{"gpu_vendor": "amd", "guest_os": "centos", "docker_env_vars": {"A": "1", "B": 2}}')
    ctx = build_context(context_file=ctx_file, context_string="{'guest_os': 'UBUNTU', 'docker_env_vars': {'B': 'x'}}")
    assert ctx.gpu_vendor == "AMD"  # detected CPU overridden, normalised
    assert ctx.guest_os == "UBUNTU"  # the string wins over the file
    assert ctx.docker_env_vars == {"A": "1", "B": "x"}


def test_detected_values_without_overrides():
    ctx = build_context()
    assert ctx.gpu_vendor in ("CPU", "AMD", "NVIDIA") and ctx.guest_os == "UBUNTU" and "host_os" in ctx.values


@pytest.mark.parametrize("text, field", [
    ("{'gpu_vendor': 'INTEL'}", "gpu_vendor"),
    ("{'docker_env_vars': []}", "docker_env_vars"),
    ("{'docker_env_vars': {'1BAD': 'x'}}", "docker_env_vars"),
    ("{'tools': {}}", "tools"),
    ("{'timeout': 'soon'}", "timeout"),
])
def test_context_type_checks(text, field):
    with pytest.raises(ContextError) as info:
        build_context(context_string=text, detect=False)
    assert field in str(info.value)


def test_context_file_errors(tmp_path):
    with pytest.raises(ContextError, match="file not found"):
        build_context(context_file=tmp_path / "missing.json", detect=False)
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(ContextError, match="bad.json: malformed JSON at line 1"):
        build_context(context_file=bad, detect=False)


def test_context_header_filtering_rule():
    assert matches({"gpu_vendor": "AMD"}, {"gpu_vendor": "AMD", "x": 1})
    assert not matches({"gpu_vendor": "AMD"}, {"gpu_vendor": "NVIDIA"})
    assert matches({"only_in_file": "1"}, {"gpu_vendor": "AMD"})  # keys the context lacks are ignored
    assert not matches({"ctx_test": 1}, {"ctx_test": "1"})  # exact comparison


def test_select_dockerfiles_by_context():
    pick = lambda ctx: [d.path.name for d in select_dockerfiles(FIXTURE, "m", "docker/ctxtest", ctx)]
    assert pick({"ctx_test": "1"}) == ["ctxtest.any.Dockerfile", "ctxtest.ctx1.Dockerfile"]
    assert pick({"ctx_test": "2"}) == ["ctxtest.any.Dockerfile", "ctxtest.ctx2.Dockerfile"]
    assert pick({}) == ["ctxtest.any.Dockerfile", "ctxtest.ctx1.Dockerfile", "ctxtest.ctx2.Dockerfile"]


def test_no_dockerfile_left_is_an_error_naming_the_model(tmp_path):
    (tmp_path / "d.amd.Dockerfile").write_text("# CONTEXT {'gpu_vendor': 'AMD'}\nFROM x\n")
    with pytest.raises(ExecutionError, match="no Dockerfile of model 'mine' matches the context"):
        select_dockerfiles(tmp_path, "mine", "d", {"gpu_vendor": "CPU"})
    with pytest.raises(ExecutionError, match="no Dockerfile matches 'nothing.*'"):
        select_dockerfiles(tmp_path, "mine", "nothing", {})


def test_malformed_context_header(tmp_path):
    path = tmp_path / "d.x.Dockerfile"
    path.write_text("# CONTEXT {'gpu_vendor': \nFROM x\n")
    with pytest.raises(ConfigError, match="malformed '# CONTEXT' header"):
        read_context_header(path)

"""Context parsing and merging, and Dockerfile selection by # CONTEXT headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madengine.context import build_context, deep_merge, parse_context_string, select_dockerfiles
from madengine.context.dockerfiles import HeaderKeys, matches, read_context_header
from madengine.core.errors import ConfigError, ContextError, ExecutionError, InputError
from madengine.results import read_rows

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


@pytest.mark.parametrize("header", ["{'gpu_vendor': ", "['a', 'b']", "{'a': __import__('os').getpid()}",
                                    "gpu_vendor=AMD", "{1: 'x'}", "'{' * 200", "[" * 5000])
def test_a_header_that_is_not_a_dict_literal_names_the_dockerfile_and_line(tmp_path, header):
    path = tmp_path / "d.x.Dockerfile"
    path.write_text(f"# syntax=docker/dockerfile:1\n# CONTEXT {header}\nFROM x\n")
    with pytest.raises(ConfigError) as info:
        read_context_header(path)
    assert (info.value.path, info.value.field) == (str(path), "line 2")
    assert "'# CONTEXT' header" in str(info.value) and "\n" not in str(info.value)


# -- a catalog's own keys: those its Dockerfile headers name ----------------------------------------
def test_a_key_a_header_of_the_catalog_names_is_a_context_key(tmp_path):
    (tmp_path / "v.a.Dockerfile").write_text("# CONTEXT {'variant': 'a'}\nFROM x\n")
    (tmp_path / "v.b.Dockerfile").write_text("# CONTEXT {\"variant\": \"b\", \"flavour\": 1}\nFROM x\n")
    (tmp_path / "other.x.Dockerfile").write_text("# CONTEXT {'colour': 'red'}\nFROM x\n")
    (tmp_path / "broken.x.Dockerfile").write_text("# CONTEXT {'broken'\nFROM x\n")  # not selected: skipped
    keys = HeaderKeys(tmp_path, selected=["v"], catalog=["v", "other", "broken"])
    ctx = build_context(context_string="{'variant': 'b', 'flavour': 1, 'colour': 'red'}", detect=False,
                        catalog_keys=keys)
    assert ctx.get("variant") == "b" and not ctx.warnings()
    assert [d.path.name for d in select_dockerfiles(tmp_path, "m", "v", ctx.values)] == ["v.b.Dockerfile"]
    with pytest.raises(ContextError) as info:
        build_context(context_string="{'varient': 'b'}", detect=False, catalog_keys=keys)
    assert info.value.field == "varient" and "did you mean variant?" in str(info.value)
    with pytest.raises(ContextError, match="unknown context key"):  # another catalog does not know it
        build_context(context_string="{'variant': 'b'}", detect=False)


def test_a_malformed_header_of_a_selected_model_is_bad_input_before_anything_runs(tmp_path):
    (tmp_path / "v.a.Dockerfile").write_text("FROM x\n# CONTEXT ('variant', 'a')\n")
    with pytest.raises(ConfigError, match=r"v.a.Dockerfile: line 2: '# CONTEXT' header is not a dict literal"):
        HeaderKeys(tmp_path, selected=["v"])


def test_ctx_test_is_no_special_key_but_the_fixture_catalogs_own():
    with pytest.raises(ContextError, match="ctx_test: unknown context key"):
        build_context(context_string="{'ctx_test': '1'}", detect=False)
    keys = HeaderKeys(FIXTURE, selected=["docker/ctxtest"])
    assert build_context(context_string="{'ctx_test': '1'}", detect=False, catalog_keys=keys).get("ctx_test") == "1"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_header_text_is_a_dict_or_one_line_naming_the_dockerfile(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("h") / "d.x.Dockerfile"
    path.write_text("# CONTEXT " + text.replace("\n", " ").replace("\r", " ") + "\nFROM x\n", encoding="utf-8",
                    errors="replace")
    try:
        header = read_context_header(path)
    except ConfigError as exc:
        assert exc.path == str(path) and exc.field == "line 1" and "\n" not in str(exc)
    else:
        assert isinstance(header, dict) and all(isinstance(key, str) for key in header)


# -- known keys, free-form values, keys of the original madengine --------------------------------------
@pytest.mark.parametrize("text, key, hint", [
    ("{'docker_options': '--memory 64m'}", "docker_options", "additional_docker_run_options"),
    ("{'bogus_key': 1}", "bogus_key", "known keys: docs/catalog-and-context.md"),
    ("{'docker_env': {'A': 1}}", "docker_env", "did you mean docker_env_vars?"),
    ("{'GPU_VENDOR': 'AMD'}", "GPU_VENDOR", "did you mean gpu_vendor?"),
    ("{'extra': {}, 'gpu_vender': 'AMD'}", "gpu_vender", "did you mean gpu_vendor?"),
])
def test_an_unknown_key_is_refused_naming_it_and_the_key_meant(text, key, hint):
    with pytest.raises(ContextError) as info:
        build_context(context_string=text, detect=False)
    assert info.value.field == key and info.value.path == "--additional-context"
    assert hint in str(info.value) and "Free-form values go under 'extra'" in str(info.value)


def test_an_unknown_key_in_a_context_file_names_the_file(tmp_path):
    path = tmp_path / "ctx.json"
    path.write_text('{"docker_mount": {}}')
    with pytest.raises(ContextError, match=r"ctx.json: docker_mount: unknown context key \(did you mean docker_mounts"):
        build_context(context_file=path, detect=False)


#: every top-level key the original madengine's context accepted (madengine-facts §4.2 and §11)
ORIGINAL_KEYS = {
    "gpu_vendor": "AMD", "guest_os": "UBUNTU", "host_os": "HOST_UBUNTU", "numa_balancing": False,
    "docker_gpus": "0-3", "gpu_renderDs": [128], "docker_cpus": "0-7", "docker_env_vars": {"A": "1"},
    "docker_build_arg": {"B": "2"}, "docker_mounts": {"/c": "/h"}, "MAD_CONTAINER_IMAGE": "img:1",
    "model_args": "--x 1", "pre_scripts": [], "post_scripts": [], "encapsulate_script": "x", "tools": [],
    "data": {}, "gen_sys_env_details": False, "generate_sys_env_details": False, "rocenv_mode": "lite",
    "MAD_ROCM_PATH": "/opt/rocm", "log_error_pattern_scan": True, "log_error_benign_patterns": [],
    "log_error_patterns": [], "n_gpus": 1, "gpus_per_node": 8, "gpu_count": 1, "num_gpus": 1, "ngpus": 1,
    "slurm": {"partition": "p"}, "k8s": {"namespace": "n"}, "kubernetes": {"namespace": "n"},
    "distributed": {"launcher": "torchrun"}, "vllm": {}, "env_vars": {}, "debug": True, "deploy": "local",
    "deployment_config": {}, "shared_data": "/shared", "launcher": {"type": "torchrun"}, "monitor": True,
    "cleanup_on_failure": True, "skip_perf_collection": False, "timeout": 60, "SHM_SIZE": "8g",
    "multi_node_args": {"RUNNER": "torchrun"},
}


def test_every_key_the_original_madengine_accepted_stays_accepted():
    ctx = build_context(context_string=repr(ORIGINAL_KEYS), detect=False)
    assert set(ORIGINAL_KEYS) <= set(ctx.values)
    warned = {line.split("'")[1] for line in ctx.warnings()}
    # the keys that change nothing here say so; the ones madengine reads do not
    assert {"docker_cpus", "MAD_CONTAINER_IMAGE", "timeout", "SHM_SIZE"} <= warned
    assert not warned & {"gpu_vendor", "docker_gpus", "docker_env_vars", "n_gpus", "slurm", "data", "k8s",
                         "kubernetes"}


def test_blocks_owned_elsewhere_are_known_and_checked_only_as_dicts():
    ctx = build_context(context_string="{'k8s': {'x': {}}, 'slurm': {}}", detect=False)
    assert ctx.get("k8s") == {"x": {}}
    from madengine.context.keys import KEYS

    assert {"distributed", "k8s", "kubernetes", "slurm"} <= set(KEYS)


def test_the_distributed_block_is_checked_by_its_owner_where_the_context_is_read():
    ctx = build_context(context_string="{'distributed': {'launcher': 'Megatron', 'port': 29600}}", detect=False)
    assert ctx.distributed == {"launcher": "megatron-lm", "master_port": 29600} and ctx.warnings() == []
    with pytest.raises(InputError, match="distributed.anything: unknown key"):
        build_context(context_string="{'distributed': {'anything': [1]}}", detect=False)


def test_extra_values_pass_through_are_recorded_and_reach_dockerfile_headers():
    ctx = build_context(context_string="{'extra': {'team': 'perf', 'ctx_flavour': 'b', 'n': [1, {'x': None}]}}",
                        detect=False)
    assert ctx.summary()["extra"] == {"team": "perf", "ctx_flavour": "b", "n": [1, {"x": None}]}
    assert ctx.warnings() == []
    assert not matches({"ctx_flavour": "a"}, ctx.values) and matches({"ctx_flavour": "b"}, ctx.values)
    assert matches({"gpu_vendor": "AMD"}, {"gpu_vendor": "AMD", "extra": {"gpu_vendor": "NVIDIA"}})  # top level wins


@pytest.mark.parametrize("value, ids", [("0,2-4", [0, 2, 3, 4]), (" 1 , 1-2 ", [1, 2]), ("", []), (3, [3]),
                                        ("7-7", [7])])
def test_docker_gpus_is_read_when_the_context_is(value, ids):
    from madengine.context.context import parse_gpu_list

    ctx = build_context(context_string=repr({"docker_gpus": value}), detect=False)
    assert parse_gpu_list(ctx.get("docker_gpus")) == ids


@pytest.mark.parametrize("value", ["a-b", "4-2", "-1", "1-", "0-4096", "٣", "1.5", [0, 1], True, None])
def test_a_bad_docker_gpus_is_refused_naming_it(value):
    with pytest.raises(ContextError) as info:
        build_context(context_string=repr({"gpu_vendor": "AMD", "docker_gpus": value}), detect=False)
    assert info.value.field == "docker_gpus" and str(info.value).startswith("--additional-context: docker_gpus:")


def _variant_repo(root: Path) -> Path:
    """A catalog whose Dockerfiles select on its own key, ``variant`` (as MAD catalogs do)."""
    from conftest import BASE_IMAGE

    (root / "docker").mkdir(parents=True)
    for variant in ("a", "b"):
        (root / "docker" / f"variant.{variant}.Dockerfile").write_text(
            f"# CONTEXT {{'variant': '{variant}'}}\nARG BASE_DOCKER={BASE_IMAGE}\nFROM ${{BASE_DOCKER}}\n"
            f"ENV VARIANT={variant}\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "run.sh").write_text("#!/usr/bin/env bash\necho \"variant ${VARIANT:-none}\"\n"
                                             "echo 'performance: 1 x'\n")
    (root / "models.json").write_text(json.dumps([{"name": "ctxvariant", "dockerfile": "docker/variant",
                                                   "scripts": "scripts/run.sh", "tags": ["variant"]}]))
    return root


@pytest.mark.parametrize("executor", ["local", "docker"])
def test_a_run_with_a_key_of_its_catalog_selects_by_it(tmp_path, monkeypatch, cli, executor, request):
    """The issue's case: ``--additional-context "{'variant': 'b'}"`` was exit 2 "unknown context key";
    now it runs, and on docker only variant.b is built and run."""
    if executor == "docker":
        request.getfixturevalue("docker_cleanup").append("ci-ctxvariant")
    repo = _variant_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    result = cli("run", "--tags", "variant", "--executor", executor, "--additional-context", "{'variant': 'b'}",
                 "--no-html")
    assert result.code == 0, result
    [row] = read_rows(repo / "perf.csv")
    assert row["status"] == "SUCCESS"
    if executor == "docker":
        assert row["docker_file"] == "docker/variant.b.Dockerfile", row
        log = repo / "madengine_runs" / row["run_id"] / "ci-ctxvariant_variant.b" / "run.log"
        assert "variant b" in log.read_text()
    wrong = cli("run", "--tags", "variant", "--executor", executor, "--additional-context", "{'varient': 'b'}")
    assert wrong.code == 2 and "varient: unknown context key (did you mean variant?" in wrong.stderr, wrong


def test_a_malformed_header_of_a_selected_model_is_exit_2_naming_it(tmp_path, monkeypatch, cli):
    repo = _variant_repo(tmp_path / "repo")
    (repo / "docker" / "variant.b.Dockerfile").write_text("# CONTEXT {'variant': b}\nFROM x\n")
    monkeypatch.chdir(repo)
    result = cli("run", "--tags", "variant", "--executor", "local")
    assert result.code == 2 and not (repo / "perf.csv").exists(), result
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "variant.b.Dockerfile: line 1: '# CONTEXT' header is not a dict literal" in line, result

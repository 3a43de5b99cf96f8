"""tools.json loading/validation and how apply_tools rewrites a run (no execution here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madengine.catalog.schema import model_from_entry
from madengine.core.errors import ConfigError, ContextError
from madengine.core.spec import RunSpec, Step
from madengine.tools import BUNDLED_TOOLS_JSON, TOOLS_DIR, apply_tools, load_tools, select_tools, validate_tools
from madengine.tools.config import SUMMARIES

REPO = Path(__file__).resolve().parents[1]
FIXTURE_REPO = Path(__file__).resolve().parent / "fixtures" / "repo"
TEST_TOOLS = "scripts/tooltests/tools.json"


def make_spec(tmp_path: Path, cwd: str = "", timeout: int | None = 60) -> RunSpec:
    model = model_from_entry({"name": "m", "dockerfile": "docker/dummy", "scripts": "scripts/dummy/run.sh"},
                             source="test")
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    return RunSpec(key="m", model=model, workdir=workdir, log_path=tmp_path / "run.log", artifacts_dir=tmp_path,
                   env={"MAD_MODEL_NAME": "m"}, steps=[Step("model", ["bash", "run.sh", "--x"], cwd=cwd,
                                                            is_model=True)],
                   model_cwd=cwd, timeout=timeout)


def apply(tmp_path: Path, context: dict, *, tools_json: str | None = TEST_TOOLS, cwd: str = "",
          root: Path = FIXTURE_REPO) -> RunSpec:
    spec = make_spec(tmp_path, cwd)
    apply_tools(spec, context, str(root / tools_json) if tools_json else None, root)
    return spec


def test_root_tools_json_is_the_bundled_one():
    assert json.loads((REPO / "tools.json").read_text()) == json.loads(BUNDLED_TOOLS_JSON.read_text())


def test_bundled_tools_are_valid_and_their_files_exist():
    tools = load_tools(None, FIXTURE_REPO)
    expected = {"cpu_monitor", "gpu_info_power_profiler", "gpu_info_vram_profiler", "rocprof", "rocprofv3",
                "rocblas_trace", "hipblaslt_trace", "miopen_trace", "tensile_trace", "rccl_trace", "nsys", "ncu"}
    assert expected <= set(tools)
    for tool in tools.values():
        assert tool.summary in ("",) + SUMMARIES
        assert tool.description
        for ref in tool.pre_scripts + tool.post_scripts:
            assert any((base / ref.path).is_file() for base in tool.base_dirs), ref


def test_stacking_order_env_and_outputs(tmp_path):
    context = {"tools": [{"name": "tooltest_a"}, {"name": "tooltest_b", "env_vars": {"TOOLTEST_B": "ctx"}}],
               "pre_scripts": [{"path": "scripts/tooltests/marker.sh", "args": "ctx_pre"}],
               "post_scripts": [{"path": "scripts/tooltests/marker.sh", "args": ["ctx", "post"]}]}
    spec = apply(tmp_path, context)
    names = [step.name for step in spec.steps]
    assert names == ["pre-script tooltest_b: marker.sh", "pre-script tooltest_a: marker.sh",
                     "pre-script context: marker.sh", "model", "post-script context: marker.sh",
                     "post-script tooltest_a: marker.sh", "post-script tooltest_b: marker.sh"]
    marker = f"{TOOLS_DIR}/repo/scripts/tooltests/marker.sh"
    assert spec.steps[0].argv == ["bash", marker, "pre_B"]
    assert spec.steps[4].argv == ["bash", marker, "ctx", "post"]
    wrap = f"{TOOLS_DIR}/repo/scripts/tooltests/wrap.sh"
    model = spec.steps[3]
    assert model.argv == ["bash", wrap, "cmd_B", "bash", wrap, "cmd_A", "bash", "run.sh", "--x"]
    assert (spec.workdir / marker).is_file() and (spec.workdir / wrap).is_file()
    assert spec.env["TOOLTEST_A"] == "alpha" and spec.env["TOOLTEST_B"] == "ctx"
    assert spec.env["TOOLTEST_SHARED"] == "from_b"  # later tool wins
    assert spec.env["MAD_TOOLS_MAX_SECONDS"] == "360"
    assert spec.collect == ["markers.txt"]  # both tools name it: collected once


def test_context_cmd_override_and_shared_wrapper_runs_once(tmp_path):
    context = {"tools": [{"name": "rocblas_trace"}, {"name": "hipblaslt_trace"},
                         {"name": "tooltest_a", "cmd": "bash scripts/tooltests/wrap.sh override"}]}
    spec = apply(tmp_path, context)
    model = next(step for step in spec.steps if step.is_model)
    assert model.argv[:3] == ["bash", f"{TOOLS_DIR}/repo/scripts/tooltests/wrap.sh", "override"]
    assert model.argv.count("--") == 1  # one library_trace.py wrapper for both traces
    assert model.argv[3:6] == ["python3", f"{TOOLS_DIR}/madengine/tools/library_trace.py", "--"]
    assert spec.env["ROCBLAS_LAYER"] == "2" and spec.env["HIPBLASLT_LOG_MASK"] == "32"
    assert (spec.workdir / TOOLS_DIR / "madengine" / "tools" / "gpu_sampler.py").is_file()  # its whole folder


def test_paths_are_relative_to_the_model_folder(tmp_path):
    spec = apply(tmp_path, {"tools": ["cpu_monitor", "gpu_info_power_profiler"]}, tools_json=None, cwd="clone")
    model = next(step for step in spec.steps if step.is_model)
    assert model.argv[:3] == ["python3", f"../{TOOLS_DIR}/madengine/tools/cpu_monitor.py", "--"]
    assert all(step.cwd == "clone" for step in spec.steps)
    assert spec.steps[0].argv == ["bash", f"../{TOOLS_DIR}/madengine/tools/gpu_profiler_start.sh", "power"]
    assert "clone/cpu_monitor.csv" in spec.collect and "clone/gpu_info_power_profiler_output.csv" in spec.collect


def test_finalizers_and_tools_column(tmp_path):
    spec = apply(tmp_path, {"tools": [{"name": "cpu_monitor"}, {"name": "tooltest_a"}]})
    produced = {}
    for finalize in spec.finalizers:
        produced.update(finalize(spec))
    assert produced["tools"] == "cpu_monitor,tooltest_a"
    assert set(produced) >= {"cpu_util_mean", "cpu_util_peak", "rss_peak_mb", "cpu_freq_mean_mhz"}


def test_repository_tools_json_is_found_and_overlays_bundled(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "pre.sh").write_text("echo pre\n")
    (root / "tools.json").write_text(json.dumps({"tools": {
        "cpu_monitor": {"pre_scripts": [{"path": "scripts/pre.sh"}]},
        "mine": {"cmd": "bash tools/profile_wrapper.sh nsys --"}}}))
    tools = load_tools(None, root)
    assert tools["cpu_monitor"].cmd == "" and tools["mine"].cmd  # the repository's definition wins
    assert "rocprof" in tools  # bundled ones stay available
    spec = apply(tmp_path / "run", {"tools": ["mine"]}, tools_json=None, root=root)
    model = next(step for step in spec.steps if step.is_model)
    assert model.argv[1] == f"{TOOLS_DIR}/madengine/tools/profile_wrapper.sh"  # falls back to bundled files


@pytest.mark.parametrize("document, field", [
    ("{\"tools\": {", None),
    ('{"tool": {}}', "tools"),
    ('{"tools": {"x": {"pre_script": []}}}', "tools.x"),
    ('{"tools": {"x": {"env_vars": {"BAD NAME": "1"}}}}', "tools.x.env_vars"),
    ('{"tools": {"x": {"pre_scripts": [{"args": "1"}]}}}', "tools.x.pre_scripts[0]"),
    ('{"tools": {"x": {"summary": "nope"}}}', "tools.x.summary"),
    ('{"tools": {"x": {"cmd": "bash \\"unclosed"}}}', "tools.x.cmd"),
])
def test_malformed_tools_json(tmp_path, document, field):
    path = tmp_path / "tools.json"
    path.write_text(document)
    with pytest.raises(ConfigError) as raised:
        load_tools(str(path), tmp_path)
    assert raised.value.path == str(path)
    assert raised.value.field == field
    if field is None:
        assert "line 1" in str(raised.value)


def test_missing_tools_json_flag_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_tools(str(tmp_path / "nope.json"), tmp_path)


def test_unknown_tool_names_file_field_and_suggestion():
    with pytest.raises(ConfigError) as raised:
        validate_tools({"tools": [{"name": "cpu_monitr"}]}, None, FIXTURE_REPO)
    error = raised.value
    assert error.path == str(BUNDLED_TOOLS_JSON) and error.field == "context tools[0].name"
    assert "unknown tool 'cpu_monitr'" in str(error) and "cpu_monitor" in error.hint


@pytest.mark.parametrize("context, field", [
    ({"tools": [{"nme": "cpu_monitor"}]}, "tools[0]"),
    ({"tools": [{"name": "cpu_monitor", "pre_scripts": []}]}, "tools[0]"),
    ({"tools": ["cpu_monitor", "cpu_monitor"]}, "tools"),
    ({"tools": [{"name": "cpu_monitor", "env_vars": ["A"]}]}, "tools[0].env_vars"),
    ({"pre_scripts": [{"path": "x.sh", "when": "always"}]}, "pre_scripts[0]"),
])
def test_bad_context_entries(context, field):
    with pytest.raises(ContextError) as raised:
        select_tools(context, None, FIXTURE_REPO)
    assert raised.value.field == field


def test_missing_script_is_reported_with_its_field(tmp_path):
    with pytest.raises(ContextError) as raised:
        apply(tmp_path, {"pre_scripts": [{"path": "scripts/tooltests/nope.sh"}]})
    assert raised.value.field == "pre_scripts[0].path" and "not found" in str(raised.value)


def test_paths_outside_the_repository_are_not_staged(tmp_path):
    outside = "../tools_outputs/rocm_smi_mi300x.json"  # exists, next to the fixture repository
    assert (FIXTURE_REPO / outside).is_file()
    with pytest.raises(ContextError):
        apply(tmp_path, {"pre_scripts": [{"path": outside}]})
    spec = apply(tmp_path, {"tools": [{"name": "tooltest_a", "cmd": f"cat {outside} ../tools/tools.json"}]})
    model = next(step for step in spec.steps if step.is_model)
    assert model.argv[:3] == ["cat", outside, "../tools/tools.json"]  # left as written, nothing copied
    assert not list((spec.workdir / TOOLS_DIR).rglob("rocm_smi_mi300x.json"))
    assert not (spec.workdir / TOOLS_DIR / "madengine" / "tools" / "tools.json").exists()


def test_no_tools_changes_nothing(tmp_path):
    spec = apply(tmp_path, {"tools": []})
    assert [s.name for s in spec.steps] == ["model"] and spec.finalizers == [] and spec.collect == []

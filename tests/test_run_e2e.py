"""End-to-end `madengine run` through the CLI, against a real Docker engine and with the local
executor (the same tests run for both where the behaviour is the same)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, run_process, terminal_signals
from madengine.results import read_rows

pytestmark = pytest.mark.slow

IMAGE_PREFIXES = ["ci-dummy", "ci-sub_", "ci-dyn_", "ci-cloned"]


@pytest.fixture(params=["docker", "local"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").extend(IMAGE_PREFIXES)
    return request.param


@pytest.fixture
def docker_only(docker_client, docker_cleanup):
    docker_cleanup.extend(IMAGE_PREFIXES)
    return docker_client


def rows_by_model(repo: Path, name: str = "perf.csv") -> dict[str, dict[str, str]]:
    return {r["model"]: r for r in read_rows(repo / name)}


def test_success_rows_carry_results_and_provenance(model_repo, cli, executor):
    result = cli("run", "--tags", "dummy,dummy_py,dummy_dir,sub/model1,dyn/model3", "--executor", executor, "--json")
    assert result.code == 0, result
    rows = rows_by_model(model_repo)
    assert set(rows) == {"dummy", "dummy_py", "dummy_dir", "sub/model1", "dyn/model3"}
    assert all(r["status"] == "SUCCESS" for r in rows.values())
    assert rows["dummy"]["performance"] == "42.5" and rows["dummy"]["metric"] == "samples_per_second"  # last line
    assert rows["dummy_py"]["performance"] == "12.5" and rows["dyn/model3"]["performance"] == "77.0"
    dummy = rows["dummy"]
    for column in ("run_id", "machine_name", "madengine_version", "command_line", "context", "gpu_architecture",
                   "started_at", "test_duration", "artifacts"):
        assert dummy[column], column
    assert json.loads(dummy["context"])["gpu_vendor"] == "CPU"
    assert dummy["executor"] == executor and dummy["tags"] == "dummies,pass"
    if executor == "docker":
        assert dummy["docker_image"] == "ci-dummy_dummy" and dummy["image_id"].startswith("sha256:")
        assert dummy["docker_file"] == "docker/dummy.Dockerfile" and dummy["base_docker"] == "madengine-base:bookworm"
        assert dummy["docker_sha"] and dummy["build_duration"]
        assert rows["sub/model1"]["docker_image"] == "ci-sub_model1_dummy"
    summary = json.loads(result.stdout)
    assert summary["counts"] == {"SUCCESS": 5, "FAILURE": 0, "SKIPPED": 0}
    log = Path(dummy["artifacts"].split(",")[0])
    assert log.is_file() and "dummy model dummy on CPU" in log.read_text()
    assert (model_repo / "perf.html").is_file() or "perf.html not written" in result.stderr


def test_failures_are_rows_with_reasons_and_exit_1(model_repo, cli, executor):
    result = cli("run", "--tags", "failing", "dummy", "--executor", executor)
    assert result.code == 1, result
    rows = rows_by_model(model_repo)
    assert rows["dummy"]["status"] == "SUCCESS"
    assert rows["dummy_fail"]["status"] == "FAILURE" and "exited with code 3" in rows["dummy_fail"]["reason"]
    assert rows["dummy_fail"]["performance"] == ""  # a figure printed before failing is not a success
    assert rows["dummy_noperf"]["status"] == "FAILURE" and "no performance figure" in rows["dummy_noperf"]["reason"]
    assert "FAILURE" in result.stderr and "dummy_noperf" in result.stderr  # summary table on stderr


def _assert_no_container_left(docker_client, prefix: str) -> None:
    assert not [c.name for c in docker_client.containers.list(all=True) if c.name.startswith(prefix)]


def test_model_timeout_and_flag_timeout(model_repo, cli, executor, request):
    result = cli("run", "--tags", "dummy_sleep", "--executor", executor)
    assert result.code == 1, result
    row = rows_by_model(model_repo)["dummy_sleep"]
    assert row["status"] == "FAILURE" and "longer than 3 s" in row["reason"]
    # enforced: the model (a 30 s sleep) was stopped, not waited for, however slow the host (a build
    # and a loaded machine may take long, the model's step stays far under its sleep)
    log = Path(next(a for a in row["artifacts"].split(",") if a.endswith("run.log"))).read_text()
    assert "sleeping 30 s" in log and "performance: 1 sleeps" not in log and float(row["test_duration"]) < 30
    result = cli("run", "--tags", "dummy_sleep", "--timeout", "1", "--executor", executor, "-o", "flag.csv")
    row = rows_by_model(model_repo, "flag.csv")["dummy_sleep"]
    assert result.code == 1 and "longer than 1 s" in row["reason"]
    if executor == "docker":
        _assert_no_container_left(request.getfixturevalue("docker_client"), "container_ci-dummy_sleep")


def test_multiple_results(model_repo, cli, executor):
    result = cli("run", "--tags", "dummy_multi", "--executor", executor)
    rows = rows_by_model(model_repo)
    assert rows["dummy_multi_a"]["performance"] == "10.5" and rows["dummy_multi_a"]["status"] == "SUCCESS"
    assert rows["dummy_multi_b"]["metric"] == "tokens/s" and rows["dummy_multi_b"]["temperature"] == "0.2"
    assert rows["dummy_multi_c"]["status"] == "FAILURE"  # a row without a number
    assert result.code == 1


def test_tag_configs_reach_args_env_and_build_args(model_repo, cli, executor):
    context = "{'docker_build_arg': {'FROM_CONTEXT': 'yes'}, 'docker_env_vars': {'CTX_ENV': 'on'}}"
    result = cli("run", "--tags", "dummy_args:batch-size=16", "--executor", executor,
                 "--additional-context", context, "--live-output")
    assert result.code == 0, result
    assert "ARGS: --base 1 --batch-size 16" in result.stderr
    assert "ENV_BATCH_SIZE=16 MAD_MODEL_BATCH_SIZE=16 CTX_ENV=on" in result.stderr
    if executor == "docker":
        assert "BATCH_SIZE=16 FROM_CONTEXT=yes" in result.stderr
    assert rows_by_model(model_repo)["dummy_args"]["args"] == "--base 1 --batch-size 16"


def test_live_output_off_keeps_output_in_log_only(model_repo, cli, executor):
    quiet = cli("run", "--tags", "dummy", "--executor", executor)
    assert "dummy model dummy" not in quiet.stderr
    log = Path(rows_by_model(model_repo)["dummy"]["artifacts"].split(",")[0])
    assert "dummy model dummy" in log.read_text()
    loud = cli("run", "--tags", "dummy", "--executor", executor, "--live-output")
    assert "dummy model dummy" in loud.stderr


def test_skip_gpu_arch_and_disable(model_repo, cli, executor):
    result = cli("run", "--tags", "skiparch", "--executor", executor)
    row = rows_by_model(model_repo)["dummy_skiparch"]
    assert result.code == 0 and row["status"] == "SKIPPED" and "skip_gpu_arch" in row["reason"]
    result = cli("run", "--tags", "skiparch", "--executor", executor, "--disable-skip-gpu-arch", "-o", "b.csv")
    assert result.code == 0 and rows_by_model(model_repo, "b.csv")["dummy_skiparch"]["status"] == "SUCCESS"


def test_keep_model_dir(model_repo, cli, executor):
    cli("run", "--tags", "dummy", "--executor", executor, "--keep-model-dir")
    run_dirs = list((model_repo / "madengine_runs").iterdir())
    assert len(run_dirs) == 1 and list(run_dirs[0].glob("*/work/run.sh"))
    cli("run", "--tags", "dummy", "--executor", executor)
    latest = max((model_repo / "madengine_runs").iterdir(), key=lambda p: p.stat().st_mtime)
    assert not list(latest.glob("*/work"))


def test_sys_env_details(model_repo, cli, executor):
    result = cli("run", "--tags", "dummy", "--executor", executor, "--generate-sys-env-details")
    assert result.code == 0, result
    artifacts = rows_by_model(model_repo)["dummy"]["artifacts"]
    assert "sys_env_details.txt" in artifacts
    folder = Path(artifacts.split(",")[0]).parent
    assert "== uname" in (folder / "sys_env_details.txt").read_text()
    assert (folder / "host_env_details.txt").is_file()


def test_url_is_cloned_and_commit_recorded(model_repo, cli, executor, tmp_path):
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "README").write_text("model code\n")
    git = ["git", "-C", str(upstream), "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    models = json.loads((model_repo / "models.json").read_text())
    models.append({"name": "cloned", "dockerfile": "docker/dummy", "scripts": "scripts/dummy/run.sh",
                   "url": upstream.as_uri(), "tags": ["cloned"]})
    (model_repo / "models.json").write_text(json.dumps(models))
    result = cli("run", "--tags", "cloned", "--executor", executor, "--keep-model-dir")
    assert result.code == 0, result
    row = rows_by_model(model_repo)["cloned"]
    assert row["git_commit"] == head
    assert list((model_repo / "madengine_runs").glob("*/*/work/upstream/README"))


def test_url_model_clones_first_then_finds_its_script_in_the_clone(model_repo, cli, executor, tmp_path):
    """A url model whose script is not in the model repository finds it in its clone (run from the
    clone's root); a script in neither place is a FAILURE row naming both paths, after the clone."""
    from test_data_servers import make_bare_repo

    bare = make_bare_repo(tmp_path / "git", {"run.sh": "echo 'performance: 11 clone_runs'\n",
                                             "go.sh": "echo \"performance: $1 sub_runs\"\n"})
    models = json.loads((model_repo / "models.json").read_text())
    common = {"dockerfile": "docker/dummy", "url": bare.as_uri()}
    models += [{"name": "in_clone", "scripts": "run.sh", "tags": ["clonefirst"], **common},
               {"name": "in_clone_args", "scripts": "go.sh", "args": "12", "tags": ["clonefirst"], **common},
               {"name": "in_neither", "scripts": "scripts/none/run.sh", "tags": ["clonefirst"], **common}]
    (model_repo / "models.json").write_text(json.dumps(models))
    result = cli("run", "--tags", "clonefirst", "--executor", executor)
    assert result.code == 1, result
    rows = rows_by_model(model_repo)
    assert (rows["in_clone"]["status"], rows["in_clone"]["performance"]) == ("SUCCESS", "11"), rows["in_clone"]
    assert (rows["in_clone_args"]["status"], rows["in_clone_args"]["performance"]) == ("SUCCESS", "12")
    failed = rows["in_neither"]
    assert failed["status"] == "FAILURE" and len(failed["git_commit"]) == 40  # cloned before looking
    assert failed["reason"] == (f"model 'in_neither': script scripts/none/run.sh not found in the model repository "
                                f"(looked for {model_repo / 'scripts/none/run.sh'}) nor in its clone of "
                                f"{bare.as_uri()} (looked for scripts/none/run.sh in the clone models/)")


# -- docker only ------------------------------------------------------------------------------

def test_context_filtering_runs_every_matching_dockerfile(model_repo, cli, docker_only):
    result = cli("run", "--tags", "ctx", "--additional-context", "{'ctx_test': '1'}")
    assert result.code == 0, result
    rows = read_rows(model_repo / "perf.csv")
    assert sorted((r["docker_image"], r["metric"]) for r in rows) == [
        ("ci-dummy_ctxtest_ctxtest.any", "ctx_any"), ("ci-dummy_ctxtest_ctxtest.ctx1", "ctx_ctx1")]


def test_failed_build_and_missing_dockerfile_are_failure_rows(model_repo, cli, docker_only):
    result = cli("run", "--tags", "badbuild", "nodockerfile")
    assert result.code == 1
    rows = rows_by_model(model_repo)
    assert rows["dummy_badbuild"]["status"] == "FAILURE" and "build of ci-dummy_badbuild_badbuild failed" in rows["dummy_badbuild"]["reason"]
    assert rows["dummy_nodockerfile"]["status"] == "FAILURE" and "no Dockerfile matches" in rows["dummy_nodockerfile"]["reason"]


def test_skip_model_run_builds_only(model_repo, cli, docker_only):
    result = cli("run", "--tags", "dummy", "--skip-model-run")
    row = rows_by_model(model_repo)["dummy"]
    assert result.code == 0 and row["status"] == "SKIPPED" and row["image_id"].startswith("sha256:")
    docker_only.images.get("ci-dummy_dummy")


def test_keep_alive_leaves_the_container(model_repo, cli, docker_only):
    result = cli("run", "--tags", "dummy", "--keep-alive")
    assert result.code == 0
    run_id = rows_by_model(model_repo)["dummy"]["run_id"]
    container = docker_only.containers.get(f"container_ci-dummy_dummy_{run_id[-6:]}")
    assert container.status == "running"
    container.remove(force=True)


def test_additional_docker_run_options(model_repo, cli, docker_only):
    result = cli("run", "--tags", "opts", "--live-output")
    assert result.code == 0, result
    assert "EXTRA_OPT=yes shm_kb=262144" in result.stderr


def test_unsupported_docker_option_is_a_failure_row(model_repo, cli, docker_only):
    models = json.loads((model_repo / "models.json").read_text())
    for model in models:
        if model["name"] == "dummy_opts":
            model["additional_docker_run_options"] = "--mount type=bind,src=/,dst=/host"
    (model_repo / "models.json").write_text(json.dumps(models))
    result = cli("run", "--tags", "opts")
    row = rows_by_model(model_repo)["dummy_opts"]
    assert result.code == 1 and "unsupported option '--mount'" in row["reason"]


# -- processes: signals and concurrency ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["docker", "local"])
def test_ctrl_c_records_failure_keeps_rows_and_leaves_no_container(model_repo, mode, request):
    if mode == "docker":
        request.getfixturevalue("docker_client")
        request.getfixturevalue("docker_cleanup").extend(IMAGE_PREFIXES)
    proc = subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", "dummy", "dummy_sleep",
                             "--timeout", "0", "--executor", mode, "--live-output"], cwd=model_repo,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals)
    seen = []

    def watch():
        for line in proc.stderr:
            seen.append(line)

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("sleeping 30 s" in line for line in seen):  # the model script's own line: it sleeps now
        assert proc.poll() is None and time.monotonic() < deadline, "".join(seen)
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    reader.join(timeout=5)
    rows = rows_by_model(model_repo)
    assert rows["dummy"]["status"] == "SUCCESS"
    assert rows["dummy_sleep"]["status"] == "FAILURE" and "interrupted" in rows["dummy_sleep"]["reason"]
    if mode == "docker":
        _assert_no_container_left(request.getfixturevalue("docker_client"), "container_ci-dummy_sleep")
    else:
        ps = subprocess.run(["pgrep", "-f", "sleep.sh --seconds 30"], capture_output=True)
        assert ps.returncode == 1  # no model process left


def test_two_concurrent_runs_append_to_one_perf_csv(model_repo, docker_client, docker_cleanup):
    docker_cleanup.extend(IMAGE_PREFIXES)
    procs = [subprocess.Popen([sys.executable, "-m", "madengine", "run", "--tags", tags, "-o", "shared.csv",
                               "--no-html"], cwd=model_repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for tags in ("dummy,dummy_py,dummy_multi", "sub/all,dyn/model3,dummy_dir")]
    codes = [p.wait(timeout=300) for p in procs]
    rows = read_rows(model_repo / "shared.csv")
    models = sorted(r["model"] for r in rows)
    assert models == sorted(["dummy", "dummy_py", "dummy_multi_a", "dummy_multi_b", "dummy_multi_c",
                             "sub/model1", "sub/model2", "dyn/model3", "dummy_dir"])
    assert codes == [1, 0]
    assert len({r["run_id"] for r in rows}) == 2


def _build_log(repo: Path, model: str) -> str:
    row = rows_by_model(repo)[model]
    return Path(next(a for a in row["artifacts"].split(",") if a.endswith("build.log"))).read_text()


def test_unchanged_build_inputs_skip_the_build_and_a_changed_context_file_rebuilds(model_repo, cli, docker_only):
    assert cli("run", "--tags", "argtest").code == 0
    first_id = rows_by_model(model_repo)["dummy_args"]["image_id"]
    again = cli("run", "--tags", "argtest", "--live-output")
    assert again.code == 0 and "Step " not in again.stderr  # no build call at all
    assert "is up to date" in _build_log(model_repo, "dummy_args")
    assert rows_by_model(model_repo)["dummy_args"]["image_id"] == first_id
    # unique content: an image built from these inputs earlier would rightly be reused
    (model_repo / "docker" / "extra.txt").write_text(f"a file the image could COPY {uuid.uuid4()}\n")
    changed = cli("run", "--tags", "argtest", "--live-output")
    assert changed.code == 0 and "Using cache" in changed.stderr  # built again (its layers still cached)
    assert "is up to date" not in _build_log(model_repo, "dummy_args")
    forced = cli("run", "--tags", "argtest", "--live-output", "--rebuild")
    assert forced.code == 0 and "Using cache" in forced.stderr
    fresh = cli("run", "--tags", "argtest", "--live-output", "--clean-docker-cache")
    assert fresh.code == 0 and "Using cache" not in fresh.stderr


def test_an_image_of_that_name_built_elsewhere_is_rebuilt(model_repo, cli, docker_only):
    """An image named ci-* that madengine did not build (no build-inputs label) is never trusted."""
    docker_only.images.get(BASE_IMAGE).tag("ci-dummy_args_args")
    run = cli("run", "--tags", "argtest", "--live-output")
    assert run.code == 0 and "Step " in run.stderr
    assert rows_by_model(model_repo)["dummy_args"]["image_id"] != docker_only.images.get(BASE_IMAGE).id


def test_command_line_is_recorded_exactly(model_repo, cli, executor):
    cli("run", "--tags", "dummy", "--executor", executor, "--timeout", "60")
    assert rows_by_model(model_repo)["dummy"]["command_line"] == f"madengine run --tags dummy --executor {executor} --timeout 60"


def test_auto_executor_falls_back_to_local_and_says_so(model_repo, tmp_path):
    done = run_process("run", "--tags", "dummy", "--no-html", cwd=model_repo,
                       env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 0, done.stderr
    assert "no Docker engine answers; running models with the local executor" in done.stderr
    assert rows_by_model(model_repo)["dummy"]["executor"] == "local"


def test_docker_executor_without_engine_is_a_clear_error(model_repo, tmp_path):
    done = run_process("run", "--tags", "dummy", "--executor", "docker", cwd=model_repo,
                       env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 2 and "no Docker engine answers" in done.stderr and "Traceback" not in done.stderr


def test_identical_builds_are_done_once_per_run(model_repo, cli, docker_only):
    result = cli("run", "--tags", "dummy,dummy_py,badbuild", "dummy_badbuild")
    rows = rows_by_model(model_repo)
    assert rows["dummy"]["image_id"] == rows["dummy_py"]["image_id"]
    assert rows["dummy_py"]["docker_image"] == "ci-dummy_py_dummy"
    docker_only.images.get("ci-dummy_py_dummy")  # the second name exists as a real tag
    second_log = Path(rows["dummy_py"]["artifacts"].split(",")[-1])
    assert second_log.name == "build.log" and "tagged its image" in second_log.read_text()
    assert result.code == 1 and rows["dummy_badbuild"]["status"] == "FAILURE"


def test_a_script_at_the_repository_root_runs_without_copying_its_runs_folder(tmp_path, monkeypatch, cli):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "run.sh").write_text("#!/usr/bin/env bash\nls\necho 'performance: 1 x'\n")
    (repo / "models.json").write_text(json.dumps([{"name": "rooted", "dockerfile": "docker/none",
                                                   "scripts": "run.sh", "tags": ["r"]}]))
    monkeypatch.chdir(repo)
    for _ in range(2):  # the second run finds a runs folder from the first in the root
        assert cli("run", "--tags", "r", "--executor", "local", "--keep-model-dir", "--no-html").code == 0
    work = sorted(repo.glob("madengine_runs/*/rooted/work"))[-1]
    assert (work / "run.sh").is_file() and not (work / "madengine_runs").exists()


def test_an_unbounded_timeout_is_refused(model_repo, cli):
    result = cli("run", "--tags", "dummy", "--timeout", "99999999999999")
    assert result.code == 2 and "--timeout" in result.stderr


def test_the_injected_environment_names_the_docker_engine(model_repo, cli, tmp_path):
    """DOCKER_HOST comes from the command's environment, not the process's (in-process runs)."""
    result = cli("run", "--tags", "dummy", "--executor", "docker",
                 environ={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert result.code == 2 and "no Docker engine answers" in result.stderr, result
    built = cli("build", "--tags", "dummy", environ={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert built.code == 2 and "no Docker engine answers" in built.stderr, built

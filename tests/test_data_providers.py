"""Data providers end to end through ``madengine run --executor local``, against real servers:
a moto S3 server (aws and minio providers) and an OpenSSH server (nas provider).

The model (tests/fixtures/repo/scripts/datatests/check_data.sh) lists what it finds at
``MAD_DATAHOME`` with md5 sums, so each test sees exactly what was delivered.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from madengine.results import read_rows
from test_data_servers import install_datatests, s3_server, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.sshd]

FILES = {"train/a.txt": b"alpha\n", "train/b.txt": b"bravo bravo\n", "labels.csv": b"id,label\n1,x\n"}


@pytest.fixture
def repo(model_repo, monkeypatch):
    install_datatests(model_repo)
    for name in ("MAD_AWS_S3", "MAD_MINIO", "NAS_NODES", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    return model_repo


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1))


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def run_rows(cli, repo: Path, *argv: str):
    result = cli("run", "--executor", "local", *argv)
    rows = read_rows(repo / "perf.csv") if (repo / "perf.csv").is_file() else []
    return result, rows


def model_log(row: dict) -> str:
    return Path(row["artifacts"].split(",")[0]).read_text()


def seen_files(log: str, dataname: str) -> dict[str, str]:
    """{relative path: md5} the model printed for one data set."""
    out = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == dataname:
            out[parts[2].removeprefix("./")] = parts[1]
    return out


@pytest.fixture
def bucket(s3_server, request):
    name = "dt-" + hashlib.sha1(request.node.name.encode()).hexdigest()[:12]
    s3_server.put_tree(name, {f"sets/one/{k}": v for k, v in FILES.items()})
    return name


# -- local -----------------------------------------------------------------------------------------
def test_local_folder_is_used_in_place_and_recorded(repo, cli, tmp_path):
    data = tmp_path / "local data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "x.bin").write_bytes(b"x" * 10)
    write_json(repo / "data.json", {"dt_local": {"local": {"path": str(data)}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_local")
    assert result.code == 0, result
    row = rows[-1]
    assert (row["status"], row["performance"]) == ("SUCCESS", "1")
    assert (row["dataname"], row["data_provider_type"], row["data_download_duration"]) == ("dt_local", "local", "")
    log = model_log(row)
    assert f"MAD_DATAHOME={data}" in log  # the host folder itself: no copy
    assert seen_files(log, "dt_local") == {"sub/x.bin": md5(b"x" * 10)}


def test_relative_local_path_and_context_data_override_the_file(repo, cli):
    (repo / "mydata").mkdir()
    (repo / "mydata" / "f.txt").write_text("from context\n")
    write_json(repo / "data.json", {"dt_local": {"local": {"path": "/nonexistent/madengine"}}})
    context = json.dumps({"data": {"dt_local": {"local": {"path": "mydata"}}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_local", "--additional-context", context)
    assert result.code == 0, result
    assert f"MAD_DATAHOME={(repo / 'mydata').resolve()}" in model_log(rows[-1])


def test_missing_source_is_a_failure_row_and_the_model_does_not_run(repo, cli):
    write_json(repo / "data.json", {"dt_missing": {"local": {"path": "/nonexistent/madengine-data"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_missing")
    assert result.code == 1, result
    row = rows[-1]
    assert row["status"] == "FAILURE"
    assert row["reason"].startswith("data not available: 'dt_missing': local: /nonexistent/madengine-data")
    assert "MAD_DATAHOME" not in model_log(row)  # the script never started


def test_undefined_data_name_is_a_one_line_error_naming_data_json(repo, cli):
    write_json(repo / "data.json", {"dt_local": {"local": {"path": "/tmp"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_undefined")
    assert result.code == 2, result
    assert rows == []
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("madengine: error: data.json: data 'dt_undefined' is not defined")
    assert "datatests/undefined" in lines[-1] and "Traceback" not in result.stderr


@pytest.mark.parametrize("content, message", [
    ("{not json", "data.json: malformed JSON at line 1"),
    ('{"dt_local": {"ftp": {"path": "/x"}}}', "data.json: dt_local.ftp: unknown provider type 'ftp'"),
    ('{"dt_local": {"local": {"path": "/x", "mirrorlocal": "/m"}}}', "data.json: dt_local.local.mirrorlocal:"),
    ('{"dt_local": {"local": {"path": "/x", "readwrite": "maybe"}}}', "data.json: dt_local.local.readwrite:"),
])
def test_malformed_data_json_is_a_one_line_error(repo, cli, content, message):
    (repo / "data.json").write_text(content)
    result, _rows = run_rows(cli, repo, "--tags", "dt_local")
    assert result.code == 2, result
    assert result.stderr.strip().splitlines()[-1].startswith(f"madengine: error: {message}")


# -- S3 and MinIO ----------------------------------------------------------------------------------
def test_aws_downloads_then_a_mirror_is_reused_and_changes_are_fetched(repo, cli, s3_server, bucket, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDTEST", "PASSWORD": "s3-secret-value",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint, "REGION": "eu-west-3"}))
    mirror = tmp_path / "mirror"
    write_json(repo / "data.json", {"dt_aws": {"aws": {"path": f"s3://{bucket}/sets/one", "mirrorlocal": str(mirror)}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_aws")
    assert result.code == 0, result
    first = rows[-1]
    assert (first["status"], first["performance"]) == ("SUCCESS", "3")
    assert (first["dataname"], first["data_provider_type"]) == ("dt_aws", "aws")
    assert first["data_size"] and float(first["data_download_duration"]) >= 0
    assert "3 file(s) downloaded" in result.stderr
    assert seen_files(model_log(first), "dt_aws") == {k: md5(v) for k, v in FILES.items()}
    assert (mirror / "dt_aws" / "train" / "a.txt").read_bytes() == b"alpha\n"

    result, rows = run_rows(cli, repo, "--tags", "dt_aws")  # second run: nothing to download
    assert result.code == 0, result
    assert "0 file(s) downloaded (0B), 3 unchanged" in result.stderr
    assert "aws: s3://" not in model_log(rows[-1])  # no per-object download line

    s3_server.put_tree(bucket, {"sets/one/train/b.txt": b"changed\n"})  # same key, new content
    result, rows = run_rows(cli, repo, "--tags", "dt_aws")
    assert "1 file(s) downloaded (8B), 2 unchanged" in result.stderr
    assert seen_files(model_log(rows[-1]), "dt_aws")["train/b.txt"] == md5(b"changed\n")


def test_force_mirror_local_applies_to_aws_and_keeps_the_copy(repo, cli, s3_server, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDTEST", "PASSWORD": "s3-secret-value",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint}))
    write_json(repo / "data.json", {"dt_aws": {"aws": {"path": f"s3://{bucket}/sets/one/labels.csv"}}})
    forced = tmp_path / "forced"
    result, rows = run_rows(cli, repo, "--tags", "dt_aws", "--force-mirror-local", str(forced))
    assert result.code == 0, result
    assert (forced / "dt_aws" / "labels.csv").read_bytes() == FILES["labels.csv"]  # a single object
    assert f"MAD_DATAHOME={forced / 'dt_aws'}" in model_log(rows[-1])
    result, _rows = run_rows(cli, repo, "--tags", "dt_aws", "--force-mirror-local", str(forced))
    assert "0 file(s) downloaded (0B), 1 unchanged" in result.stderr


def test_without_mirror_the_download_goes_away_with_the_work_folder(repo, cli, s3_server, bucket, monkeypatch):
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDTEST", "PASSWORD": "s3-secret-value",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint}))
    write_json(repo / "data.json", {"dt_aws": {"aws": {"path": f"s3://{bucket}/sets/one/"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_aws")
    assert result.code == 0, result
    home = model_log(rows[-1]).split("MAD_DATAHOME=")[1].split()[0]
    assert "/.madengine_data/dt_aws" in home and not Path(home).exists()


def test_minio_endpoint_comes_from_mad_minio(repo, cli, s3_server, bucket, monkeypatch):
    write_json(repo / "credential.json", {"MAD_MINIO": {"USERNAME": "minio", "PASSWORD": "minio-secret",
                                                        "MINIO_ENDPOINT": s3_server.endpoint}})
    write_json(repo / "data.json", {"dt_minio": {"minio": {"path": f"{bucket}/sets/one"},
                                                 "aws": {"path": "s3://never-asked/x"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_minio")
    assert result.code == 0, result
    assert rows[-1]["data_provider_type"] == "minio"  # minio is tried before aws
    assert seen_files(model_log(rows[-1]), "dt_minio") == {k: md5(v) for k, v in FILES.items()}


def test_unreachable_providers_fall_through_then_fail_with_each_reason(repo, cli, s3_server, monkeypatch):
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDTEST", "PASSWORD": "s3-secret-value",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint}))
    write_json(repo / "data.json", {"dt_missing": {"aws": {"path": "s3://no-such-bucket/x"},
                                                   "local": {"path": "/nonexistent/m"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_missing")
    assert result.code == 1
    reason = rows[-1]["reason"]
    assert reason.startswith("data not available: 'dt_missing': local: /nonexistent/m does not exist; aws: ")
    assert "NoSuchBucket" in reason and "s3-secret-value" not in reason


# -- NAS over SFTP -----------------------------------------------------------------------------------
def nas_tree(tmp_path: Path) -> Path:
    folder = tmp_path / "nas export"
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "top.txt").write_text("top\n")
    (folder / "deep" / "er" / "leaf.txt").write_text("leaf\n")
    return folder


def nas_node(sshd_server, **extra) -> dict:
    node = {"NAME": "nas-test", "HOST": "127.0.0.1", "PORT": str(sshd_server.port), "USERNAME": sshd_server.user,
            "KEY_FILE": str(sshd_server.client_key), "KNOWN_HOSTS": str(sshd_server.known_hosts)}
    node.update(extra)
    return node


def test_nas_copies_over_sftp_and_reuses_the_mirror(repo, cli, sshd_server, tmp_path, monkeypatch):
    export = nas_tree(tmp_path)
    monkeypatch.setenv("NAS_NODES", json.dumps([
        {"NAME": "down", "HOST": "127.0.0.1", "PORT": "1", "USERNAME": "x"},  # nobody listens: skipped
        nas_node(sshd_server)]))
    write_json(repo / "data.json", {"dt_nas": {"nas": {"path": str(export), "mirrorlocal": str(tmp_path / "m")}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_nas")
    assert result.code == 0, result
    assert rows[-1]["data_provider_type"] == "nas"
    assert seen_files(model_log(rows[-1]), "dt_nas") == {"top.txt": md5(b"top\n"), "deep/er/leaf.txt": md5(b"leaf\n")}
    assert "2 file(s) downloaded" in result.stderr
    result, _rows = run_rows(cli, repo, "--tags", "dt_nas")
    assert "0 file(s) downloaded (0B), 2 unchanged" in result.stderr


def test_nas_rejects_an_unknown_host_key_unless_its_fingerprint_is_trusted(repo, cli, sshd_server, tmp_path,
                                                                           monkeypatch):
    export = nas_tree(tmp_path)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    write_json(repo / "data.json", {"dt_nas": {"nas": {"path": str(export)}}})
    monkeypatch.setenv("NAS_NODES", json.dumps([nas_node(sshd_server, KNOWN_HOSTS=str(empty))]))
    result, rows = run_rows(cli, repo, "--tags", "dt_nas")
    assert result.code == 1
    assert rows[-1]["reason"].startswith("data not available: 'dt_nas' (nas): nas-test: ")
    assert "not found in known_hosts" in rows[-1]["reason"]

    monkeypatch.setenv("NAS_NODES", json.dumps([nas_node(sshd_server, KNOWN_HOSTS=str(empty),
                                                         HOST_KEY_FINGERPRINT=sshd_server.fingerprint)]))
    result, rows = run_rows(cli, repo, "--tags", "dt_nas")
    assert result.code == 0, result


# -- custom ----------------------------------------------------------------------------------------
def test_custom_script_fills_the_mirror_once(repo, cli, tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("DT_CUSTOM_CALLS", str(calls))
    write_json(repo / "data.json", {"dt_custom": {
        "custom": {"path": "scripts/datatests/fetch_data.sh", "args": "3", "mirrorlocal": str(tmp_path / "m")},
        "local": {"path": "/tmp"}}})
    for _ in range(2):
        result, rows = run_rows(cli, repo, "--tags", "dt_custom")
        assert result.code == 0, result
        assert rows[-1]["data_provider_type"] == "custom"  # custom is tried before local
        assert seen_files(model_log(rows[-1]), "dt_custom") == {f"part_{i}.txt": md5(f"custom dt_custom {i}\n".encode())
                                                                for i in (1, 2, 3)}
    assert calls.read_text() == "called for dt_custom\n"  # the second run reused the mirror
    assert "reused the mirror, nothing downloaded" in result.stderr
    assert "custom provider wrote 3 file(s)" in model_log(rows[0])


def test_failing_custom_script_is_a_failure_row(repo, cli, tmp_path):
    (repo / "scripts" / "datatests" / "broken.sh").write_text("echo broken; exit 7\n")
    write_json(repo / "data.json", {"dt_custom": {"custom": {"path": "scripts/datatests/broken.sh"}}})
    result, rows = run_rows(cli, repo, "--tags", "dt_custom")
    assert result.code == 1
    assert rows[-1]["reason"] == ("data not available: 'dt_custom' (custom): script scripts/datatests/broken.sh "
                                  "exited with code 7")
    assert "custom| broken" in model_log(rows[-1])

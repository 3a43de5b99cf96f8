"""Every data provider delivering into one container (docker executor), against real servers:
local read-only and read-write bind mounts, aws and minio (moto S3 server), nas (sshd), custom."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from madengine.core.redact import clear_secrets
from madengine.results import read_rows
from test_data_servers import install_datatests, s3_server, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.sshd]


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_every_provider_mounts_into_the_container(model_repo, cli, docker_client, docker_cleanup, s3_server,
                                                  sshd_server, tmp_path, monkeypatch):
    docker_cleanup.append("ci-datatests")
    install_datatests(model_repo)
    local, writable, export = tmp_path / "local", tmp_path / "rw", tmp_path / "export"
    for folder, name in ((local, "l.txt"), (writable, "w.txt"), (export, "n.txt")):
        folder.mkdir()
        (folder / name).write_text(name)
    s3_server.put_tree("dt-docker", {"s/a.txt": b"aws\n", "s/deep/b.txt": b"deep\n"})
    monkeypatch.setenv("MAD_AWS_S3", json.dumps({"USERNAME": "AKIDDOCKER", "PASSWORD": "docker-s3-secret",
                                                 "AWS_ENDPOINT_URL_S3": s3_server.endpoint}))
    monkeypatch.setenv("MAD_MINIO", json.dumps({"USERNAME": "m", "PASSWORD": "docker-minio-secret",
                                                "MINIO_ENDPOINT": s3_server.endpoint}))
    monkeypatch.setenv("NAS_NODES", json.dumps([{
        "HOST": "127.0.0.1", "PORT": str(sshd_server.port), "USERNAME": sshd_server.user,
        "KEY_FILE": str(sshd_server.client_key), "KNOWN_HOSTS": str(sshd_server.known_hosts)}]))
    (model_repo / "data.json").write_text(json.dumps({
        "dt_local": {"local": {"path": str(local)}},
        "dt_rw": {"local": {"path": str(writable), "readwrite": "true", "home": "/data/rw"}},
        "dt_aws": {"aws": {"path": "s3://dt-docker/s"}},
        "dt_minio": {"minio": {"path": "dt-docker/s/a.txt"}},
        "dt_nas": {"nas": {"path": str(export)}},
        "dt_custom": {"custom": {"path": "scripts/datatests/fetch_data.sh", "args": "2"}},
    }))
    mirror = tmp_path / "mirror"
    result = cli("run", "--tags", "dt_every", "--executor", "docker", "--force-mirror-local", str(mirror))
    assert result.code == 0, result
    row = read_rows(model_repo / "perf.csv")[-1]
    assert (row["status"], row["performance"]) == ("SUCCESS", "8")
    assert row["dataname"] == "dt_local,dt_rw,dt_aws,dt_minio,dt_nas,dt_custom"
    assert row["data_provider_type"] == "local,local,aws,minio,nas,custom"
    assert float(row["data_download_duration"]) > 0
    log = Path(row["artifacts"].split(",")[0]).read_text()
    assert "MAD_DATAHOME=/data_dlm_0,/data/rw,/data_dlm_2,/data_dlm_3,/data_dlm_4,/data_dlm_5" in log
    expected = [
        ("dt_local", "l.txt", md5(b"l.txt")), ("dt_rw", "w.txt", md5(b"w.txt")),
        ("dt_aws", "a.txt", md5(b"aws\n")), ("dt_aws", "deep/b.txt", md5(b"deep\n")),
        ("dt_minio", "a.txt", md5(b"aws\n")), ("dt_nas", "n.txt", md5(b"n.txt")),
        ("dt_custom", "part_1.txt", md5(b"custom dt_custom 1\n")),
        ("dt_custom", "part_2.txt", md5(b"custom dt_custom 2\n")),
    ]
    for name, path, digest in expected:
        assert f"  {name} {digest}  ./{path}" in log, (name, path)
    for name in ("dt_local", "dt_aws", "dt_minio", "dt_nas", "dt_custom"):
        assert f"data {name}: read-only" in log
    assert "data dt_rw: writable" in log
    assert sorted(p.name for p in writable.iterdir()) == ["w.txt"]  # the probe was removed again
    assert (mirror / "dt_nas" / "n.txt").is_file() and (mirror / "dt_aws" / "deep" / "b.txt").is_file()
    clear_secrets()

"""The cache of validated catalog files (madengine.catalog.cache): what it saves never changes a
result, and every way a file can change is seen."""

from __future__ import annotations

import json
import marshal
import os
from pathlib import Path

import pytest

from conftest import run_cli, run_process
from madengine.catalog import load_catalog, select_models
from madengine.core.errors import CatalogError


def entry(name: str, **fields) -> dict:
    return {"name": name, "dockerfile": "docker/base", "scripts": "run.sh", "tags": ["t"], **fields}


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts" / "sub").mkdir(parents=True)
    (root / "models.json").write_text(json.dumps([entry("a", args="--x 1"), entry("b", timeout=30)]))
    (root / "scripts" / "sub" / "models.json").write_text(json.dumps([entry("c", custom={"k": [1, 2.5, None]})]))
    return root


@pytest.fixture
def environ(tmp_path):
    return {"MADENGINE_CACHE_DIR": str(tmp_path / "cache")}


def cache_files(environ: dict) -> list[Path]:
    return sorted((Path(environ["MADENGINE_CACHE_DIR"]) / "catalog").glob("*.marshal"))


def dicts(catalog) -> list[dict]:
    return [(m.to_dict(), m.source, m.scope) for m in catalog.models]


def test_a_cached_load_gives_the_same_models_as_a_validating_one(repo, environ):
    fresh = load_catalog(repo, {"MADENGINE_CATALOG_CACHE": "0", **environ})
    assert cache_files(environ) == []
    first = load_catalog(repo, environ)
    assert len(cache_files(environ)) == 1
    second = load_catalog(repo, environ)
    assert dicts(fresh) == dicts(first) == dicts(second)
    assert [m.name for m in second.models] == ["a", "b", "sub/c"]
    assert second.models[2].scripts == "scripts/sub/run.sh" and second.models[2].extra == {"custom": {"k": [1, 2.5, None]}}
    chosen = select_models(second, ["t:batch=4"])  # a selection copies and never touches the cached state
    assert chosen[0].run_args == "--x 1 --batch 4"
    assert load_catalog(repo, environ).models[0].tag_configs == []


def test_a_cached_model_equals_the_validated_one_field_by_field(repo, environ):
    fresh = load_catalog(repo, {"MADENGINE_CATALOG_CACHE": "0", **environ})
    load_catalog(repo, environ)
    cached = load_catalog(repo, environ)  # states as validated: absent fields read the class defaults
    assert cached.models == fresh.models
    assert cached.models[0].n_gpus == "1" and cached.models[0].timeout is None and cached.models[1].timeout == 30


def test_a_partial_save_keeps_the_revived_models_as_they_were(repo, environ, monkeypatch):
    load_catalog(repo, environ)
    (repo / "scripts" / "sub" / "models.json").write_text(json.dumps([entry("d")]))
    load_catalog(repo, environ)  # the root file revived, the sub file validated: the cache is written again
    monkeypatch.chdir(repo)  # and read from another working folder: the files are named from there
    fresh = load_catalog(repo, {"MADENGINE_CATALOG_CACHE": "0", **environ})
    for _ in range(2):
        assert load_catalog(repo, environ).models == fresh.models


def test_the_cache_is_used(repo, environ, monkeypatch):
    load_catalog(repo, environ)
    from madengine.catalog import sources

    def refuse(*args, **kwargs):
        raise AssertionError("validated again although nothing changed")

    monkeypatch.setattr(sources, "model_from_entry", refuse)
    assert [m.name for m in load_catalog(repo, environ).models] == ["a", "b", "sub/c"]


def test_an_edit_of_the_same_size_and_mtime_is_seen(repo, environ):
    load_catalog(repo, environ)
    path = repo / "models.json"
    before = path.stat()
    path.write_text(path.read_text().replace('"--x 1"', '"--x 2"'))  # same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old mtime back
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert load_catalog(repo, environ).models[0].args == "--x 2"


def test_a_replaced_or_removed_file_is_seen(repo, environ):
    load_catalog(repo, environ)
    sub = repo / "scripts" / "sub" / "models.json"
    replacement = sub.with_name("new.json")
    replacement.write_text(json.dumps([entry("d")]))
    os.replace(replacement, sub)
    assert [m.name for m in load_catalog(repo, environ).models] == ["a", "b", "sub/d"]
    sub.unlink()
    assert [m.name for m in load_catalog(repo, environ).models] == ["a", "b"]


def test_an_invalid_file_is_never_cached_and_fails_every_time(repo, environ):
    load_catalog(repo, environ)
    (repo / "models.json").write_text(json.dumps([{"name": "a", "scripts": 7}]))
    for _ in range(2):
        with pytest.raises(CatalogError, match="must be a string"):
            load_catalog(repo, environ)


@pytest.mark.parametrize("damage", [b"{not json", b"[]", b'{"code": [1], "files": {}}', b"\xff\xfe",
                                    marshal.dumps({"code": [1], "files": {}}), marshal.dumps([1, 2]), "truncated"])
def test_a_damaged_cache_is_rebuilt(repo, environ, damage):
    expected = dicts(load_catalog(repo, environ))
    [cache] = cache_files(environ)
    if damage == "truncated":  # the first half of what the last command wrote
        damage = cache.read_bytes()[: cache.stat().st_size // 2]
    cache.write_bytes(damage)
    assert dicts(load_catalog(repo, environ)) == expected
    assert dicts(load_catalog(repo, environ)) == expected
    assert cache.read_bytes() != damage


def test_damaged_entries_inside_a_valid_cache_are_validated_again(repo, environ):
    expected = dicts(load_catalog(repo, environ))
    [cache] = cache_files(environ)
    data = marshal.loads(cache.read_bytes())
    for file in data["files"].values():
        file["models"] = [["too", "short"]]
    cache.write_bytes(marshal.dumps(data))
    assert dicts(load_catalog(repo, environ)) == expected


def test_an_unwritable_cache_folder_costs_only_the_saving(repo, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder would go")
    environ = {"MADENGINE_CACHE_DIR": str(blocker)}
    assert [m.name for m in load_catalog(repo, environ).models] == ["a", "b", "sub/c"]
    assert [m.name for m in load_catalog(repo, environ).models] == ["a", "b", "sub/c"]


def test_dynamic_models_are_never_cached(repo, environ):
    (repo / "scripts" / "dyn").mkdir()
    script = repo / "scripts" / "dyn" / "get_models_json.py"
    body = ("from madengine.utils.discover_models import CustomModel\n"
            "def list_models():\n    return [CustomModel(name='{}', dockerfile='d', scripts='run.sh')]\n")
    script.write_text(body.format("one"))
    assert load_catalog(repo, environ).models[2].name == "dyn/one"
    script.write_text(body.format("two"))
    os.utime(script, ns=(0, 0))
    assert load_catalog(repo, environ).models[2].name == "dyn/two"


def test_a_url_password_stays_masked_on_a_cached_load(tmp_path, environ):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "models.json").write_text(json.dumps([entry("g", url="https://user:s3cr3t-pw@git.example/r.git")]))
    env = {**environ, "MODEL_DIR": str(root)}
    for _ in range(2):  # the second load comes from the cache (in a fresh process: nothing remembered)
        done = run_process("discover", "--tags", "g", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert "s3cr3t-pw" not in done.stdout and "git.example" in done.stdout
    assert len(cache_files(environ)) == 1


def test_discover_uses_the_cache_from_the_cli_and_it_can_be_turned_off(repo, environ):
    env = {**environ, "MODEL_DIR": str(repo)}
    first = run_cli("discover", "--tags", "all", "--json", environ=env)
    again = run_cli("discover", "--tags", "all", "--json", environ=env)
    assert first.code == again.code == 0 and first.stdout == again.stdout
    assert len(cache_files(environ)) == 1
    off = {**environ, "MODEL_DIR": str(repo), "MADENGINE_CATALOG_CACHE": "0"}
    for file in cache_files(environ):
        file.unlink()
    assert run_cli("discover", "--tags", "all", "--json", environ=off).stdout == first.stdout
    assert cache_files(environ) == []


@pytest.mark.parametrize("tags", [("all",), ("t:batch=4",), ("a", "sub/all")])
def test_discover_json_of_kept_entries_is_the_text_a_validating_load_writes(repo, environ, tags, monkeypatch):
    models = json.loads((repo / "models.json").read_text())
    (repo / "models.json").write_text(json.dumps(models + [entry("big", huge=10**30)]))  # beyond orjson
    env = {**environ, "MODEL_DIR": str(repo)}
    off = {**env, "MADENGINE_CATALOG_CACHE": "0"}
    for argv in (("--tags", *tags, "--json"), ("--tags", *tags, "--json", "--pretty")):
        expected = run_cli("discover", *argv, environ=off).stdout
        for _ in range(2):  # the entries validated (and kept), then revived from the cache
            assert run_cli("discover", *argv, environ=env).stdout == expected
    (repo / "models.json").write_text(json.dumps(models))  # every entry kept: the texts are joined
    expected = run_cli("discover", "--tags", *tags, "--json", environ=off).stdout
    assert run_cli("discover", "--tags", *tags, "--json", environ=env).stdout == expected
    if ":" not in tags[0]:  # nothing to render again (a copy with tag configs is)
        from madengine.catalog import Model

        monkeypatch.setattr(Model, "to_dict", None)
    assert run_cli("discover", "--tags", *tags, "--json", environ=env).stdout == expected


def test_sources_are_named_from_the_working_folder_of_each_load(repo, environ, monkeypatch):
    monkeypatch.chdir(repo)
    assert load_catalog(repo, environ).models[2].source == "scripts/sub/models.json"
    monkeypatch.chdir(repo / "scripts")
    assert load_catalog(repo, environ).models[2].source == "sub/models.json"

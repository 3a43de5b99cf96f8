"""data.json parsing, provider order, context merging, and the mirror helpers (no servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madengine.core.errors import ConfigError
from madengine.data.config import PROVIDER_ORDER, load_data_config
from madengine.data.mirror import choose_mirror, human_size, safe_relative
from madengine.data.config import parse_s3_path


def write(path: Path, data) -> None:
    path.write_text(json.dumps(data))


def test_providers_are_tried_in_the_documented_order_whatever_the_file_order(tmp_path):
    write(tmp_path / "data.json", {"d": {t: {"path": "s3://b/p" if t in ("aws", "minio") else "/p"}
                                         for t in reversed(PROVIDER_ORDER)}})
    config = load_data_config("data.json", None, tmp_path)
    assert [p.type for p in config.providers("d")] == ["custom", "local", "minio", "nas", "aws"]


def test_context_data_replaces_providers_per_type_and_adds_names(tmp_path):
    write(tmp_path / "data.json", {"d": {"local": {"path": "/file"}, "aws": {"path": "s3://b/file"}}})
    context = {"d": {"local": {"path": "/context"}}, "e": {"local": {"path": "/e"}}}
    config = load_data_config("data.json", context, tmp_path)
    assert {p.type: p.path for p in config.providers("d")} == {"local": "/context", "aws": "s3://b/file"}
    assert config.providers("e")[0].path == "/e"
    assert config.providers("d")[0].source == "context 'data'"


def test_missing_default_file_is_empty_but_a_named_file_must_exist(tmp_path):
    assert load_data_config("data.json", None, tmp_path).entries == {}
    with pytest.raises(ConfigError, match="data config file not found"):
        load_data_config("other.json", None, tmp_path, explicit=True)


def test_unknown_name_lists_the_known_ones(tmp_path):
    write(tmp_path / "data.json", {"a": {"local": {"path": "/a"}}})
    with pytest.raises(ConfigError) as error:
        load_data_config("data.json", None, tmp_path).providers("zz", "m1")
    assert str(error.value) == ("data.json: data 'zz' is not defined (model 'm1' asks for it) (defined data names: a; "
                                "add it to data.json or the context 'data' key)")


@pytest.mark.parametrize("entry, field", [
    ({"local": {}}, "d.local.path"),
    ({"local": {"path": "/x", "home": "relative"}}, "d.local.home"),
    ({"aws": {"path": "s3:///nobucket"}}, "d.aws.path"),
    ({"custom": {"path": "x.sh", "args": {"a": 1}}}, "d.custom.args"),
    ({"custom": {"path": "x.sh", "timeout": -3}}, "d.custom.timeout"),
    ({"nas": {"path": 5}}, "d.nas.path"),
])
def test_invalid_provider_configs_name_the_field(tmp_path, entry, field):
    write(tmp_path / "data.json", {"d": entry})
    with pytest.raises(ConfigError) as error:
        load_data_config("data.json", None, tmp_path)
    assert error.value.field == field


def test_s3_paths():
    assert parse_s3_path("s3://bucket/a/b") == ("bucket", "a/b")
    assert parse_s3_path("bucket/a/") == ("bucket", "a/")
    assert parse_s3_path("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError):
        parse_s3_path("https://bucket/a")


def test_mirror_locations(tmp_path):
    work = tmp_path / "work"
    assert choose_mirror("a/b", "", None, tmp_path, work).path == work / ".madengine_data" / "a_b"
    assert not choose_mirror("d", "", None, tmp_path, work).persistent
    assert choose_mirror("d", "m", None, tmp_path, work).path == tmp_path / "m" / "d"
    forced = choose_mirror("d", "m", str(tmp_path / "f"), tmp_path, work)
    assert forced.path == tmp_path / "f" / "d" and forced.persistent


def test_object_names_cannot_escape_the_mirror():
    assert safe_relative("a/./b//c.txt") == Path("a/b/c.txt")
    assert safe_relative("../etc/passwd") is None and safe_relative("a/../../x") is None and safe_relative("") is None


def test_human_sizes():
    assert [human_size(n) for n in (0, 512, 4096, 1536 * 1024, 12 * 1024 ** 3)] == ["0B", "512B", "4.0K", "1.5M", "12G"]

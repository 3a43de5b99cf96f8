"""The model catalog: schema, the three sources (and both legacy import paths), tag selection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from madengine.catalog import (CustomModel, Model, load_catalog, model_from_entry, parse_tag, select_models,
                               split_tags)
from madengine.core.errors import CatalogError, UnknownTagError

FIXTURE = Path(__file__).parent / "fixtures" / "repo"


@pytest.fixture
def catalog():
    return load_catalog(FIXTURE)


def names(models):
    return [m.name for m in models]


# -- schema ---------------------------------------------------------------------------------

def test_schema_normalises_and_keeps_unknown_fields():
    model = model_from_entry({"name": " m ", "scripts": "s.sh", "tags": "a, b", "n_gpus": 2, "timeout": "30",
                              "args": ["--x", 1], "my_field": {"k": 1}}, source="models.json")
    assert (model.name, model.tags, model.n_gpus, model.timeout, model.args) == ("m", ["a", "b"], "2", 30, "--x 1")
    assert model.extra == {"my_field": {"k": 1}}
    assert model.to_dict()["my_field"] == {"k": 1}


def test_args_is_optional():
    assert model_from_entry({"name": "m", "scripts": "s.sh"}, source="x").args == ""


def test_a_validated_model_is_the_dataclass_of_its_fields():
    # its __dict__ holds only the fields the entry sets: the others read the class defaults
    model = model_from_entry({"name": "m", "scripts": "s.sh", "url": "u"}, source="x")
    built = Model(name="m", scripts="s.sh", url="u", source="x")
    assert model == built and model.to_dict() == built.to_dict()
    assert (model.dockerfile, model.n_gpus, model.timeout, model.onnx) == ("", "1", None, "")


@pytest.mark.parametrize("entry, fragment", [
    ({"scripts": "s.sh"}, "has no 'name'"),
    ({"name": "m"}, "scripts: is required"),
    ({"name": "m", "scripts": "s.sh", "n_gpus": "two"}, "n_gpus: must be an integer"),
    ({"name": "m", "scripts": "s.sh", "timeout": -5}, "timeout: must be 0"),
    ({"name": "m", "scripts": "s.sh", "tags": [1, 2]}, "tags: must be a list of strings"),
    ({"name": "m", "scripts": 5}, "scripts: must be a string"),
    ("not an object", "must be a JSON object"),
])
def test_schema_errors_name_the_model_and_field(entry, fragment):
    with pytest.raises(CatalogError) as info:
        model_from_entry(entry, source="models.json", index=0)
    assert fragment in str(info.value) and str(info.value).startswith("models.json")


# -- sources --------------------------------------------------------------------------------

def test_three_sources_and_rerooting(catalog):
    by_name = {m.name: m for m in catalog.models}
    assert "dummy" in by_name
    sub = by_name["sub/model1"]
    assert (sub.scope, sub.dockerfile, sub.scripts) == ("sub", "docker/dummy", "scripts/dummy/run.sh")
    dyn = by_name["dyn/model3"]
    assert (dyn.scope, dyn.scripts) == ("dyn", "scripts/dummy/perf.py")


def test_both_legacy_customodel_import_paths_are_one_class(catalog):
    from madengine.tools.discover_models import CustomModel as Old
    from madengine.utils.discover_models import CustomModel as New

    assert Old is New is CustomModel
    assert "legacy/old" in names(catalog.models)


def test_update_model_is_called_on_selection_without_double_prefix(catalog):
    first = select_models(catalog, ["dyn/model3"])
    second = select_models(catalog, ["dyngroup", "dyn/model3"])
    assert first[0].args == "--value 77" and second[0].scripts == "scripts/dummy/perf.py"
    assert len(second) == 1


def test_model_dir_points_discovery_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODEL_DIR", str(FIXTURE))
    catalog = load_catalog()
    assert catalog.root == FIXTURE.resolve() and "dummy" in names(catalog.models)
    assert not (tmp_path / "models.json").exists()  # nothing copied over the working tree


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "r"
    shutil.copytree(FIXTURE, repo)
    return repo


def test_malformed_json_names_the_file_and_position(tmp_path):
    repo = _repo(tmp_path)
    (repo / "scripts" / "sub" / "models.json").write_text('[{"name": "x",}]')
    with pytest.raises(CatalogError) as info:
        load_catalog(repo)
    assert "scripts/sub/models.json" in str(info.value) and "line 1" in str(info.value)


@pytest.mark.parametrize("body, fragment", [
    ("def list_models():\n    raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
    ("def list_models():\n    return {'a': 1}\n", "returned dict, not a list"),
    ("def list_models():\n    return [1]\n", "returned a int, not a CustomModel"),
    ("x = 1\n", "defines no list_models()"),
    ("import nonexistent_module_xyz\n", "ModuleNotFoundError"),
])
def test_bad_get_models_json(tmp_path, body, fragment):
    repo = _repo(tmp_path)
    (repo / "scripts" / "dyn" / "get_models_json.py").write_text(body)
    with pytest.raises(CatalogError) as info:
        load_catalog(repo)
    assert "get_models_json.py" in str(info.value) and fragment in str(info.value)


def test_both_sources_in_one_folder_is_an_error(tmp_path):
    repo = _repo(tmp_path)
    (repo / "scripts" / "dyn" / "models.json").write_text("[]")
    with pytest.raises(CatalogError, match="both models.json and get_models_json.py"):
        load_catalog(repo)


def test_duplicate_names_are_an_error(tmp_path):
    repo = _repo(tmp_path)
    data = json.loads((repo / "models.json").read_text())
    data.append(dict(data[0]))
    (repo / "models.json").write_text(json.dumps(data))
    with pytest.raises(CatalogError, match="defined twice"):
        load_catalog(repo)


def test_repo_without_catalog(tmp_path):
    with pytest.raises(CatalogError, match="no models.json"):
        load_catalog(tmp_path)


# -- tags -----------------------------------------------------------------------------------

def test_split_tags_space_and_comma():
    assert split_tags(["a,b", " c ", "d,,"]) == ["a", "b", "c", "d"]


def test_tag_matches_name_or_tag_and_all(catalog):
    assert names(select_models(catalog, ["dummy"])) == ["dummy"]
    assert names(select_models(catalog, ["failing"])) == ["dummy_fail", "dummy_noperf"]
    assert len(select_models(catalog, ["all"])) == len(catalog.models)


def test_union_deduplicated_in_catalog_order(catalog):
    picked = names(select_models(catalog, ["sub/model1,dummy_fail", "failing", "dummy"]))
    assert picked == ["dummy", "dummy_fail", "dummy_noperf", "sub/model1"]


def test_scoped_selectors(catalog):
    assert names(select_models(catalog, ["sub/all"])) == ["sub/model1", "sub/model2"]
    assert names(select_models(catalog, ["sub/model2"])) == ["sub/model2"]
    assert names(select_models(catalog, ["sub/pass"])) == ["sub/model1"]  # a tag, inside the folder only


def test_tag_configs_append_args(catalog):
    (model,) = select_models(catalog, ["dummy_py:batch-size=32:fast"])
    assert model.tag_configs == [("batch-size", "32"), ("fast", "")]
    assert model.run_args == "--value 12.5 --batch-size 32 --fast"
    (scoped,) = select_models(catalog, ["sub/model2:n=4"])
    assert scoped.run_args == "--value 3 --n 4"


def test_selection_does_not_mutate_catalog(catalog):
    select_models(catalog, ["dummy:x=1"])
    assert [m for m in catalog.models if m.name == "dummy"][0].tag_configs == []


def test_unknown_tag_suggests_close_matches(catalog):
    with pytest.raises(UnknownTagError) as info:
        select_models(catalog, ["dumy"])
    assert "'dumy' selects no model" in str(info.value) and "dummy" in str(info.value)


@pytest.mark.parametrize("tag", [":x=1", "m:", "m:bad key=1"])
def test_malformed_tags(catalog, tag):
    with pytest.raises(CatalogError):
        select_models(catalog, [tag])


def test_parse_tag_scope():
    spec = parse_tag("dir/model:k=v")
    assert (spec.scope, spec.filter, spec.configs) == ("dir", "model", (("k", "v"),))


def test_custom_model_defaults():
    model = CustomModel(name="x")
    assert model.to_dict()["n_gpus"] == "-1" and model.to_dict()["timeout"] == 7200


def test_a_precision_tag_config_must_name_a_precision_and_declares_it():
    spec = parse_tag("m:precision=bfloat16")
    assert spec.configs == (("precision", "bfloat16"),)
    for bad in ("m:precision=fp33", "m:precision=", "m:precision", "m:precision=fp32 --rm"):
        with pytest.raises(CatalogError, match="is not a precision") as caught:
            parse_tag(bad)
        assert "valid: fp64, fp32, tf32, bf16, fp16, fp8, int8" in caught.value.hint


def test_precision_tag_config_property():
    """Any value: a precision by any spelling parses, anything else is a CatalogError naming it."""
    from hypothesis import given
    from hypothesis import strategies as st

    from madengine.core.precision import NAMES, canonical, is_precision

    @given(st.one_of(st.sampled_from(list(NAMES) + ["BFloat16", " half ", "float32"]),
                     st.text(alphabet=st.characters(blacklist_characters=":"), max_size=20)))
    def check(value):
        text = f"m:precision={value}"
        if is_precision(value.strip()):
            assert canonical(parse_tag(text).configs[0][1]) in NAMES
        else:
            with pytest.raises(CatalogError):
                parse_tag(text)

    check()

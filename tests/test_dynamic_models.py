"""Dynamic models: a ``get_models_json.py`` model may set ``scripts``/``dockerfile`` only in
``update_model()`` (the original tool's documented pattern and its dummy3 fixture). Such a model is
validated after ``update_model()``, and only when selected: an invalid selected model is exit 2 naming
it, an unselected one never breaks other tags, and ``discover`` lists the rest of the repository."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from madengine.results import read_rows

# the original's tests/fixtures/dummy/scripts/dummy3/get_models_json.py, paths adapted to this repository
DUMMY3 = '''from madengine.utils.discover_models import CustomModel

Model3Data = CustomModel(name="model3", dockerfile="../../docker/dummy", scripts="../dummy/run.sh", n_gpus="-1",
                         owner="mad.support@amd.com", tags=["dummies", "dummy_test_group_3"])


class Dummy3CustomModel(CustomModel):
    def update_model(self):
        self.dockerfile = "../../docker/dummy"
        self.scripts = "../dummy/perf.py"
        self.args = "--value 7"
        self.n_gpus = "-1"
        self.owner = "mad.support@amd.com"


Model4Data = Dummy3CustomModel(name="model4", tags=["dummies", "dummy_test_group_3"])


def list_models():
    return [Model3Data, Model4Data]
'''

# update_model() leaves it without scripts: invalid, but only a problem when selected
BROKEN = '''from madengine.utils.discover_models import CustomModel


class Broken(CustomModel):
    def update_model(self):
        self.dockerfile = "../../docker/dummy"


def list_models():
    return [Broken(name="nothing", tags=["brokentag"])]
'''


@pytest.fixture
def dynamic_repo(model_repo):
    for name, body in (("dummy3", DUMMY3), ("broken", BROKEN)):
        (model_repo / "scripts" / name).mkdir()
        (model_repo / "scripts" / name / "get_models_json.py").write_text(body)
    return model_repo


def test_discover_lists_the_repository_and_refreshes_dynamic_models(dynamic_repo):
    done = run_cli("discover", "--json")
    assert done.code == 0, done
    models = {m["name"]: m for m in json.loads(done.stdout)}
    assert "dummy" in models and "sub/model1" in models and "dummy3/model3" in models
    assert models["dummy3/model4"]["scripts"] == "scripts/dummy/perf.py"  # set by update_model()
    assert models["dummy3/model4"]["dockerfile"] == "docker/dummy"
    assert "broken/nothing" not in models
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "broken/nothing" in warnings[0] and "scripts" in warnings[0]


def test_unrelated_tags_are_not_broken_by_an_invalid_dynamic_model(dynamic_repo):
    for tags in (["dummy"], ["dummy_test_group_3"], ["dummy3/all"], ["sub/all", "dummy3/model4"]):
        done = run_cli("discover", "--tags", *tags, "--json")
        assert done.code == 0, (tags, done)
        assert "broken" not in done.stdout


@pytest.mark.parametrize("tag", ["broken/nothing", "brokentag", "broken/all", "all"])
def test_selecting_an_invalid_dynamic_model_names_it(dynamic_repo, tag):
    for argv in (("discover", "--tags", tag), ("run", "--tags", tag, "--executor", "local")):
        done = run_cli(*argv)
        assert done.code == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "broken/nothing" in lines[0] and "scripts: is required" in lines[0], lines
        assert "get_models_json.py" in lines[0]
    assert not (dynamic_repo / "perf.csv").exists()


def test_a_model_completed_by_update_model_runs(dynamic_repo):
    done = run_cli("run", "--tags", "dummy3/model4", "--executor", "local", "--no-html")
    assert done.code == 0, done
    [row] = read_rows(dynamic_repo / "perf.csv")
    assert (row["model"], row["status"], row["performance"]) == ("dummy3/model4", "SUCCESS", "7.0")

"""``madengine bench`` on scripts with real architectures and random weights, nothing downloaded:
transformers' ResNet-18, a BERT encoder and a GPT-2 language model, each built from a config
(tests/fixtures/scripts/real/). torchvision is not used: the PyPI torchvision wheels link CUDA
torch libraries and do not load beside the CPU torch CI installs."""

from __future__ import annotations

import csv
import json

import pytest
import transformers  # noqa: F401  (part of the torch extra CI installs: a missing one fails here)

from conftest import FIXTURES, run_cli

pytestmark = pytest.mark.slow


def test_real_architectures_export_benchmark_and_match_eager(tmp_path):
    result = run_cli("bench", "--all", "--search-dir", str(FIXTURES / "scripts" / "real"), "--labels",
                     "test_group::real", "--iterations", "3", "--warmup", "1", "--threads", "1", "--json",
                     "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "perf.csv"),
                     "--runs-dir", str(tmp_path / "runs"))
    assert result.code == 0, result
    scripts = {s["script"].rsplit("/", 1)[-1]: s for s in json.loads(result.stdout)["scripts"]}
    assert sorted(scripts) == ["bert.py", "gpt2.py", "resnet18.py"]
    classes = {name: s["models"][0]["class"] for name, s in scripts.items()}
    assert classes == {"bert.py": "transformers.models.bert.modeling_bert.BertModel",
                       "gpt2.py": "transformers.models.gpt2.modeling_gpt2.GPT2LMHeadModel",
                       "resnet18.py": "transformers.models.resnet.modeling_resnet.ResNetForImageClassification"}
    resnet = scripts["resnet18.py"]["models"][0]
    assert resnet["parameters"] == 11_689_512  # ResNet-18's parameter count
    assert resnet["built_at"].endswith("resnet18.py:9")  # the script's line, not transformers'
    bert_inputs = scripts["bert.py"]["models"][0]["inputs"]
    assert [(i["name"], i["dtype"], i["shape"]) for i in bert_inputs] == [
        ("input_ids", "int64", [1, 64]), ("attention_mask", "int64", [1, 64])]
    with open(tmp_path / "perf.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and all(r["status"] == "SUCCESS" for r in rows)
    ort = {r["model_name"]: r for r in rows if r["backend"] == "onnxruntime-cpu"}
    assert all(r["correctness"] == "PASS" for r in ort.values())
    for row in rows:
        assert row["tags"].startswith("author::transformers name::") and "test_group::real" in row["tags"]
        assert float(row["performance"]) > 0 and row["build_cache"] == "built"

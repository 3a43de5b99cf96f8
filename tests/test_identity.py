"""Result identity (madengine.results.identity): the one definition of comparable results."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import IN_CI
from madengine.catalog.selection import parse_tag
from madengine.results import PerfRecord
from madengine.results.columns import EXTRA_COLUMNS
from madengine.results.identity import ENVIRONMENT_FIELDS, FIELDS, ResultIdentity, tag_configs_text

EXAMPLES = 500 if IN_CI else 200


def test_new_columns_are_appended_in_the_contract_order():
    start = EXTRA_COLUMNS.index("tag_configs")  # later columns only ever come after these
    assert EXTRA_COLUMNS[start:start + 19] == (
        "tag_configs", "backend", "trace_id", "perf_n", "perf_mean", "perf_stddev", "perf_cv", "perf_min",
        "perf_max", "perf_ci95_low", "perf_ci95_high", "perf_samples", "warmup_runs", "precision_source",
        "framework_versions", "thread_settings", "host_load_start", "host_load_end", "warnings")
    row = PerfRecord(model="m", tag_configs="size=64", backend="onnxruntime-cpu", perf_n=3).to_row()
    assert (row["tag_configs"], row["backend"], row["perf_n"]) == ("size=64", "onnxruntime-cpu", "3")


def test_tag_configs_text_is_canonical():
    assert tag_configs_text(parse_tag("numpy_matmul:size=64:fast").configs) == "fast:size=64"
    assert tag_configs_text([("size", "64"), ("batch", "8")]) == "batch=8:size=64"
    assert tag_configs_text({"b": "2", "a": ""}) == "a:b=2"
    assert tag_configs_text([]) == ""


def test_identity_from_rows_key_label_and_differences():
    row = {"model": " numpy_matmul ", "metric": "ms", "tag_configs": "size=64", "executor": "docker",
           "gpu_vendor": "CPU", "gpu_architecture": "x86_64", "n_gpus": "1", "performance": "3"}
    identity = ResultIdentity.from_row(row)
    assert identity == ResultIdentity("numpy_matmul", "ms", "size=64", "docker", "CPU", "x86_64", "1", "")
    assert identity.label() == "numpy_matmul [size=64] · docker · CPU x86_64 · 1 GPU"
    assert json.loads(identity.key()) == ["numpy_matmul", "ms", "size=64", "docker", "CPU", "x86_64", "1", ""]
    assert ResultIdentity.from_key(identity.key()) == identity
    assert ResultIdentity.from_row({"model": "old"}) == ResultIdentity(model="old")  # v1 rows: missing = ""
    local = ResultIdentity.from_row({**row, "executor": "local", "n_gpus": "8"})
    assert identity.environment_differences(local) == ["executor", "n_gpus"]
    assert identity.describe_differences(local) == "executor: docker → local, n_gpus: 1 → 8"
    other_configs = ResultIdentity.from_row({**row, "tag_configs": ""})
    assert other_configs != identity and identity.environment_differences(other_configs) == []
    assert identity.comparable_key() != other_configs.comparable_key()
    assert ResultIdentity("m", n_gpus="8", backend="torch-eager").label() == "m · 8 GPUs · torch-eager"
    assert set(ENVIRONMENT_FIELDS) < set(FIELDS)


_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8)
_value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.,/", max_size=8)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.dictionaries(_key, _value, max_size=6))
def test_tag_configs_text_round_trips_through_a_tag(configs):
    """The canonical text, used as a tag's config part, selects the same configs: order never matters."""
    text = tag_configs_text(configs)
    assert text == tag_configs_text(list(reversed(list(configs.items()))))
    if text:
        assert tag_configs_text(parse_tag(f"model:{text}").configs) == text
    keys = [entry.partition("=")[0] for entry in text.split(":")] if text else []
    assert keys == sorted(configs)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(FIELDS + ("performance", "other")), st.text(max_size=12) | st.none()))
def test_identity_of_any_row_has_a_stable_key(row):
    identity = ResultIdentity.from_row(row)
    assert ResultIdentity.from_key(identity.key()) == identity
    assert identity.key() == ResultIdentity.from_row(dict(reversed(list(row.items())))).key()
    assert identity.environment_differences(identity) == []

"""The ``distributed`` block: parsing, the context over the model key by key, one-line errors, and
Hypothesis properties of the parser (it never raises anything but LaunchError, and what it
accepts round-trips)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from madengine.catalog.schema import model_from_entry
from madengine.context.context import Context, build_context
from madengine.core.errors import ExitStatus, InputError, LaunchError
from madengine.execution.plan import check_distributed, distributed_spec, job_node, plan_launch, resolve_gpus
from madengine.launch import (BACKENDS, LAUNCHERS, DistributedSpec, check_block, merge_blocks, parse_distributed,
                              spec_from_block)
from madengine.launch.spec import KEY_LAUNCHERS, LAUNCHER_ALIASES, MAX_NODES, MAX_PROCS_PER_NODE


def parse(block):
    return parse_distributed(block, source="models.json")


# -- examples ------------------------------------------------------------------------------------
def test_defaults_and_reference_spellings():
    assert parse({}) == DistributedSpec(launcher="torchrun", nnodes=1)
    spec = parse({"launcher": "Megatron", "nnodes": "2", "nproc_per_node": 8.0, "backend": "RCCL", "port": 29600})
    assert (spec.launcher, spec.nnodes, spec.nproc_per_node, spec.backend, spec.master_port) == \
        ("megatron-lm", 2, 8, "nccl", 29600)
    assert parse({"launcher": "sglang_disagg", "nnodes": 3}).launcher == "sglang-disagg"
    # "auto" is what leaving them out means: the node decides (one rank per GPU, nccl with GPUs)
    spec = parse({"nproc_per_node": " Auto", "backend": "AUTO", "cpu_nproc_per_node": "2"})
    assert (spec.nproc_per_node, spec.backend, spec.cpu_nproc_per_node) == (None, None, 2)
    assert spec == parse({"cpu_nproc_per_node": 2})


def test_launcher_sections():
    spec = parse({"launcher": "deepspeed", "nnodes": 2, "deepspeed": {"hostfile": "/etc/ds/hostfile"}})
    assert spec.hostfile == "/etc/ds/hostfile"
    spec = parse({"launcher": "primus", "primus": {"config_path": "examples/a.yaml", "cli_extra": "--x 1",
                                                   "backend": "megatron"}})
    assert (spec.primus_config_path, spec.primus_cli_extra, spec.primus_backend) == \
        ("examples/a.yaml", "--x 1", "megatron")
    spec = parse({"launcher": "megatron-lm", "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                  "context_parallel_size": 1})
    assert (spec.tensor_parallel_size, spec.pipeline_parallel_size, spec.context_parallel_size) == (2, 2, 1)


@pytest.mark.parametrize("nnodes, split, expected", [
    (3, {}, (1, 1)), (6, {}, (2, 3)), (11, {}, (4, 6)), (6, {"prefill_nodes": 1}, (1, 4)),
    (6, {"decode_nodes": 1}, (4, 1)), (6, {"prefill_nodes": 3, "decode_nodes": 2}, (3, 2)),
])
def test_sglang_disagg_split(nnodes, split, expected):
    spec = parse({"launcher": "sglang-disagg", "nnodes": nnodes, "sglang_disagg": split})
    assert (spec.prefill_nodes, spec.decode_nodes) == expected


@pytest.mark.parametrize("block, field, words", [
    ({"launcher": "horovod"}, "distributed.launcher", ["unknown launcher 'horovod'", *LAUNCHERS]),
    ({"nnodes": 0}, "distributed.nnodes", ["from 1 to"]),
    ({"nnodes": -3}, "distributed.nnodes", ["from 1 to"]),
    ({"nnodes": "two"}, "distributed.nnodes", ["'two'"]),
    ({"nnodes": 1.5}, "distributed.nnodes", ["1.5"]),
    ({"nnodes": True}, "distributed.nnodes", ["True"]),
    ({"nproc_per_node": 0}, "distributed.nproc_per_node", ["from 1 to", '"auto"']),
    ({"nproc_per_node": "gpu"}, "distributed.nproc_per_node", ["'gpu'", '"auto"']),
    ({"cpu_nproc_per_node": 0}, "distributed.cpu_nproc_per_node", ["from 1 to"]),
    ({"cpu_nproc_per_node": "auto"}, "distributed.cpu_nproc_per_node", ["'auto'"]),
    ({"backend": "automatic"}, "distributed.backend", ["unknown backend", "auto", *BACKENDS]),
    ({"master_port": 70000}, "distributed.master_port", ["TCP port"]),
    ({"port": 1, "master_port": 2}, "distributed.port", ["differ"]),
    ({"backend": "tcp"}, "distributed.backend", ["unknown backend", *BACKENDS]),
    ({"launchr": "torchrun"}, "distributed.launchr", ["unknown key", "launcher"]),
    ({"launcher": "sglang-disagg", "nnodes": 2}, "distributed.nnodes", ["3 or more nodes", "got 2"]),
    ({"launcher": "sglang-disagg", "nnodes": 5, "sglang_disagg": {"prefill_nodes": 2, "decode_nodes": 3}},
     "distributed.sglang_disagg", ["must be 4"]),
    ({"launcher": "torchrun", "tensor_parallel_size": 2}, "distributed.tensor_parallel_size",
     ["does not apply to the torchrun launcher", "megatron-lm"]),
    ({"launcher": "torchrun", "deepspeed": {"hostfile": "h"}}, "distributed.deepspeed", ["does not apply"]),
    ({"launcher": "deepspeed", "deepspeed": {"hostfile": "my hosts"}}, "distributed.deepspeed.hostfile",
     ["shell would split"]),
    ({"launcher": "deepspeed", "deepspeed": {"hosts": "h"}}, "distributed.deepspeed.hosts", ["unknown key"]),
    ({"launcher": "primus", "primus": "exp.yaml"}, "distributed.primus", ["must be an object"]),
])
def test_bad_blocks_are_one_line_errors_naming_the_key(block, field, words):
    with pytest.raises(LaunchError) as caught:
        parse(block)
    error = caught.value
    assert error.field == field and error.path == "models.json"
    assert error.exit_status == ExitStatus.BAD_INPUT
    text = str(error)
    assert "\n" not in text
    for word in words:
        assert word in text, (word, text)


def test_a_block_that_is_not_an_object():
    with pytest.raises(LaunchError, match="must be an object"):
        parse(["torchrun"])


# -- the model's block under the context's --------------------------------------------------------
def _model(block=None, **fields):
    entry = {"name": "m", "scripts": "run.sh", **fields}
    if block is not None:
        entry["distributed"] = block
    return model_from_entry(entry, source="models.json")


def test_the_context_wins_key_by_key():
    model = _model({"launcher": "sglang-disagg", "nnodes": 6, "nproc_per_node": 4,
                    "sglang_disagg": {"prefill_nodes": 2, "decode_nodes": 3}})
    context = Context({"distributed": check_block({"nproc_per_node": 2, "sglang_disagg": {"prefill_nodes": 3,
                                                                                          "decode_nodes": 2}},
                                                  source="--additional-context")})
    spec = distributed_spec(model, context)
    assert (spec.launcher, spec.nnodes, spec.nproc_per_node, spec.prefill_nodes, spec.decode_nodes) == \
        ("sglang-disagg", 6, 2, 3, 2)
    # null in the context clears the model's value back to the default (one rank per device)
    cleared = distributed_spec(model, Context({"distributed": check_block({"nproc_per_node": None}, source="c")}))
    assert cleared.nproc_per_node is None and cleared.nnodes == 6


def test_a_context_block_alone_applies_and_no_block_is_none():
    assert distributed_spec(_model(), Context({})) is None
    spec = distributed_spec(_model(), Context({"distributed": {"launcher": "vllm"}}))
    assert spec.launcher == "vllm"


def test_the_context_string_is_checked_where_the_context_is_read():
    context = build_context(context_string='{"distributed": {"launcher": "MEGATRON", "port": "29555"}}', detect=False)
    assert context.distributed == {"launcher": "megatron-lm", "master_port": 29555}
    with pytest.raises(LaunchError, match="unknown launcher 'slurm'"):
        build_context(context_string='{"distributed": {"launcher": "slurm"}}', detect=False)
    assert issubclass(LaunchError, InputError)  # exit 2


def test_nproc_per_node_above_the_visible_gpus_is_refused():
    model = _model({"launcher": "torchrun", "nproc_per_node": 4})
    gpu_host = Context({"gpu_vendor": "AMD", "system_ngpus": 2})
    with pytest.raises(LaunchError, match="nproc_per_node 4 is more than the 2 visible GPU"):
        check_distributed([model], gpu_host, {})
    check_distributed([model], Context({"gpu_vendor": "AMD", "system_ngpus": 8}), {})
    check_distributed([model], Context({"gpu_vendor": "CPU"}), {})  # CPU ranks are processes, not devices
    # a run gets one GPU per rank, whatever n_gpus says
    assert resolve_gpus(model, Context({"gpu_vendor": "NVIDIA", "system_ngpus": 8})) == [0, 1, 2, 3]


def _bundled(name):
    """A model of the repository's own models.json."""
    entries = json.loads((Path(__file__).parent.parent / "models.json").read_text())
    return model_from_entry(next(e for e in entries if e["name"] == name), source="models.json")


@pytest.mark.parametrize("context, gpus, ranks, backend", [
    ({"gpu_vendor": "CPU"}, [], 2, "gloo"),
    ({"gpu_vendor": "NVIDIA", "system_ngpus": 1}, [0], 1, "nccl"),
    ({"gpu_vendor": "AMD", "system_ngpus": 8}, list(range(8)), 8, "nccl"),
    ({"gpu_vendor": "AMD", "system_ngpus": 8, "docker_gpus": "2,5"}, [2, 5], 2, "nccl"),
    ({"gpu_vendor": "NVIDIA", "system_ngpus": 8, "n_gpus": "4"}, [0, 1, 2, 3], 4, "nccl"),
])
def test_the_bundled_ddp_model_runs_one_rank_per_visible_gpu(context, gpus, ranks, backend):
    """pyt_resnet50_train's "auto" block, resolved where the GPUs are known (the context's detection,
    stood in here: no GPU on this host): every visible GPU gets a rank over nccl (RCCL on ROCm); a
    CPU host runs its 2 ranks over gloo."""
    model, context = _bundled("pyt_resnet50_train"), Context(context)
    check_distributed([model], context, {})
    assert resolve_gpus(model, context) == gpus
    launch = plan_launch(model, context, gpus, "/myworkspace", {})
    assert launch.runner == ("torchrun", "--standalone", f"--nproc_per_node={ranks}")
    assert (launch.nproc_per_node, launch.backend, launch.env["MAD_DISTRIBUTED_BACKEND"]) == (ranks, backend, backend)


def test_an_explicit_rank_count_still_wins_over_auto():
    model, one_gpu = _bundled("pyt_resnet50_train"), {"gpu_vendor": "NVIDIA", "system_ngpus": 1}
    two = {"distributed": check_block({"nproc_per_node": 2, "backend": "gloo"}, source="c")}
    with pytest.raises(LaunchError, match="nproc_per_node 2 is more than the 1 visible GPU"):
        check_distributed([model], Context({**one_gpu, **two}), {})
    cpu = Context({"gpu_vendor": "CPU", **two})
    launch = plan_launch(model, cpu, resolve_gpus(model, cpu), "/myworkspace", {})
    assert (launch.nproc_per_node, launch.backend) == (2, "gloo")
    # and a context's "auto" clears a model's count back to the node's
    auto = Context({**one_gpu, "distributed": check_block({"nproc_per_node": "auto"}, source="c")})
    assert distributed_spec(_model({"nproc_per_node": 4}, n_gpus="-1"), auto).nproc_per_node is None


def test_what_only_a_placement_shows_is_checked_before_the_run():
    model = _model({"launcher": "megatron-lm", "nproc_per_node": 3, "tensor_parallel_size": 2})
    with pytest.raises(LaunchError, match="do not divide the world size 3") as caught:
        check_distributed([model], Context({}), {})
    assert caught.value.path == "models.json" and "model 'm'" in caught.value.field
    deepspeed = _model({"launcher": "deepspeed", "nnodes": 2})
    environ = {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "node0"}
    with pytest.raises(LaunchError, match="needs a hostfile or the address of every node"):
        check_distributed([deepspeed], Context({}), environ)
    check_distributed([deepspeed], Context({}), {**environ, "MAD_NODE_HOSTS": "node0,node1"})


def test_a_multi_node_job_needs_a_multi_node_executor():
    model = _model({"launcher": "torchrun", "nnodes": 2})
    with pytest.raises(LaunchError, match="nnodes 2 needs a multi-node executor") as caught:
        check_distributed([model], Context({}), {})
    assert "--executor slurm" in str(caught.value)
    # one node of a job its executor placed: the rendezvous variables say where
    environ = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29400",
               "MAD_NODE_HOSTS": "node0,node1"}
    check_distributed([model], Context({}), environ)
    launch = plan_launch(model, Context({}), [], "/myworkspace", environ)
    assert launch.runner == ("torchrun", "--nnodes=2", "--nproc_per_node=1", "--node_rank=1",
                             "--master_addr=node0", "--master_port=29400")
    with pytest.raises(LaunchError, match="NNODES=3"):
        job_node({**environ, "NNODES": "3"}, distributed_spec(model, Context({})))


# -- properties ------------------------------------------------------------------------------------
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                           lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=8), children, max_size=3), max_leaves=8)
keys = st.sampled_from(["launcher", "nnodes", "nproc_per_node", "cpu_nproc_per_node", "backend", "master_port", "port",
                        "tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size", "deepspeed",
                        "sglang_disagg", "primus", "other"])
launcher_names = st.sampled_from([*LAUNCHERS, *LAUNCHER_ALIASES, "Torchrun", " vllm "])


def _block_values(key):
    if key == "launcher":
        return launcher_names | json_values
    if key in ("deepspeed", "sglang_disagg", "primus"):
        return st.dictionaries(st.sampled_from(["hostfile", "prefill_nodes", "decode_nodes", "config_path",
                                                "cli_extra", "backend", "x"]),
                               st.integers(-2, 9) | st.text(max_size=10) | st.none(), max_size=3) | json_values
    return st.integers(-5, 70000) | st.sampled_from(["2", "nccl", "gloo", "rccl", "1.0", "", "auto", " AUTO"]) \
        | json_values


blocks = st.lists(keys, max_size=6, unique=True).flatmap(
    lambda ks: st.fixed_dictionaries({k: _block_values(k) for k in ks}))


@given(blocks)
def test_any_block_is_a_spec_or_one_launch_error(block):
    try:
        spec = parse(block)
    except LaunchError as exc:
        assert exc.path == "models.json" and str(exc).count("\n") == 0
        assert exc.field and exc.field.startswith("distributed")
        return
    assert spec.launcher in LAUNCHERS and 1 <= spec.nnodes <= MAX_NODES
    # what the parser accepts, it reads back the same from the spec's own block
    assert parse(spec.to_block()) == spec
    assert parse(json.loads(json.dumps(spec.to_block()))) == spec


@given(json_values)
def test_any_json_value_is_a_spec_or_one_launch_error(value):
    try:
        parse(value)
    except LaunchError:
        pass


@given(blocks)
def test_checking_twice_changes_nothing(block):
    try:
        checked = check_block(block, source="c")
    except LaunchError:
        return
    assert check_block(checked, source="c") == checked


@given(blocks, blocks)
def test_the_context_wins_every_key_it_sets(model_block, context_block):
    try:
        model, context = check_block(model_block, source="m"), check_block(context_block, source="c")
    except LaunchError:
        return
    merged = merge_blocks(model, context)
    for key, value in context.items():
        if isinstance(value, dict):
            assert merged[key] == {**(model.get(key) or {}), **value}
        else:
            assert merged[key] == value
    for key in model.keys() - context.keys():
        assert merged[key] == model[key]
    try:
        spec_from_block(merged, source="m + c")
    except LaunchError as exc:
        assert "\n" not in str(exc)


@given(st.integers() | st.floats() | st.text(max_size=6) | st.booleans())
def test_nnodes_is_a_whole_number_of_one_or_more(value):
    try:
        spec = parse({"nnodes": value})
    except LaunchError as exc:
        assert exc.field == "distributed.nnodes"
        return
    assert isinstance(spec.nnodes, int) and spec.nnodes >= 1
    assert not isinstance(value, bool)


@given(st.sampled_from(["nproc_per_node", "backend"]),
       st.text(" \t", max_size=2), st.sampled_from(["auto", "AUTO", "Auto", "aUtO"]), st.text(" \t", max_size=2))
def test_auto_in_any_case_is_what_leaving_the_key_out_means(key, before, word, after):
    assert parse({key: before + word + after}) == parse({})


@given(st.integers() | st.floats() | st.text(max_size=8) | st.booleans())
def test_nproc_per_node_is_a_count_or_auto(value):
    try:
        spec = parse({"nproc_per_node": value})
    except LaunchError as exc:
        assert exc.field == "distributed.nproc_per_node" and '"auto"' in str(exc) and "\n" not in str(exc)
        return
    assert spec.nproc_per_node is None or 1 <= spec.nproc_per_node <= MAX_PROCS_PER_NODE
    assert (spec.nproc_per_node is None) == (isinstance(value, str) and value.strip().lower() == "auto")


@given(st.text(max_size=20))
def test_an_unknown_launcher_lists_the_valid_ones(name):
    try:
        spec = parse({"launcher": name})
    except LaunchError as exc:
        assert all(valid in str(exc) for valid in LAUNCHERS)
        return
    assert spec.launcher in LAUNCHERS


def _valid_block(launcher):
    counts = st.integers(1, 64)
    sizes = {"tensor_parallel_size": counts, "pipeline_parallel_size": counts, "context_parallel_size": counts}
    allowed = {k: v for k, v in sizes.items() if launcher in KEY_LAUNCHERS[k]}
    required = {"launcher": st.just(launcher)}
    if launcher == "sglang-disagg":
        required["nnodes"] = st.integers(3, 40)
    common = {"nnodes": counts,
              "nproc_per_node": counts | st.none() | st.just("auto"), "cpu_nproc_per_node": counts | st.none(),
              "backend": st.sampled_from([*BACKENDS, "rccl", "auto"]) | st.none(),
              "master_port": st.integers(1, 65535) | st.none(), **allowed}
    if launcher == "deepspeed":
        common["deepspeed"] = st.fixed_dictionaries({"hostfile": st.from_regex(r"\A/[a-z0-9_./-]{1,20}\Z")})
    if launcher == "primus":
        common["primus"] = st.fixed_dictionaries({"config_path": st.from_regex(r"\A[a-z]{1,8}\.yaml\Z"),
                                                  "cli_extra": st.text(st.characters(min_codepoint=32,
                                                                                     max_codepoint=126), max_size=12)})
    return st.fixed_dictionaries(required, optional={k: v for k, v in common.items() if k not in required})


valid_blocks = st.sampled_from(LAUNCHERS).flatmap(_valid_block)


@given(valid_blocks)
def test_every_valid_block_round_trips(block):
    spec = parse(block)
    assert spec.launcher == block["launcher"]
    assert parse(spec.to_block()) == spec
    if spec.launcher == "sglang-disagg":
        assert spec.prefill_nodes + spec.decode_nodes == spec.nnodes - 1 and min(spec.prefill_nodes,
                                                                                  spec.decode_nodes) >= 1

"""Every parser of user input, with a Hypothesis strategy for its input (no tests in this module).

``TARGETS`` maps a parser's name to ``(strategy, run)``: ``run(value, workdir)`` writes ``value``
where madengine reads it and calls the parser (and what consumes its result). The property, checked
by tests/test_fuzz_inputs.py and counted by benchmarks/fuzz_inputs.py: ``run`` raises nothing but
madengine's typed errors (:class:`madengine.core.errors.MadEngineError` subclasses).

Inputs mix well-formed documents with the edge cases of issue 11: integers of more than 4,300
digits, nesting deeper than the recursion limit, Infinity/NaN/1e999 where numbers are expected,
non-ASCII digits, control characters, truncated and non-UTF-8 text, broken CSV quoting.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

FIXTURE_REPO = Path(__file__).resolve().parent / "fixtures" / "repo"


class Raw:
    """JSON text written as is (what ``json.dumps`` cannot or will not write)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:  # shown by Hypothesis for a falsifying example
        return f"Raw({self.text[:40]!r}{'…' if len(self.text) > 40 else ''})"


EDGE_NUMBERS = [Raw(t) for t in ("1" + "0" * 5000, "-" + "9" * 4301, "1e999", "-1e999", "NaN", "Infinity",
                                 "-Infinity", "5e-324", "1.7e308", "-1.7e308", "1e-400", "0", "-0", "-1", "1.5")]
DEEP = [Raw("[" * 70 + "]" * 70), Raw('{"a":' * 900 + "1" + "}" * 900), Raw("[" * 1100 + "]" * 1100),
        Raw("[" * 20_000 + "]" * 20_000)]
ODD_TEXT = ["", " ", "²", "٣", "1²", "-1", "+2", "0x10", "1e3", "inf", "nan", "a\nb", "\x00", "\x1b[31m", "é",
            "://u:p@h", "http://user:pw@host:1/x", "s3://bucket/p", "../../etc", "/", "1" * 30, "true", "None"]

def weighted(choices: list[st.SearchStrategy]) -> st.SearchStrategy:
    """One of ``choices``, each as often as it is listed (``st.one_of`` counts a repeated strategy once)."""
    return st.sampled_from(choices).flatmap(lambda strategy: strategy)


texts = st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=8))
numbers = st.one_of(st.sampled_from(EDGE_NUMBERS), st.integers(), st.floats(), st.integers(-2, 70000))
leaves = st.one_of(st.none(), st.booleans(), numbers, texts)
_nested = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(texts, inner, max_size=3)), max_leaves=6)
json_values = weighted([_nested] * 9 + [st.sampled_from(DEEP)])  # one value in ten nests too deeply
#: a wrong value of any kind, cheap to draw: edge numbers, deep nesting, odd text, wrong types
odd = st.one_of(st.sampled_from([*EDGE_NUMBERS, *DEEP, *ODD_TEXT, None, True, [], {}, [1], {"a": 1}, ["x"]]),
                st.text(max_size=6), st.integers(), st.floats())


def field(*plausible: st.SearchStrategy) -> st.SearchStrategy:
    """A field's value: plausible seven times in eight, else odd."""
    return weighted([st.one_of(*plausible)] * 7 + [odd])


def to_json(value: Any) -> str:
    """JSON text of ``value``, Raw pieces and non-finite floats written as Python's json writes them."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


def documents(values: st.SearchStrategy) -> st.SearchStrategy:
    """Files made from ``values``: mostly whole, else truncated, with a character inserted, or
    arbitrary text/bytes."""
    whole = values.map(to_json)
    return weighted([
        whole, whole, whole, whole, whole, whole,
        st.tuples(whole, st.integers(0, 400)).map(lambda t: t[0][: t[1]]),
        st.tuples(whole, st.integers(0, 400), st.sampled_from(['"', ",", "}", "]", "\\", "\n", "\x00"]))
        .map(lambda t: t[0][: t[1]] + t[2] + t[0][t[1]:]),
        st.text(max_size=40), st.binary(max_size=40),
    ])


def objects(fields: dict[str, st.SearchStrategy], required: tuple[str, ...] = (), extra: bool = True,
            most: int = 4) -> st.SearchStrategy:
    """Objects with the ``required`` fields (each left out one time in ten), up to ``most`` other known
    fields, and sometimes an unknown one. Few fields per object keep drawing cheap."""
    names = [name for name in fields if name not in required]

    def build(chosen: tuple[list[str], list[bool]]) -> st.SearchStrategy:
        keys = [name for name, keep in zip(required, chosen[1]) if keep] + chosen[0]
        known = st.fixed_dictionaries({name: fields[name] for name in keys})
        if not extra:
            return known
        return st.tuples(known, st.dictionaries(texts, odd, max_size=1)).map(lambda t: {**t[1], **t[0]})

    keep = st.lists(st.integers(0, 9).map(lambda i: i != 9), min_size=len(required), max_size=len(required))
    return st.tuples(st.lists(st.sampled_from(names), max_size=most, unique=True) if names else st.just([]),
                     keep).flatmap(build)


# -- model catalogs ------------------------------------------------------------------------------
PATHS = st.sampled_from(["run.sh", "../dummy/run.sh", "scripts/dummy/run.sh", "docker/dummy", "", "/abs", "a b"])
MODEL_FIELDS = {
    "name": field(st.sampled_from(["m", "m2", "dummy", "a/b", "x" * 300]), texts),
    "scripts": field(PATHS), "dockerfile": field(PATHS), "args": field(texts, st.lists(texts, max_size=2)),
    "n_gpus": field(st.sampled_from(["1", "-1", "8", "²", "1.5"]), numbers), "timeout": field(numbers, texts),
    "tags": field(st.lists(texts, max_size=3), texts),
    "url": field(st.sampled_from(["https://u:pw@git.invalid/r.git", "git@host:r.git", "https://h/r.git"])),
    "data": field(texts), "cred": field(texts), "multiple_results": field(texts), "skip_gpu_arch": field(texts),
    "onnx": field(PATHS), "additional_docker_run_options": field(texts), "custom": json_values,
}
MODELS = st.lists(objects(MODEL_FIELDS, required=("name", "scripts")), max_size=3)
models_json = documents(weighted([MODELS] * 7 + [odd]))


def _consume_catalog(catalog) -> None:
    from madengine.catalog import list_catalog, select_models
    from madengine.core import jsonio

    listed, _errors = list_catalog(catalog)
    for model in listed:
        jsonio.dumps(model.to_dict())
        _ = model.run_args, model.data_names, model.skip_archs
    for tag in ("all", "m", "dyn/all"):
        try:
            select_models(catalog, [tag])
        except Exception as exc:
            from madengine.core.errors import MadEngineError

            if not isinstance(exc, MadEngineError):
                raise


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")


def run_models_json(content: str | bytes, workdir: Path) -> None:
    from madengine.catalog import load_catalog

    root = workdir / "root"
    shutil.rmtree(root, ignore_errors=True)
    _write(root / "models.json", content)
    _consume_catalog(load_catalog(root))


def run_sub_models_json(content: str | bytes, workdir: Path) -> None:
    from madengine.catalog import load_catalog

    root = workdir / "sub"
    shutil.rmtree(root, ignore_errors=True)
    _write(root / "scripts" / "dyn" / "models.json", content)
    _consume_catalog(load_catalog(root))


GET_MODELS_JSON = '''import pathlib
import pickle

from madengine.utils.discover_models import CustomModel


class Updating(CustomModel):
    def update_model(self):
        for key, value in self.__dict__.get("_updates", {}).items():
            setattr(self, key, value)


def list_models():
    spec = pickle.loads((pathlib.Path(__file__).parent / "spec.pickle").read_bytes())
    if not isinstance(spec, list):
        return spec
    models = []
    for item in spec:
        if not isinstance(item, tuple):
            models.append(item)
            continue
        model = Updating(**item[0])
        model._updates = item[1]
        models.append(model)
    return models
'''
python_values = st.one_of(st.sampled_from([{1, 2}, b"x", 1j, ("t",), object, frozenset()]), odd)
CUSTOM_FIELDS = {name: weighted([strategy] * 7 + [python_values]) for name, strategy in MODEL_FIELDS.items()
                 if name in ("name", "scripts", "dockerfile", "args", "n_gpus", "timeout", "tags", "url", "data")}
custom_entries = st.tuples(objects(CUSTOM_FIELDS, required=("name",), extra=False),
                           objects(CUSTOM_FIELDS, extra=False, most=2))
get_models_results = field(st.lists(field(custom_entries), max_size=3))


def run_get_models_json(spec: Any, workdir: Path) -> None:
    from madengine.catalog import load_catalog

    root = workdir / "dyn"
    folder = root / "scripts" / "dyn"
    if not (folder / "get_models_json.py").is_file():
        _write(folder / "get_models_json.py", GET_MODELS_JSON)
    (folder / "spec.pickle").write_bytes(pickle.dumps(spec))
    _consume_catalog(load_catalog(root))


# -- tags ------------------------------------------------------------------------------------------
QUOTES = st.sampled_from(["'", '"', "\\", " ", "'a b'", '"a', "a'b", "\n", "\x1b[2J", "$(x)", ";"])
tag_texts = st.lists(st.one_of(
    texts, st.sampled_from(["all", "dummy", "sub/all", "dyn/model3", "dummy:batch-size=8", "dummy::", "a/b/c",
                            ":x", "dummy:k!=v", "dummies,pass", "dummy:a\nb=1", "dyn/", "dummy:x='a",
                            'dummy:x="a b', "dummy:x=a\nb", "dummy:x='a b'"]),
    st.tuples(texts, texts, texts).map(lambda t: f"{t[0]}:{t[1]}={t[2]}"),
    st.lists(st.one_of(QUOTES, texts), max_size=4).map(lambda parts: "dummy:x=" + "".join(parts))), max_size=3)
_FIXTURE_CATALOG: list[Any] = []


def run_tags(tags: list[str], workdir: Path) -> None:
    """A selection either fails with a typed error naming the tag, or every selected model's
    arguments split as a shell line (a tag's bad quote never becomes a FAILURE row at run time)."""
    import shlex

    from madengine.catalog import load_catalog, select_models

    if not _FIXTURE_CATALOG:
        _FIXTURE_CATALOG.append(load_catalog(FIXTURE_REPO))
    for model in select_models(_FIXTURE_CATALOG[0], tags):
        model.to_dict()
        shlex.split(model.run_args)
        assert all(value.isprintable() for _key, value in model.tag_configs), model.tag_configs


# -- contexts -------------------------------------------------------------------------------------
CONTEXT_FIELDS = {
    "gpu_vendor": field(st.sampled_from(["AMD", "nvidia", "CPU", "x"])), "guest_os": field(texts),
    "timeout": field(numbers, texts), "n_gpus": field(numbers, texts), "system_ngpus": field(numbers),
    "docker_build_arg": field(st.dictionaries(texts, leaves, max_size=2)),
    "docker_env_vars": field(st.dictionaries(texts, leaves, max_size=2)),
    "docker_mounts": field(st.dictionaries(texts, texts, max_size=2)), "tools": field(st.lists(texts, max_size=2)),
    "pre_scripts": json_values, "data": json_values, "extra": json_values, "slurm": json_values,
    "distributed": json_values, "k8s": json_values, "docker_cpus": json_values,
    "docker_gpus": field(st.sampled_from(["0", "0,2-4", "3-1", "0-4096", "a-b", " 1 , 2 ", "-1", "1-", "٣"]),
                         st.integers(-2, 5000), texts),
}
contexts = objects(CONTEXT_FIELDS)
context_strings = st.one_of(
    documents(field(contexts)),
    contexts.filter(lambda v: not _has_raw(v)).map(repr),  # Python dict literals
    st.sampled_from(["{[]: 1}", "{gpu_vendor: AMD}", "{'a': __import__('os')}", "{1: 2}", "{b'k': 1}",
                     "{'a': {1, 2}}", "{'a': 1j}", "{'a': (1, [2])}", "{'a': -'x'}", "{**{}}",
                     "{'a': 1" + "0" * 5000 + "}",
                     "{'a': " + "[" * 2000 + "]" * 2000 + "}", "{'a': lambda: 1}", "{'a': f'x'}"]))


def _has_raw(value: Any) -> bool:
    if isinstance(value, Raw):
        return True
    if isinstance(value, dict):
        return any(_has_raw(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_raw(v) for v in value)
    return False


def _consume_context(context) -> None:
    """A context that builds holds only known keys, and a GPU list a run can read."""
    from madengine.context.context import parse_gpu_list
    from madengine.context.keys import KEYS

    _ = (context.gpu_vendor, context.gpu_architecture, context.system_ngpus, context.guest_os,
         context.docker_build_arg, context.docker_env_vars, context.docker_mounts, context.summary(),
         context.warnings())
    json.dumps(context.summary())
    assert set(context.values) <= set(KEYS), sorted(set(context.values) - set(KEYS))
    if context.get("docker_gpus") is not None:
        parse_gpu_list(context.get("docker_gpus"))


def run_context_string(text: str, workdir: Path) -> None:
    from madengine.context import build_context

    _consume_context(build_context(context_string=text, detect=False))


def run_context_file(content: str | bytes, workdir: Path) -> None:
    from madengine.context import build_context

    path = workdir / "context.json"
    _write(path, content)
    _consume_context(build_context(context_file=path, detect=False))


# -- tools.json ------------------------------------------------------------------------------------
SCRIPT_REFS = field(st.lists(objects({"path": field(PATHS), "args": field(texts, st.lists(texts, max_size=2))}),
                             max_size=2))
TOOL_FIELDS = {"cmd": field(texts, st.sampled_from(["rocprof --stats", "a 'b", "x \"y"])),
               "env_vars": field(st.dictionaries(texts, leaves, max_size=2)),
               "pre_scripts": SCRIPT_REFS, "post_scripts": SCRIPT_REFS, "outputs": field(st.lists(texts, max_size=2)),
               "summary": field(st.sampled_from(["cpu_monitor", "gpu_power", "nope"])), "description": field(texts)}
tools_documents = documents(st.one_of(
    st.fixed_dictionaries({"tools": st.dictionaries(st.sampled_from(["mine", "cpu_monitor", "x"]),
                                                    field(objects(TOOL_FIELDS)), max_size=2)}), odd))
tool_selections = st.lists(field(st.sampled_from(["mine", "cpu_monitor", "x"]),
                                 objects({"name": field(st.sampled_from(["mine", "x"])), "cmd": field(texts),
                                          "env_vars": field(st.dictionaries(texts, leaves, max_size=2))})),
                           max_size=2)
tools_inputs = st.tuples(tools_documents, tool_selections, SCRIPT_REFS)


def run_tools_json(value: tuple, workdir: Path) -> None:
    from madengine.tools.config import select_tools

    content, selection, scripts = value
    path = workdir / "tools.json"
    _write(path, content)
    select_tools({"tools": selection, "pre_scripts": scripts}, str(path), workdir)


# -- data.json and credentials ----------------------------------------------------------------------
PROVIDER_FIELDS = {"path": field(st.sampled_from(["s3://b/p", "/tmp", "fetch.sh", "s3://", "", "a b"])),
                   "home": field(st.sampled_from(["/data", "rel"])), "mirrorlocal": field(texts),
                   "readwrite": field(st.sampled_from(["true", "no", True])), "timeout": field(numbers, texts),
                   "endpoint": field(st.sampled_from(["http://u:pw@h:9000", "http://h"])), "region": field(texts),
                   "args": field(texts, st.lists(texts, max_size=2)), "known_hosts": field(texts),
                   "password": field(texts)}
PROVIDERS = st.dictionaries(st.sampled_from(["local", "minio", "aws", "nas", "custom", "ftp"]),
                            field(objects(PROVIDER_FIELDS, required=("path",))), max_size=2)
data_values = field(st.dictionaries(st.sampled_from(["d1", "d2", ""]), field(PROVIDERS), max_size=2))
data_inputs = st.tuples(documents(data_values), weighted([st.none()] * 3 + [data_values]))


def run_data_json(value: tuple, workdir: Path) -> None:
    from madengine.data.config import load_data_config

    content, context_data = value
    _write(workdir / "data.json", content)
    config = load_data_config("data.json", context_data, workdir)
    for name in config.entries:
        for provider in config.providers(name, "m"):
            _ = provider.path, provider.home, provider.readwrite, provider.mirrorlocal, provider.where


CRED_NAMES = ["DT", "MAD_MINIO", "MAD_AWS_S3", "NAS_NODES", "PUBLIC_GITHUB_ROCM_KEY"]
ENTRY_FIELDS = {key: field(texts) for key in (
    "username", "password", "token", "ssh_key_file", "known_hosts_file", "strict_host_key_checking",
    "USERNAME", "PASSWORD", "MINIO_ENDPOINT", "AWS_ENDPOINT_URL_S3", "HOST", "PORT", "KEY_FILE")}
ENTRY_FIELDS["PORT"] = field(numbers, texts)
entries = field(objects(ENTRY_FIELDS), st.lists(objects(ENTRY_FIELDS), max_size=2))
credential_documents = documents(field(st.dictionaries(st.sampled_from(CRED_NAMES), entries, max_size=3)))
credential_environments = st.dictionaries(st.sampled_from(CRED_NAMES), st.one_of(documents(entries), texts),
                                          max_size=3)


def _consume_credentials(credentials) -> None:
    from madengine.core.errors import MadEngineError

    first = None
    for call in (lambda: credentials.github_key(), lambda: credentials.s3("MAD_MINIO"),
                 lambda: credentials.s3("MAD_AWS_S3"), lambda: credentials.nas_nodes(),
                 lambda: credentials.entry("DT") and credentials.model_entry("DT", "m")):
        try:
            call()
        except MadEngineError as exc:  # each accessor is its own parser: try them all
            first = first or exc
    if first is not None:
        raise first


def _clean(text: str) -> str:
    return text.replace("\x00", "") if isinstance(text, str) else text.decode("utf-8", "replace").replace("\x00", "")


def run_credential_json(content: str | bytes, workdir: Path) -> None:
    from madengine.data.credentials import load_credentials

    path = workdir / "credential.json"
    _write(path, content)
    _consume_credentials(load_credentials(path, environ={}))


def run_credential_env(environ: dict, workdir: Path) -> None:
    from madengine.data.credentials import load_credentials

    # an environment variable cannot hold NUL bytes
    _consume_credentials(load_credentials(workdir / "absent.json", environ={k: _clean(v) for k, v in environ.items()}))


# -- performance lines, multiple_results CSVs, perf.csv ----------------------------------------------
NUMBER_TEXT = st.one_of(st.sampled_from(["7", "7.0", "-0.5", ".5", "1e999", "5e-324", "1.7e308", "nan", "1,000",
                                         "+3", "1e-400", "0", "1" + "0" * 400]),
                        st.floats().map(repr), st.integers().map(str))
perf_outputs = st.one_of(
    st.text(max_size=200),
    st.lists(st.tuples(texts, NUMBER_TEXT, st.sampled_from([" ", "/s, ", ", ", "  "]), texts)
             .map(lambda t: f"{t[0]}performance: {t[1]}{t[2]}{t[3]}"), max_size=4).map("\n".join))


def run_perf_line(output: str, workdir: Path) -> None:
    from madengine.results import PerfRecord, parse_performance

    found = parse_performance(output)
    if found is not None:
        PerfRecord(model="m", performance=found.value, metric=found.metric).to_row()


CELLS = st.one_of(NUMBER_TEXT, texts, st.sampled_from(['"', '"a', 'a"b', ",", "\n", "\r", "SUCCESS", "FAILURE"]))
COLUMNS = st.sampled_from(["model", "performance", "metric", "status", "run_id", "started_at", "gpu_architecture",
                           " model ", "extra", ""])


def _csv_text(header: list[str], rows: list[list[str]], quoted: bool) -> str:
    if quoted:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return buffer.getvalue()
    return "\n".join(",".join(cells) for cells in [header, *rows]) + "\n"  # quoting left as it falls


HEADERS = st.one_of(st.lists(COLUMNS, max_size=6),
                    st.lists(COLUMNS, max_size=3).map(lambda extra: ["model", "performance", "metric", *extra]))
csv_documents = st.one_of(
    st.builds(_csv_text, HEADERS, st.lists(st.lists(CELLS, max_size=6), max_size=4), st.booleans()),
    st.builds(_csv_text, HEADERS, st.lists(st.lists(CELLS, max_size=6), max_size=4), st.just(True)),
    st.text(max_size=120), st.binary(max_size=80))


def run_multiple_results(content: str | bytes, workdir: Path) -> None:
    from madengine.reports.update_perf import update_perf
    from madengine.results import PerfRecord
    from madengine.results.parsing import as_number, parse_multiple_results

    path = workdir / "multi.csv"
    _write(path, content)
    for row in parse_multiple_results(path):
        PerfRecord(model=row.get("model", ""), performance=as_number(row.get("performance", ""))).to_row()
    perf = workdir / "perf_multi.csv"
    perf.unlink(missing_ok=True)
    update_perf(perf, multiple_results=path, model_name="m")


def run_perf_csv(content: str | bytes, workdir: Path) -> None:
    from madengine.reports.compare import compare_csv
    from madengine.reports.summary import summarize
    from madengine.reports.table import load_table
    from madengine.results import PerfRecord, append_records, read_header, read_rows

    path = workdir / "perf.csv"
    _write(path, content)
    read_header(path)
    read_rows(path)
    summarize(load_table(path))
    compare_csv(path, path)
    append_records(path, [PerfRecord(model="m", status="SUCCESS", performance=1.0, metric="x")])


# -- build manifests -----------------------------------------------------------------------------------
IMAGE_FIELDS = {key: field(texts) for key in ("model", "image", "image_id", "dockerfile", "base_docker",
                                             "docker_sha", "built_at", "registry_image", "archive", "reason")}
IMAGE_FIELDS.update(build_args=field(st.dictionaries(texts, texts, max_size=2)), build_duration=field(numbers),
                    model_entry=field(objects(MODEL_FIELDS)))
manifest_documents = documents(field(
    objects({"format": st.just("madengine-build-manifest"), "format_version": field(st.just(1)),
             "images": field(st.lists(objects(IMAGE_FIELDS, required=("model", "image", "image_id", "dockerfile")),
                                      max_size=2)),
             "failed": field(st.lists(objects(IMAGE_FIELDS, required=("model", "reason")), max_size=2)),
             "tags": field(st.lists(texts, max_size=2)), "context": field(st.dictionaries(texts, leaves, max_size=2)),
             "registry": field(texts)})))


def run_manifest(content: str | bytes, workdir: Path) -> None:
    from madengine.distributed.manifest import load_manifest

    path = workdir / "build_manifest.json"
    _write(path, content)
    load_manifest(path)


# -- serving: the models.json block, serve-bench's load-point flags, ShareGPT files ----------------------------
SERVING_FIELDS = {
    "concurrency": field(st.lists(st.integers(-2, 70), max_size=3), st.sampled_from(["1,4", "1,,4", "", "0"])),
    "request_rate": field(st.lists(st.one_of(numbers, st.just("inf")), max_size=3), texts),
    "requests": field(numbers), "input_len": field(numbers), "output_len": field(numbers), "seed": field(numbers),
    "slo": field(st.dictionaries(st.sampled_from(["ttft_ms", "tpot_ms", "e2e_ms", "x"]), numbers, max_size=2), texts),
    "sweep": field(st.booleans(), st.dictionaries(st.sampled_from(["start", "steps", "max_rate", "attainment"]),
                                                  numbers, max_size=2)),
    "port": field(numbers), "dataset": field(PATHS), "max_error_rate": field(numbers), "ready_timeout": field(numbers),
    "request_timeout": field(numbers), "ignore_eos": field(st.booleans()), "api": field(texts),
    "model": field(texts), "server": field(texts), "path": field(texts),
}
serving_blocks = weighted([objects(SERVING_FIELDS, most=5)] * 7 + [odd])


def run_serving_block(block: Any, workdir: Path) -> None:
    from madengine.catalog.schema import model_from_entry
    from madengine.serving.models_json import check_blocks

    check_blocks([model_from_entry({"name": "m", "scripts": "s", "serving": block}, source="models.json")], workdir)


def run_load_point_flags(texts_: tuple[str, str, str], workdir: Path) -> None:
    from madengine.serving import loadpoints

    concurrency, rates, slo = texts_
    loadpoints.load_points(loadpoints.parse_concurrencies(concurrency), loadpoints.parse_rates(rates))
    loadpoints.parse_slo(slo)


load_point_flags = st.tuples(st.one_of(st.sampled_from(["1,4", "1,,4", "0", "٣", "1e3"]), texts),
                             st.one_of(st.sampled_from(["2,inf", "nan", "-1", "1e999", "0.5"]), texts),
                             st.one_of(st.sampled_from(["ttft_ms=5", "ttft_ms=5,ttft_ms=6", "x=1"]), texts))


def run_sharegpt(content: str | bytes, workdir: Path) -> None:
    from madengine.serving.prompts import sharegpt

    path = workdir / "sharegpt.json"
    _write(path, content)
    sharegpt(path, 3, None)


sharegpt_documents = documents(weighted([st.lists(st.fixed_dictionaries({"conversations": st.lists(
    st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt"]), "value": field(texts)}), max_size=3)}),
    max_size=3)] * 6 + [json_values]))


TARGETS: dict[str, tuple[st.SearchStrategy, Callable[[Any, Path], None]]] = {
    "models.json": (models_json, run_models_json),
    "scripts/<dir>/models.json": (models_json, run_sub_models_json),
    "get_models_json.py results": (get_models_results, run_get_models_json),
    "tags": (tag_texts, run_tags),
    "context string": (context_strings, run_context_string),
    "context file": (documents(field(contexts)), run_context_file),
    "tools.json": (tools_inputs, run_tools_json),
    "data.json": (data_inputs, run_data_json),
    "credential.json": (credential_documents, run_credential_json),
    "credential env overrides": (credential_environments, run_credential_env),
    "perf lines": (perf_outputs, run_perf_line),
    "multiple_results CSV": (csv_documents, run_multiple_results),
    "perf.csv readers": (csv_documents, run_perf_csv),
    "build manifest": (manifest_documents, run_manifest),
    "serving block": (serving_blocks, run_serving_block),
    "serve-bench load flags": (load_point_flags, run_load_point_flags),
    "ShareGPT file": (sharegpt_documents, run_sharegpt),
}


#: inputs that once escaped (now regression cases, run first by the test)
EXAMPLES: dict[str, list[Any]] = {
    "models.json": ['[{"name": "m", "scripts": "s", "timeout": Infinity}]', '[{"name": "m", "scripts": "s", "x": '
                    + "[" * 900 + "]" * 900 + "}]", '[{"name": "m", "scripts": "s", "n_gpus": "²"}]'],
    "context string": ['{"a":' * 900 + "1" + "}" * 900, "{[]: 1}", "{gpu_vendor: AMD}", '{"timeout": 1e999}',
                       "{'gpu_vendor': 'AMD', 'docker_gpus': 'a-b'}", "{'docker_options': '--memory 64m'}",
                       "{'docker_gpus': '0-99999999999'}", '{"a\\nb": 1}'],
    "tags": [["m:x='a"], ["dummy:x='a"], ["dummy:x=a\nb"]],
    "context file": ['{"a":' * 900 + "1" + "}" * 900, '{"n_gpus": Infinity}'],
    "data.json": [('{"d1": {"custom": {"path": "x", "timeout": NaN}}}', None)],
    "credential.json": ['{"NAS_NODES": [{"HOST": "h", "USERNAME": "u", "PORT": Infinity}]}'],
    "credential env overrides": [{"NAS_NODES": "[" * 900 + "]" * 900}, {"DT": "1" + "0" * 5000}],
    "multiple_results CSV": ['model,performance,metric\na,"1,x\n'],
    "build manifest": ['{"format": "madengine-build-manifest", "format_version": 1, "tags": 5}'],
}
#: parsers outside this helper's files whose known escapes are pending (name → who fixes what)
PENDING: dict[str, str] = {}

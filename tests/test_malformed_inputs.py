"""Malformed input never is a bug: every case runs the real CLI in-process and must end with exit 2,
exactly one line on stderr that names the file (or flag, or variable) at fault, and no traceback.

The table is the measurement of issue 11 ("Bad input: exit 3 means a bug"), extended: JSON edge cases
(integers of more than 4,300 digits, nesting deeper than the recursion limit, Infinity/NaN/1e999 where a
number is expected) in every file and environment override, context literals, odd fields and paths,
tags with newlines, and commands on broken files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from madengine.core.values import PART_LIMIT

HUGE_INT = "1" + "0" * 5000  # more than Python's 4,300-digit int/str conversion limit
DEEP_JSON = "[" * 100_000 + "]" * 100_000  # deeper than any recursion limit
DEEP_VALUE = "[" * 5_000 + "]" * 5_000  # deeper than orjson's 1,024 and json's recursion limit
RUN = ("run", "--tags", "m", "--executor", "local", "--no-html")
RUN_DATA = ("run", "--tags", "md", "--executor", "local", "--no-html")
RUN_NAS = ("run", "--tags", "mn", "--executor", "local", "--no-html")
RUN_CRED = ("run", "--tags", "mc", "--executor", "local", "--no-html")
RUN_TOOL = ("run", "--tags", "m", "--executor", "local", "--no-html", "-c", "{'tools': [{'name': 'mine'}]}")
MODELS = [
    {"name": "m", "scripts": "s/run.sh", "tags": ["t"]},
    {"name": "md", "scripts": "s/run.sh", "data": "d1"},
    {"name": "mn", "scripts": "s/run.sh", "data": "dn"},
    {"name": "mc", "scripts": "s/run.sh", "cred": "C1", "url": "https://git.example.invalid/r.git"},
]
DATA = {"d1": {"local": {"path": "/tmp"}}, "dn": {"nas": {"path": "/srv/data"}}}
GOOD_PERF = "model,status,performance,metric\na,SUCCESS,1,x\n"


def _model(**fields) -> str:
    return json.dumps([{"name": "m", "scripts": "run.sh", **fields}])


def _raw_model(field: str, raw: str) -> str:
    """models.json with ``field`` written as raw JSON text (json.dumps cannot write Infinity etc.)."""
    return '[{"name": "m", "scripts": "run.sh", "%s": %s}]' % (field, raw)


def _sub_model(field: str, raw: str) -> str:
    return '[{"name": "s", "scripts": "../../run.sh", "%s": %s}]' % (field, raw)


def _dynamic(body: str) -> str:
    return "from madengine.utils.discover_models import CustomModel\n" + body


def _context_data(raw_timeout: str) -> str:
    return '{"data": {"d1": {"custom": {"path": "fetch.sh", "timeout": %s}}}}' % raw_timeout


def _custom_data(raw_timeout: str) -> str:
    return '{"d1": {"custom": {"path": "fetch.sh", "timeout": %s}}}' % raw_timeout


def _nas_cred(raw_port: str) -> str:
    return '{"NAS_NODES": [{"HOST": "h", "USERNAME": "u", "PASSWORD": "p", "PORT": %s}]}' % raw_port


def _tools(raw: str) -> str:
    return '{"tools": {"mine": {"cmd": "true", "env_vars": {"A": "1"}, "outputs": %s}}}' % raw


# id, argv, files {relative path: text | bytes | None (a folder)}, environment, fragment of the one line
CASES = [
    # --- models.json -----------------------------------------------------------------------------
    ("models-huge-int", ("discover",), {"models.json": _raw_model("n_gpus", HUGE_INT)}, {}, "models.json"),
    ("models-deep", ("discover",), {"models.json": DEEP_JSON}, {}, "models.json: malformed JSON: nested too deeply"),
    ("models-deep-field", ("discover",), {"models.json": _raw_model("extra", DEEP_VALUE)}, {}, "models.json"),
    ("models-timeout-inf", ("discover",), {"models.json": _raw_model("timeout", "Infinity")}, {}, "timeout"),
    ("models-timeout-neg-inf", ("discover",), {"models.json": _raw_model("timeout", "-Infinity")}, {}, "timeout"),
    ("models-timeout-nan", ("discover",), {"models.json": _raw_model("timeout", "NaN")}, {}, "timeout"),
    ("models-timeout-1e999", ("discover",), {"models.json": _raw_model("timeout", "1e999")}, {}, "timeout"),
    ("models-timeout-1e300", ("discover",), {"models.json": _raw_model("timeout", "1e300")}, {}, "timeout"),
    ("models-timeout-huge-text", ("discover",), {"models.json": _raw_model("timeout", f'"{HUGE_INT}"')}, {},
     "timeout"),
    ("models-timeout-negative", ("discover",), {"models.json": _raw_model("timeout", "-5")}, {}, "timeout"),
    ("models-n_gpus-inf", ("discover",), {"models.json": _raw_model("n_gpus", "Infinity")}, {}, "n_gpus"),
    ("models-n_gpus-nan", ("discover",), {"models.json": _raw_model("n_gpus", "NaN")}, {}, "n_gpus"),
    ("models-n_gpus-1e999", ("discover",), {"models.json": _raw_model("n_gpus", "1e999")}, {}, "n_gpus"),
    ("models-n_gpus-superscript", ("discover",), {"models.json": _raw_model("n_gpus", '"²"')}, {}, "n_gpus"),
    ("models-n_gpus-arabic-digit", ("discover",), {"models.json": _raw_model("n_gpus", '"٣"')}, {}, "n_gpus"),
    ("models-n_gpus-fraction", ("discover",), {"models.json": _raw_model("n_gpus", "1.5")}, {}, "n_gpus"),
    ("models-n_gpus-bool", ("discover",), {"models.json": _raw_model("n_gpus", "true")}, {}, "n_gpus"),
    ("models-n_gpus-huge-text", ("discover",), {"models.json": _raw_model("n_gpus", f'"{HUGE_INT}"')}, {},
     "n_gpus"),
    ("models-not-utf8", ("discover",), {"models.json": b"[\xff\xfe]"}, {}, "models.json: not UTF-8"),
    ("models-folder", ("discover",), {"models.json": None}, {}, "models.json: is a folder"),
    ("models-empty", ("discover",), {"models.json": ""}, {}, "models.json: malformed JSON"),
    ("models-object", ("discover",), {"models.json": "{}"}, {}, "models.json: must hold a JSON array"),
    ("models-name-newline", ("discover",), {"models.json": _model(name="a\nb")}, {}, "models.json"),
    ("models-name-control", ("discover",), {"models.json": _model(name="a\x1b[31mb")}, {}, "models.json"),
    ("models-tags-number", ("discover",), {"models.json": _model(tags=[1])}, {}, "tags"),
    ("models-args-object", ("discover",), {"models.json": _model(args={"a": 1})}, {}, "args"),
    ("models-dockerfile-number", ("discover",), {"models.json": _model(dockerfile=5)}, {}, "dockerfile"),
    ("models-duplicate", ("discover",), {"models.json": json.dumps([{"name": "m", "scripts": "a"}] * 2)}, {},
     "defined twice"),
    # --- scripts/<dir>/models.json ---------------------------------------------------------------
    ("sub-huge-int", ("discover",), {"scripts/sub/models.json": _sub_model("n_gpus", HUGE_INT)}, {},
     "scripts/sub/models.json"),
    ("sub-deep", ("discover",), {"scripts/sub/models.json": DEEP_JSON}, {}, "scripts/sub/models.json"),
    ("sub-timeout-inf", ("discover",), {"scripts/sub/models.json": _sub_model("timeout", "Infinity")}, {},
     "scripts/sub/models.json"),
    ("sub-n_gpus-superscript", ("discover",), {"scripts/sub/models.json": _sub_model("n_gpus", '"²"')}, {},
     "n_gpus"),
    ("sub-folder-and-py", ("discover",), {"scripts/sub/models.json": "[]", "scripts/sub/get_models_json.py": ""},
     {}, "both models.json and get_models_json.py"),
    # --- scripts/<dir>/get_models_json.py --------------------------------------------------------
    ("dyn-sys-exit", ("discover",), {"scripts/dy/get_models_json.py": "import sys\nsys.exit(3)\n"}, {},
     "get_models_json.py"),
    ("dyn-list-models-exit", ("discover",),
     {"scripts/dy/get_models_json.py": "import sys\ndef list_models():\n    sys.exit(0)\n"}, {},
     "get_models_json.py"),
    ("dyn-syntax-error", ("discover",), {"scripts/dy/get_models_json.py": "def list_models(:\n"}, {},
     "get_models_json.py"),
    ("dyn-returns-none", ("discover",), {"scripts/dy/get_models_json.py": "def list_models():\n    return None\n"},
     {}, "not a list"),
    ("dyn-returns-dicts", ("discover",),
     {"scripts/dy/get_models_json.py": "def list_models():\n    return [{'name': 'x'}]\n"}, {}, "not a CustomModel"),
    ("dyn-no-name", ("discover",),
     {"scripts/dy/get_models_json.py": _dynamic("def list_models():\n    return [CustomModel(name='')]\n")}, {},
     "get_models_json.py"),
    ("dyn-selected-no-scripts", ("discover", "--tags", "dy/x"),
     {"scripts/dy/get_models_json.py": _dynamic("def list_models():\n    return [CustomModel(name='x')]\n")}, {},
     "dy/x"),
    ("dyn-update-raises", ("discover", "--tags", "dy/x"),
     {"scripts/dy/get_models_json.py": _dynamic(
         "class X(CustomModel):\n    def update_model(self):\n        raise RuntimeError('boom')\n"
         "def list_models():\n    return [X(name='x', scripts='run.sh')]\n")}, {}, "dy/x"),
    ("dyn-update-exits", ("discover", "--tags", "dy/x"),
     {"scripts/dy/get_models_json.py": _dynamic(
         "import sys\nclass X(CustomModel):\n    def update_model(self):\n        sys.exit(1)\n"
         "def list_models():\n    return [X(name='x', scripts='run.sh')]\n")}, {}, "dy/x"),
    ("dyn-timeout-inf", ("discover", "--tags", "dy/x"),
     {"scripts/dy/get_models_json.py": _dynamic(
         "def list_models():\n    return [CustomModel(name='x', scripts='run.sh', timeout=float('inf'))]\n")}, {},
     "timeout"),
    ("dyn-n_gpus-superscript", ("discover", "--tags", "dy/x"),
     {"scripts/dy/get_models_json.py": _dynamic(
         "def list_models():\n    return [CustomModel(name='x', scripts='run.sh', n_gpus='²')]\n")}, {}, "n_gpus"),
    ("dyn-run-selected-invalid", RUN[:2] + ("dy/x",) + RUN[3:],
     {"scripts/dy/get_models_json.py": _dynamic("def list_models():\n    return [CustomModel(name='x')]\n")}, {},
     "dy/x"),
    # --- tags ------------------------------------------------------------------------------------
    ("tag-newline", ("discover", "--tags", "mm\nx"), {}, {}, "--tags"),
    ("tag-newline-config", ("discover", "--tags", "m:a\nb=1"), {}, {}, "--tags"),
    ("tag-escape-sequence", ("discover", "--tags", "\x1b[2Jm"), {}, {}, "--tags"),
    ("tag-empty-piece", ("discover", "--tags", "m::x"), {}, {}, "--tags"),
    ("tag-bad-key", ("discover", "--tags", "m:k!=v"), {}, {}, "--tags"),
    ("tag-no-selector", ("discover", "--tags", ":x"), {}, {}, "--tags"),
    ("tag-run-newline", RUN[:2] + ("m\n",) + RUN[3:] + ("--tags", "q\nq"), {}, {}, "--tags"),
    ("tag-unbalanced-quote", RUN[:2] + ("m:x='a",) + RUN[3:], {}, {}, "--tags: tag 'm:x='a': the value of 'x'"),
    ("tag-unbalanced-double-quote", ("discover", "--tags", 'm:x="a b'), {}, {}, "--tags: tag 'm:x=\"a b'"),
    ("tag-config-value-newline", RUN[:2] + ("m:x=a\nb",) + RUN[3:], {}, {}, "tag 'm:x=a\\nb'"),
    ("tag-huge", ("discover", "--tags", "x" * 100_000 + "\n"), {}, {}, "characters cut"),
    # --- --additional-context --------------------------------------------------------------------
    ("ctx-unhashable-key", RUN + ("-c", "{[]: 1}"), {}, {}, "--additional-context"),
    ("ctx-unquoted-string", RUN + ("-c", "{gpu_vendor: AMD}"), {}, {}, "quote"),
    ("ctx-call", RUN + ("-c", "{'a': __import__('os')}"), {}, {}, "--additional-context"),
    ("ctx-timeout-inf", RUN + ("-c", '{"timeout": Infinity}'), {}, {}, "timeout"),
    ("ctx-timeout-nan", RUN + ("-c", '{"timeout": NaN}'), {}, {}, "timeout"),
    ("ctx-timeout-1e999", RUN + ("-c", '{"timeout": 1e999}'), {}, {}, "timeout"),
    ("ctx-timeout-1e300", RUN + ("-c", '{"timeout": 1e300}'), {}, {}, "timeout"),
    ("ctx-n_gpus-inf", RUN + ("-c", '{"n_gpus": Infinity}'), {}, {}, "n_gpus"),
    ("ctx-n_gpus-1e999", RUN + ("-c", '{"n_gpus": 1e999}'), {}, {}, "n_gpus"),
    ("ctx-n_gpus-superscript", RUN + ("-c", '{"n_gpus": "²"}'), {}, {}, "n_gpus"),
    ("ctx-n_gpus-arabic-digit", RUN + ("-c", '{"n_gpus": "٣"}'), {}, {}, "n_gpus"),
    ("ctx-n_gpus-bool", RUN + ("-c", '{"n_gpus": true}'), {}, {}, "n_gpus"),
    ("ctx-n_gpus-fraction", RUN + ("-c", '{"n_gpus": 1.5}'), {}, {}, "n_gpus"),
    ("ctx-system_ngpus-nan", RUN + ("-c", '{"system_ngpus": NaN}'), {}, {}, "system_ngpus"),
    ("ctx-huge-int-json", RUN + ("-c", '{"n_gpus": %s}' % HUGE_INT), {}, {}, "--additional-context"),
    ("ctx-huge-int-python", RUN + ("-c", "{'n_gpus': %s}" % HUGE_INT), {}, {}, "--additional-context"),
    ("ctx-deep-json", RUN + ("-c", '{"a": ' + DEEP_JSON + "}"), {}, {}, "--additional-context"),
    ("ctx-deep-python", RUN + ("-c", "{'a': " + "(" * 5000 + ")" * 5000 + "}"), {}, {}, "--additional-context"),
    ("ctx-not-a-dict", RUN + ("-c", "[1, 2]"), {}, {}, "--additional-context"),
    ("ctx-non-string-key", RUN + ("-c", "{1: 'x'}"), {}, {}, "--additional-context"),
    ("ctx-bytes-key", RUN + ("-c", "{b'gpu_vendor': 'AMD'}"), {}, {}, "--additional-context"),
    ("ctx-guest-os-object", RUN + ("-c", '{"guest_os": {}}'), {}, {}, "guest_os"),
    ("ctx-gpu-vendor-list", RUN + ("-c", '{"gpu_vendor": ["AMD"]}'), {}, {}, "gpu_vendor"),
    ("ctx-env-var-name", RUN + ("-c", '{"docker_env_vars": {"1A": "x"}}'), {}, {}, "docker_env_vars"),
    ("ctx-docker-gpus-word", RUN + ("-c", "{'gpu_vendor': 'AMD', 'docker_gpus': 'a-b'}"), {}, {},
     "--additional-context: docker_gpus: bad GPU list 'a-b'"),
    ("ctx-docker-gpus-reversed", RUN + ("-c", "{'docker_gpus': '4-2'}"), {}, {}, "docker_gpus"),
    ("ctx-docker-gpus-huge", RUN + ("-c", "{'docker_gpus': '0-99999999999'}"), {}, {}, "docker_gpus"),
    ("ctx-docker-gpus-list", RUN + ("-c", "{'docker_gpus': [0, 1]}"), {}, {}, "docker_gpus"),
    ("ctx-docker-options", RUN + ("-c", "{'docker_options': '--memory 64m'}"), {}, {},
     "--additional-context: docker_options: unknown context key (docker run options are a model's "
     "additional_docker_run_options"),
    ("ctx-unknown-key", RUN + ("-c", "{'bogus_key': 1}"), {}, {}, "bogus_key: unknown context key"),
    ("ctx-misspelt-key", RUN + ("-c", "{'docker_env': {'A': 1}}"), {}, {}, "did you mean docker_env_vars?"),
    ("ctx-key-newline", RUN + ("-c", '{"gpu_vendor\\nx": "AMD"}'), {}, {}, "gpu_vendor\\nx: unknown context key"),
    ("ctx-extra-not-a-dict", RUN + ("-c", "{'extra': 5}"), {}, {}, "extra: must be a dict"),
    ("ctx-owned-block-not-a-dict", RUN + ("-c", "{'distributed': 'torchrun'}"), {}, {}, "distributed: must be a dict"),
    ("ctx-data-timeout-inf", RUN_DATA + ("-c", _context_data("Infinity")), {}, {}, "timeout"),
    # --- --additional-context-file ---------------------------------------------------------------
    ("ctxfile-huge-int", RUN + ("-f", "ctx.json"), {"ctx.json": '{"n_gpus": %s}' % HUGE_INT}, {}, "ctx.json"),
    ("ctxfile-deep", RUN + ("-f", "ctx.json"), {"ctx.json": DEEP_JSON}, {}, "ctx.json"),
    ("ctxfile-timeout-inf", RUN + ("-f", "ctx.json"), {"ctx.json": '{"timeout": Infinity}'}, {}, "timeout"),
    ("ctxfile-n_gpus-1e999", RUN + ("-f", "ctx.json"), {"ctx.json": '{"n_gpus": 1e999}'}, {}, "n_gpus"),
    ("ctxfile-folder", RUN + ("-f", "ctx.json"), {"ctx.json": None}, {}, "ctx.json: is a folder"),
    ("ctxfile-list", RUN + ("-f", "ctx.json"), {"ctx.json": "[]"}, {}, "ctx.json"),
    ("ctxfile-unknown-key", RUN + ("-f", "ctx.json"), {"ctx.json": '{"gpu_vendr": "AMD"}'}, {},
     "ctx.json: gpu_vendr: unknown context key (did you mean gpu_vendor?"),
    # --- tools.json ------------------------------------------------------------------------------
    ("tools-huge-int", RUN_TOOL, {"tools.json": _tools(HUGE_INT)}, {}, "tools.json"),
    ("tools-deep", RUN_TOOL, {"tools.json": DEEP_JSON}, {}, "tools.json"),
    ("tools-deep-field", RUN_TOOL, {"tools.json": _tools(DEEP_VALUE)}, {}, "tools.json"),
    ("tools-outputs-nan", RUN_TOOL, {"tools.json": _tools("[NaN]")}, {}, "outputs"),
    ("tools-not-utf8", RUN_TOOL, {"tools.json": b"{\xff}"}, {}, "tools.json"),
    ("tools-flag-folder", RUN_TOOL + ("--tools-json-file-name", "tl"), {"tl": None}, {}, "tl"),
    # --- data.json -------------------------------------------------------------------------------
    ("data-huge-int", RUN_DATA, {"data.json": _custom_data(HUGE_INT)}, {}, "data.json"),
    ("data-deep", RUN_DATA, {"data.json": DEEP_JSON}, {}, "data.json"),
    ("data-timeout-inf", RUN_DATA, {"data.json": _custom_data("Infinity")}, {}, "timeout"),
    ("data-timeout-nan", RUN_DATA, {"data.json": _custom_data("NaN")}, {}, "timeout"),
    ("data-timeout-1e999", RUN_DATA, {"data.json": _custom_data("1e999")}, {}, "timeout"),
    ("data-timeout-huge-text", RUN_DATA, {"data.json": _custom_data(f'"{HUGE_INT}"')}, {}, "timeout"),
    ("data-folder", RUN_DATA, {"data.json": None}, {}, "data.json: is a folder"),
    ("data-not-utf8", RUN_DATA, {"data.json": b'{"\xff": 1}'}, {}, "data.json"),
    ("data-name-newline", RUN[:2] + ("mdn",) + RUN[3:],
     {"models.json": json.dumps(MODELS + [{"name": "mdn", "scripts": "s/run.sh", "data": "d\nx"}])}, {},
     "data 'd\\nx' is not defined"),
    # --- credential.json and its environment overrides --------------------------------------------
    ("cred-huge-int", RUN_CRED, {"credential.json": '{"C1": {"username": "u", "password": %s}}' % HUGE_INT}, {},
     "credential.json"),
    ("cred-deep", RUN_CRED, {"credential.json": DEEP_JSON}, {}, "credential.json"),
    ("cred-folder", RUN_CRED, {"credential.json": None}, {}, "credential.json: is a folder"),
    ("cred-nas-port-inf", RUN_NAS, {"credential.json": _nas_cred("Infinity")}, {}, "PORT"),
    ("cred-nas-port-nan", RUN_NAS, {"credential.json": _nas_cred("NaN")}, {}, "PORT"),
    ("cred-nas-port-1e999", RUN_NAS, {"credential.json": _nas_cred("1e999")}, {}, "PORT"),
    ("cred-nas-port-superscript", RUN_NAS, {"credential.json": _nas_cred('"²"')}, {}, "PORT"),
    ("cred-nas-port-fraction", RUN_NAS, {"credential.json": _nas_cred("22.5")}, {}, "PORT"),
    ("cred-env-huge-int", RUN_CRED, {}, {"C1": '{"username": "u", "password": %s}' % HUGE_INT},
     "environment variable C1"),
    ("cred-env-deep", RUN_CRED, {}, {"C1": DEEP_JSON}, "environment variable C1"),
    ("cred-env-nas-port-inf", RUN_NAS, {}, {"NAS_NODES": '[{"HOST": "h", "USERNAME": "u", "PORT": Infinity}]'},
     "PORT"),
    ("cred-env-nas-deep", RUN_NAS, {}, {"NAS_NODES": DEEP_JSON}, "environment variable NAS_NODES"),
    # --- report update-perf ----------------------------------------------------------------------
    ("update-perf-broken-quoting", ("report", "update-perf", "--multiple-results", "m.csv"),
     {"m.csv": 'model,performance,metric\na,"1,x\n'}, {}, "m.csv"),
    ("update-perf-multiple-not-utf8", ("report", "update-perf", "--multiple-results", "m.csv"),
     {"m.csv": b"model,performance,metric\n\xff,1,x\n"}, {}, "m.csv"),
    ("update-perf-single-huge-int", ("report", "update-perf", "--single_result", "r.json"),
     {"r.json": '{"model": "a", "performance": %s}' % HUGE_INT}, {}, "r.json"),
    ("update-perf-single-deep", ("report", "update-perf", "--single_result", "r.json"), {"r.json": DEEP_JSON}, {},
     "r.json"),
    ("update-perf-common-deep", ("report", "update-perf", "--single_result", "r.json", "--common-info", "c.json"),
     {"r.json": '{"model": "a"}', "c.json": DEEP_JSON}, {}, "c.json"),
    ("update-perf-perf-csv-folder", ("report", "update-perf", "--perf-csv", "out"), {"out": None}, {},
     "out: is a folder"),
    # --- reports and databases on broken files ----------------------------------------------------
    ("to-html-folder", ("report", "to-html", "--csv-file-path", "out"), {"out": None}, {}, "out: is a folder"),
    ("to-html-broken-quoting", ("report", "to-html", "--csv-file-path", "p.csv"),
     {"p.csv": 'model,performance\n"a,1\n'}, {}, "p.csv"),
    ("compare-folder", ("report", "compare", "out", "p.csv"), {"out": None, "p.csv": GOOD_PERF}, {}, "out"),
    ("compare-threshold-nan", ("report", "compare", "p.csv", "p.csv", "--threshold", "nan"), {"p.csv": GOOD_PERF},
     {}, "--threshold"),
    ("to-email-timeout-nan", ("report", "to-email", "--smtp-host", "localhost", "--to", "a@b", "--from", "c@d",
                              "--smtp-timeout", "nan"), {"p.csv": GOOD_PERF}, {}, "--smtp-timeout"),
    ("to-email-port-range", ("report", "to-email", "--smtp-host", "localhost", "--to", "a@b", "--from", "c@d",
                             "--smtp-port", "99999999"), {"p.csv": GOOD_PERF}, {}, "--smtp-port"),
    ("update-table-folder", ("database", "update-table", "--csv-file-path", "out", "--db-url", "sqlite:///t.db"),
     {"out": None}, {}, "out"),
    ("mongo-port-superscript", ("database", "upload-mongodb", "--type", "run", "--file-path", "p.csv",
                                "--name", "n"), {"p.csv": GOOD_PERF}, {"MONGO_PORT": "²"}, "MONGO_PORT"),
    ("mongo-timeout-superscript", ("database", "upload-mongodb", "--type", "run", "--file-path", "p.csv",
                                   "--name", "n"), {"p.csv": GOOD_PERF}, {"MONGO_TIMEOUT_MS": "²"},
     "MONGO_TIMEOUT_MS"),
    ("bench-min-time-inf", ("bench", "m.onnx", "--min-time", "inf"), {}, {}, "--min-time"),
    ("tuna-port-superscript", ("database", "list-runs"), {}, {"TUNA_DB_HOSTNAME": "h", "TUNA_DB_PORT": "²"},
     "TUNA_DB_PORT"),
    # --- run output -------------------------------------------------------------------------------
    ("run-output-folder", RUN + ("-o", "out"), {"out": None}, {}, "out: is a folder"),
]


@pytest.fixture
def small_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "s").mkdir()
    (repo / "s" / "run.sh").write_text("echo 'performance: 7 x'\n")
    (repo / "models.json").write_text(json.dumps(MODELS))
    (repo / "data.json").write_text(json.dumps(DATA))
    monkeypatch.chdir(repo)
    for name in ("MODEL_DIR", "C1", "NAS_NODES", "MONGO_PORT", "TUNA_DB_HOSTNAME", "MADENGINE_DB_URL"):
        monkeypatch.delenv(name, raising=False)
    return repo


def _write(repo: Path, files: dict) -> None:
    for relative, content in files.items():
        path = repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            path.unlink()
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.mark.parametrize("case_id, argv, files, environ, fragment", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line_exit_2(small_repo, monkeypatch, case_id, argv, files, environ, fragment):
    _write(small_repo, files)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    done = run_cli(*argv)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("madengine") and " error: " in line]
    assert done.code == 2, done
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done
    assert len(errors) == 1 and errors[0] == lines[-1], done
    assert fragment in errors[0], errors[0]
    assert "<ast." not in errors[0] and "\x1b" not in errors[0], errors[0]
    assert len(errors[0]) <= 4 * PART_LIMIT + 40, len(errors[0])  # four parts (file, field, message, hint)


def test_table_is_the_measurement():
    """The issue measured 60 cases; this table holds at least as many."""
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


def test_upload_mongodb_without_pymongo_is_an_install_hint(small_repo, monkeypatch):
    (small_repo / "p.csv").write_text(GOOD_PERF)
    for name in [n for n in sys.modules if n == "pymongo" or n.startswith(("pymongo.", "bson"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pymongo", None)  # what an environment without pymongo imports
    monkeypatch.setitem(sys.modules, "bson", None)
    done = run_cli("database", "upload-mongodb", "--type", "run", "--file-path", "p.csv", "--name", "n",
                   "--db-url", "mongodb://127.0.0.1:9")
    assert done.code == 2, done
    assert "pip install" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_key_of_the_original_madengine_runs_with_a_warning_and_extra_values_are_recorded(small_repo):
    """Keys the original accepted stay accepted (one warning line says when they change nothing here);
    free-form values under 'extra' pass through into the context column of the row."""
    done = run_cli(*RUN, "-c", "{'docker_cpus': '0-3', 'extra': {'team': 'perf\\nops'}}")
    assert done.code == 0, done
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == ["madengine: warning: context key 'docker_cpus' has no effect here (accepted for "
                        "compatibility with the original madengine); see docs/catalog-and-context.md"]
    from madengine.results import read_rows

    context = json.loads(read_rows(small_repo / "perf.csv")[-1]["context"])
    assert context["extra"] == {"team": "perf\nops"}


def test_a_failure_reason_quoting_user_text_stays_one_line(small_repo):
    """A FAILURE row's reason is an error's one line too: a newline in a models.json path is escaped in
    perf.csv and in the progress line."""
    models = json.loads((small_repo / "models.json").read_text())
    (small_repo / "models.json").write_text(json.dumps(models + [{"name": "mnl", "scripts": "s/no\nne.sh"}]))
    done = run_cli("run", "--tags", "mnl", "--executor", "local", "--no-html")
    assert done.code == 1, done
    from madengine.results import read_rows

    reason = read_rows(small_repo / "perf.csv")[-1]["reason"]
    assert reason.startswith("model 'mnl': script s/no\\nne.sh not found") and "\n" not in reason, reason
    assert not any(line.startswith("ne.sh") for line in done.stderr.splitlines()), done.stderr


# -- paths that name no regular file: a FIFO, a device that never ends, a folder (issue 34) -----------
RESULT = '{"model": "a", "performance": 1}'
#: id, argv with IN where the path goes (a path of the repository, or its fixed name), the files beside it
NON_REGULAR = [
    ("run-perf-csv", RUN + ("--perf-csv", "IN"), {}),
    ("run-context-file", RUN + ("--additional-context-file", "IN"), {}),
    ("run-data-config", RUN_DATA + ("--data-config-file-name", "IN"), {}),
    ("run-tools-json", RUN_TOOL + ("--tools-json-file-name", "IN"), {}),
    ("run-credential-json", RUN_CRED, {"IN": "credential.json"}),
    ("run-manifest", ("run", "--manifest-file", "IN", "--no-html"), {}),
    ("discover-models-json", ("discover",), {"IN": "models.json"}),
    ("update-perf-single-result", ("report", "update-perf", "--single-result", "IN"), {}),
    ("update-perf-exception-result", ("report", "update-perf", "--exception-result", "IN"), {}),
    ("update-perf-multiple-results", ("report", "update-perf", "--multiple-results", "IN", "--model-name", "m"), {}),
    ("update-perf-common-info", ("report", "update-perf", "--single-result", "r.json", "--common-info", "IN"), {}),
    ("update-perf-perf-csv", ("report", "update-perf", "--single-result", "r.json", "--perf-csv", "IN"), {}),
    ("to-html-perf-csv", ("report", "to-html", "--perf-csv", "IN"), {}),
    ("to-email-perf-csv", ("report", "to-email", "--csv-file-path", "IN", "--smtp-host", "127.0.0.1", "--smtp-port",
                           "9", "--to", "a@b", "--from", "c@d"), {}),
    ("compare-old", ("report", "compare", "IN", "p.csv"), {}),
    ("regressions-csv", ("report", "regressions", "IN"), {}),
    ("update-table-perf-csv", ("database", "update-table", "--perf-csv", "IN", "--db-url", "sqlite:///t.db"), {}),
    ("update-table-model-json", ("database", "update-table", "--perf-csv", "p.csv", "--model-json-path", "IN",
                                 "--db-url", "sqlite:///t.db"), {}),
    ("bench-suite", ("bench", "--suite", "IN"), {}),
]


#: inputs that take a folder too (its CSV files, its runs)
FOLDERS_OF_FILES = ("to-email-perf-csv", "compare-old")


def _no_more_memory_than(limit: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


NON_REGULAR_CASES = [(*case, kind) for case in NON_REGULAR for kind in ("fifo", "dev-zero", "folder")
                     if not (kind == "folder" and case[0] in FOLDERS_OF_FILES)]


@pytest.mark.parametrize("case_id, argv, names, kind", NON_REGULAR_CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in NON_REGULAR_CASES])
def test_a_path_that_is_no_regular_file_is_one_line_exit_2(small_repo, case_id, argv, names, kind):
    """Before: /dev/zero as --perf-csv took 2.6 GB and ignored Ctrl-C, other inputs ended in exit 3
    (MemoryError) under a 1.5 GB limit, a FIFO blocked forever. Now each is exit 2 at once, one line
    naming the path: a real process, under a 1.5 GB memory limit and a time limit."""
    import os
    import subprocess

    (small_repo / "r.json").write_text(RESULT)
    (small_repo / "p.csv").write_text(GOOD_PERF)
    name = names.get("IN", "in.file")
    target = small_repo / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        target.symlink_to("/dev/zero")
    else:
        target.mkdir()
    command = [sys.executable, "-m", "madengine", *(name if part == "IN" else part for part in argv)]
    try:
        done = subprocess.run(command, cwd=small_repo, capture_output=True, text=True, timeout=60,
                              preexec_fn=_no_more_memory_than(1536 << 20))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case_id}: still running after 60 s (a {kind} read without end)")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    expected = "is a folder" if kind == "folder" else "not a regular file"
    assert name in lines[0] and expected in lines[0], lines[0]


def test_a_configuration_file_over_64_mib_is_refused_unread(small_repo):
    """A context file of 65 MiB (sparse: no disk taken) is one line, exit 2, read no further than
    the limit."""
    import os

    with open(small_repo / "ctx.json", "wb") as handle:
        os.truncate(handle.fileno(), 65 << 20)
    done = run_cli(*RUN, "--additional-context-file", "ctx.json")
    assert done.code == 2, done
    assert done.stderr.strip().splitlines() == [
        "madengine: error: ctx.json: larger than 64 MiB, more than a file of this kind may hold "
        "(check that the path names the file meant)"], done

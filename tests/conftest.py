"""Shared test fixtures.

Services: ``require_service`` skips a test with a clear reason on a developer's laptop, but under
``CI=true`` a missing service is a failure, never a silent skip.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from madengine.cli import main
from madengine.cli.env import Environment
from otlp_receiver import otlp_receiver  # noqa: F401 (a fixture: the real OTLP/HTTP receiver of the tests)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _hypothesis_profiles() -> None:
    """Property tests are derandomized (the same cases on every machine); CI runs 500 cases per
    parser, a laptop 100 (HYPOTHESIS_PROFILE=ci to run CI's locally)."""
    from hypothesis import HealthCheck, settings

    common = dict(derandomize=True, database=None, deadline=None, print_blob=False,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.filter_too_much, HealthCheck.large_base_example])
    settings.register_profile("ci", max_examples=500, **common)
    settings.register_profile("dev", max_examples=100, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev"))


_hypothesis_profiles()


def _interruptible_children() -> None:
    """The suite started in the background of a shell (``bash scripts/test.sh &``, nohup) inherits
    SIGINT ignored, and so would every madengine it starts: a process started that way keeps
    ignoring Ctrl-C, as it should. The tests of Ctrl-C need their madengine to get it, so this
    process takes SIGINT back; the programs it starts then begin with the default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_interruptible_children()


def _private_cache() -> None:
    """The tests' catalog caches (and anything else cached) go to a folder of this session, not
    the user's ~/.cache; tests of the cache itself set their own."""
    if "MADENGINE_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="madengine-test-cache-")
        os.environ["MADENGINE_CACHE_DIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


_private_cache()


def require_service(name: str, available: bool, how: str) -> None:
    """Skip (laptop) or fail (CI=true) when a service the test needs is not there."""
    if available:
        return
    message = f"{name} is not available ({how})"
    if IN_CI:
        pytest.fail(f"CI=true: {message}; .ci/run must provide it")
    pytest.skip(message)  # only off CI: under CI=true the line above fails instead


def require_module(name: str):
    """The module ``name``: skipped without it (laptop), a failure under CI=true (the lock installs it)."""
    try:
        return pytest.importorskip(name)
    except pytest.skip.Exception as missing:
        if IN_CI:
            pytest.fail(f"CI=true: Python module {name} is not installed ({missing}); the lock must provide it")
        raise


@pytest.fixture(scope="session")
def pyt_wheels():
    """The wheels of the torch image's build context, docker/pyt (a no-op when they are there)."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "pyt-wheels.sh")], capture_output=True, text=True,
                          timeout=900)
    require_service("the pyt image's wheels (pip's index and find-links)", done.returncode == 0,
                    f"scripts/pyt-wheels.sh failed: {done.stderr.strip()[-400:]}")


class CliResult:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr

    def __repr__(self) -> str:  # shown by pytest on failures
        return f"CliResult(code={self.code}, stdout={self.stdout[-2000:]!r}, stderr={self.stderr[-4000:]!r})"


def run_record(repo: Path, log_lines: int = 60) -> str:
    """What a run under ``repo`` left, for a failed assertion's message: perf.csv whole and the
    last ``log_lines`` lines of every model's run.log (a CI failure must say why on its own)."""
    parts = []
    perf = repo / "perf.csv"
    parts.append(perf.read_text() if perf.exists() else "(no perf.csv)")
    for log in sorted(repo.glob("madengine_runs/*/*/run.log")):
        tail = log.read_text(errors="replace").splitlines()[-log_lines:]
        parts.append(f"--- {log.relative_to(repo)} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(parts)


def quiet_host() -> float:
    """The load reader of in-process runs: a quiet host (no runnable task but madengine's). A row's
    load columns and its busy-host note follow the machine the suite runs on (CI's own load, other
    jobs), so a test's verdict would too; the tests of that note inject the load they mean (or the
    real reader, ``madengine.core.host.runnable_per_cpu``)."""
    return 0.0


def run_cli(*argv: str, environ: dict | None = None, load=quiet_host) -> CliResult:
    """Run ``madengine`` in-process with captured streams, on a quiet host unless ``load`` says
    otherwise (:func:`quiet_host`)."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, environ={**os.environ, **(environ or {})}, load=load)
    code = main(list(argv), env)
    return CliResult(code, out.getvalue(), err.getvalue())


def terminal_signals() -> None:
    """A ``preexec_fn``: SIGINT, SIGTERM and SIGHUP at their defaults in the child, as a shell in a
    terminal starts a command. A suite started in the background (``cmd &`` in a script, ``nohup``)
    passes them on ignored, and madengine keeps an ignored signal ignored."""
    import signal

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def run_process(*argv: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
                input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``madengine`` as a real process (exit codes, signals, stdout/stderr separation)."""
    return subprocess.run([sys.executable, "-m", "madengine", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, input=input)


@pytest.fixture(autouse=True)
def _forget_secrets():
    """Secrets are registered process-wide (for redaction); no test sees another's."""
    yield
    from madengine.core.redact import clear_secrets

    clear_secrets()


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def model_repo(tmp_path, monkeypatch):
    """A copy of the test model repository (tests/fixtures/repo) as the current directory."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "repo", repo, symlinks=True)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MODEL_DIR", raising=False)
    return repo


def docker_engine_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=30).ping()  # a busy engine answers late; a stopped one at once
        return True
    except Exception:
        return False


BASE_IMAGE = os.environ.get("MADENGINE_BASE_IMAGE", "madengine-base:bookworm")


@pytest.fixture(scope="session")
def docker_client():
    require_service("Docker engine", docker_engine_available(), "run scripts/docker-up.sh")
    import docker

    client = docker.from_env(timeout=120)
    try:
        client.images.get(BASE_IMAGE)
    except Exception:
        require_service(f"base image {BASE_IMAGE}", False, "run scripts/docker-up.sh")
    return client


@pytest.fixture
def docker_cleanup(docker_client):
    """Removes every image and container whose name starts with a prefix the test registers.

    Tolerates objects that vanish meanwhile (another cleanup, a removal in progress)."""
    images: list[str] = []
    yield images
    from docker.errors import APIError

    def owned(name: str) -> bool:
        return any(name.startswith(p) for p in images)

    for summary in docker_client.api.containers(all=True):
        names = [n.lstrip("/") for n in summary.get("Names") or []]
        if any(owned(n[len("container_"):]) for n in names if n.startswith("container_")):
            try:
                docker_client.api.remove_container(summary["Id"], force=True)
            except APIError:
                pass
    for summary in docker_client.api.images():
        for tag in summary.get("RepoTags") or []:
            if owned(tag.split(":")[0]):
                try:
                    docker_client.api.remove_image(tag, force=True)
                except APIError:
                    pass
    try:  # images madengine built that a rebuild left without a name
        docker_client.api.prune_images(filters={"dangling": True, "label": "madengine.build-inputs"})
    except APIError:  # another prune is running (409): it removes them
        pass

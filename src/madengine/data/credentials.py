"""Credentials: ``credential.json``, environment overrides, git clone auth and model ``cred``.

``credential.json`` (in the model repository root) is a JSON object keyed by credential name. An
environment variable with the same name as an entry, holding JSON, replaces that entry, so CI can
inject credentials without a file. Every secret value, and every user name, is registered with
:mod:`madengine.core.redact` as soon as it is read, so it is masked in every text that leaves the
process; error messages name files and fields, never values.

Git clones get their credentials without putting them in the URL or on a command line: HTTPS
through a ``GIT_ASKPASS`` script that reads them from the git process's environment, SSH through
``GIT_SSH_COMMAND`` whose variable parts (key file, known-hosts file) are environment references
the shell expands, never text built from user data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from madengine.core.errors import CredentialError
from madengine.core.jsonio import MAX_DEPTH, json_problem, read_json_file, too_deep
from madengine.core.redact import register_secret, register_url_secrets, register_username
from madengine.core.values import brief, port_number

CREDENTIAL_FILE = "credential.json"
GITHUB_KEY = "PUBLIC_GITHUB_ROCM_KEY"
AWS_S3 = "MAD_AWS_S3"
MINIO = "MAD_MINIO"
NAS_NODES = "NAS_NODES"

#: entry fields that name an account: masked like a password (an S3 USERNAME is an access key id),
#: unless the name is a common one (:data:`madengine.core.redact.COMMON_USERNAMES`)
USERNAME_FIELDS = frozenset({"username", "user"})
#: entry fields that identify rather than authenticate; everything else is treated as a secret
NON_SECRET_FIELDS = frozenset({
    "name", "host", "port", "repository", "ssh_key_file", "key_file", "known_hosts",
    "known_hosts_file", "strict_host_key_checking", "host_key_fingerprint", "minio_endpoint",
    "aws_endpoint_url_s3", "endpoint", "region",
})
STRICT_HOST_KEY_CHECKING = ("yes", "accept-new", "no")

_ASKPASS_SCRIPT = """#!/bin/sh
# git asks "Username for '...'" and then "Password for '...'"; answer from the environment
case "$1" in
  Username*) printf '%s\\n' "$MADENGINE_GIT_USERNAME" ;;
  *) printf '%s\\n' "$MADENGINE_GIT_PASSWORD" ;;
esac
"""


def credential_file(root: Path | None = None) -> Path:
    """``credential.json`` of the model repository (``MODEL_DIR`` or the current directory)."""
    if root is None:
        from madengine.catalog import model_root

        root = model_root()
    return Path(root) / CREDENTIAL_FILE


def register_entry_secrets(value: Any, key: str = "", plain: frozenset[str] = NON_SECRET_FIELDS) -> None:
    """Register the secret values inside one entry (nested objects and lists included): every value
    of a field not in ``plain``, every user name, and the password of every URL in any string (an
    endpoint's ``http://user:password@host`` included)."""
    if isinstance(value, Mapping):
        for sub_key, sub_value in value.items():
            register_entry_secrets(sub_value, str(sub_key), plain)
    elif isinstance(value, list):
        for item in value:
            register_entry_secrets(item, key, plain)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        if key.lower() in USERNAME_FIELDS:
            register_username(value)
        elif key and key.lower() not in plain:
            register_secret(value)
        else:
            register_url_secrets(value)


@dataclasses.dataclass
class Credentials:
    """The entries of ``credential.json`` with environment overrides applied on access."""

    entries: dict[str, Any]
    path: str  # as shown in messages
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)

    def source(self, name: str) -> str:
        """Where the entry ``name`` comes from, for messages."""
        return f"environment variable {name}" if name in self.environ else self.path

    def raw(self, name: str) -> Any:
        """The entry ``name`` (environment first, as JSON), or None when neither defines it."""
        if name in self.environ:
            text = self.environ[name]
            try:
                value = json.loads(text)
            except (ValueError, RecursionError) as exc:
                if name == GITHUB_KEY and text.strip() and not text.lstrip().startswith(("{", "[")):
                    value = text.strip()  # a bare token is accepted for the GitHub key
                else:
                    message, hint = json_problem(exc)
                    raise CredentialError(message, path=f"environment variable {name}", hint=hint) from None
            if too_deep(value):
                raise CredentialError(f"nested more than {MAX_DEPTH} levels deep",
                                      path=f"environment variable {name}")
            register_entry_secrets(value, "password" if isinstance(value, str) else "")
            return value
        return self.entries.get(name)

    def entry(self, name: str) -> dict[str, Any] | None:
        """An object entry, or None when absent; a non-object is a :class:`CredentialError`."""
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise CredentialError(f"must be a JSON object, got {_json_type(value)}", path=self.source(name),
                                  field=name)
        return dict(value)

    def model_entry(self, name: str, model: str) -> dict[str, Any]:
        """The entry a model's ``cred`` names, validated for git and container use."""
        entry = self.entry(name)
        if entry is None:
            raise CredentialError(f"credential '{name}' of model '{model}' is not defined", path=self.path,
                                  hint=f"add an entry '{name}' to {CREDENTIAL_FILE} or set the environment "
                                       f"variable {name} to its JSON")
        for key, value in entry.items():
            if key in _GIT_FIELDS and not isinstance(value, str):
                raise CredentialError(f"must be a string, got {_json_type(value)}", path=self.source(name),
                                      field=f"{name}.{key}")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise CredentialError(f"must be a string or a number, got {_json_type(value)}",
                                      path=self.source(name), field=f"{name}.{key}")
        checking = entry.get("strict_host_key_checking")
        if checking is not None and str(checking) not in STRICT_HOST_KEY_CHECKING:
            raise CredentialError(f"must be one of {', '.join(STRICT_HOST_KEY_CHECKING)}", path=self.source(name),
                                  field=f"{name}.strict_host_key_checking")
        return entry

    def github_key(self) -> dict[str, Any] | None:
        """``PUBLIC_GITHUB_ROCM_KEY`` as a git credential entry (``username`` + ``token``/``password``)."""
        value = self.raw(GITHUB_KEY)
        if value is None:
            return None
        entry = {"token": value} if isinstance(value, str) else self.entry(GITHUB_KEY) or {}
        secret = entry.get("token", entry.get("password"))
        if not isinstance(secret, str) or not secret:
            raise CredentialError("needs a 'token' (or 'password') string", path=self.source(GITHUB_KEY),
                                  field=GITHUB_KEY)
        username = entry.get("username", "x-access-token")
        if not isinstance(username, str):
            raise CredentialError("must be a string", path=self.source(GITHUB_KEY), field=f"{GITHUB_KEY}.username")
        return {"username": username, "password": secret}

    def s3(self, name: str) -> dict[str, str]:
        """``MAD_AWS_S3`` / ``MAD_MINIO`` as a dict of upper-case keys (empty when not configured)."""
        entry = self.entry(name) or {}
        out: dict[str, str] = {}
        for key, value in entry.items():
            if not isinstance(value, str):
                raise CredentialError(f"must be a string, got {_json_type(value)}", path=self.source(name),
                                      field=f"{name}.{key}")
            out[str(key).upper()] = value
        return out

    def nas_nodes(self) -> list["NasNode"]:
        """``NAS_NODES``: a list of ``{NAME, HOST, PORT, USERNAME, PASSWORD | KEY_FILE, ...}``."""
        value = self.raw(NAS_NODES)
        if value is None:
            return []
        where = self.source(NAS_NODES)
        if isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, list):
            raise CredentialError(f"must be a list of node objects, got {_json_type(value)}", path=where,
                                  field=NAS_NODES)
        return [NasNode.from_entry(item, where, index) for index, item in enumerate(value)]


_GIT_FIELDS = ("username", "password", "token", "ssh_key_file", "known_hosts_file", "strict_host_key_checking")


@dataclasses.dataclass(frozen=True)
class NasNode:
    name: str
    host: str
    port: int
    username: str
    password: str = ""
    key_file: str = ""
    known_hosts: str = ""
    host_key_fingerprint: str = ""

    @classmethod
    def from_entry(cls, item: Any, where: str, index: int) -> "NasNode":
        field = f"{NAS_NODES}[{index}]"
        if not isinstance(item, Mapping):
            raise CredentialError(f"must be an object, got {_json_type(item)}", path=where, field=field)
        values = {str(k).upper(): v for k, v in item.items()}
        for key, value in values.items():
            if key != "PORT" and not isinstance(value, str):
                raise CredentialError(f"must be a string, got {_json_type(value)}", path=where, field=f"{field}.{key}")
        host = values.get("HOST") or values.get("IP") or ""
        if not host:
            raise CredentialError("needs a HOST", path=where, field=field)
        port = port_number(values.get("PORT", 22))
        if port is None:
            raise CredentialError(f"must be a port number (1-65535), got {brief(values.get('PORT'))}", path=where,
                                  field=f"{field}.PORT")
        username = values.get("USERNAME", "")
        if not username:
            raise CredentialError("needs a USERNAME", path=where, field=field)
        return cls(name=values.get("NAME", host), host=host, port=port, username=username,
                   password=values.get("PASSWORD", ""), key_file=values.get("KEY_FILE", ""),
                   known_hosts=values.get("KNOWN_HOSTS", ""),
                   host_key_fingerprint=values.get("HOST_KEY_FINGERPRINT", ""))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return "an object"


def load_credentials(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Credentials:
    """Read ``credential.json`` (absent → no entries) and register every secret in it."""
    path = Path(path) if path is not None else credential_file()
    shown = _shown(path)
    entries: dict[str, Any] = {}
    if path.exists():  # a folder of that name is an error, not an absent file
        data = read_json_file(path, error=CredentialError, shown=shown)
        if not isinstance(data, dict):
            raise CredentialError(f"must hold a JSON object keyed by credential name, got {_json_type(data)}",
                                  path=shown)
        register_entry_secrets(data)
        entries = data
    return Credentials(entries=entries, path=shown, environ=os.environ if environ is None else environ)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- model credentials in the container ----------------------------------------------------------
def credential_env(name: str, entry: Mapping[str, Any]) -> dict[str, str]:
    """``{NAME_USERNAME: ..., NAME_PASSWORD: ...}``: the entry's scalar values, keys upper-cased."""
    out: dict[str, str] = {}
    for key, value in entry.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out[f"{name}_{str(key).upper()}"] = str(value)
    return out


def apply_model_credentials(spec, root: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Give a model with ``cred: NAME`` its entry as container environment variables (never
    build arguments, which would persist in the image history)."""
    model = spec.model
    credentials = load_credentials(credential_file(root), environ)
    entry = credentials.model_entry(model.cred, model.name)
    register_entry_secrets(entry)
    spec.env.update(credential_env(model.cred, entry))


# -- git -----------------------------------------------------------------------------------------
def is_ssh_url(url: str) -> bool:
    if "://" in url:
        return urlsplit(url).scheme.lower() in ("ssh", "git+ssh", "ssh+git")
    # scp-like syntax user@host:path (a local path has no colon before its first slash)
    head = url.split("/", 1)[0]
    return ":" in head


def _ssh_url_user(url: str) -> str:
    if "://" in url:
        return urlsplit(url).username or ""
    head = url.split(":", 1)[0]
    return head.split("@", 1)[0] if "@" in head else ""


def _is_github(url: str) -> bool:
    host = urlsplit(url).hostname if "://" in url else url.split(":", 1)[0].split("@")[-1]
    return (host or "").lower() in ("github.com", "www.github.com")


def _without_url_password(url: str) -> tuple[str, dict[str, str] | None]:
    """A URL with an inline ``user:password@`` loses the password (registered as a secret) and
    yields it as a credential entry, so it reaches git through askpass rather than its argv."""
    if "://" not in url:
        return url, None
    parts = urlsplit(url)
    try:
        password, username = parts.password, parts.username
    except ValueError:
        return url, None
    if not password:
        return url, None
    register_secret(password)
    register_username(username)
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{username}@{host}" if username else host).geturl(), \
        {"username": username or "", "password": password}


def _config_env(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """git configuration through GIT_CONFIG_COUNT/KEY/VALUE, after any the caller already set."""
    try:
        start = int(os.environ.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        start = 0
    env = {"GIT_CONFIG_COUNT": str(start + len(pairs))}
    for offset, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{start + offset}"] = key
        env[f"GIT_CONFIG_VALUE_{start + offset}"] = value
    return env


def _https_environment(entry: Mapping[str, Any], where: str) -> tuple[dict[str, str], Callable[[], None]]:
    username = entry.get("username")
    password = entry.get("password", entry.get("token"))
    if not isinstance(username, str) or not username or not isinstance(password, str) or not password:
        raise CredentialError("an HTTPS git URL needs 'username' and 'password' (or 'token')", path=where)
    register_secret(password)
    register_username(username)
    folder = tempfile.mkdtemp(prefix="madengine-git-")
    script = Path(folder) / "askpass.sh"
    script.write_text(_ASKPASS_SCRIPT, encoding="utf-8")
    script.chmod(stat.S_IRWXU)
    env = {"GIT_ASKPASS": str(script), "MADENGINE_GIT_USERNAME": username, "MADENGINE_GIT_PASSWORD": password,
           "GIT_TERMINAL_PROMPT": "0"}
    # an empty helper list: git neither asks a user's helper first nor stores the password in it
    env.update(_config_env([("credential.helper", "")]))
    return env, lambda: shutil.rmtree(folder, ignore_errors=True)


def _ssh_environment(entry: Mapping[str, Any], url: str, where: str) -> dict[str, str]:
    key_file = entry.get("ssh_key_file")
    if not isinstance(key_file, str) or not key_file:
        raise CredentialError("an SSH git URL needs 'ssh_key_file'", path=where)
    key_path = Path(key_file).expanduser()
    check_key_file(key_path, where, "ssh_key_file")
    env = {"MADENGINE_SSH_KEY": str(key_path), "GIT_TERMINAL_PROMPT": "0",
           "MADENGINE_SSH_STRICT": str(entry.get("strict_host_key_checking") or "yes")}
    # only constant text here: the shell that git runs expands the quoted variables
    command = ['ssh -i "$MADENGINE_SSH_KEY" -o IdentitiesOnly=yes -o BatchMode=yes',
               '-o StrictHostKeyChecking="$MADENGINE_SSH_STRICT"']
    known_hosts = entry.get("known_hosts_file")
    if known_hosts:
        env["MADENGINE_SSH_KNOWN_HOSTS"] = str(Path(str(known_hosts)).expanduser())
        command.append('-o UserKnownHostsFile="$MADENGINE_SSH_KNOWN_HOSTS"')
    username = entry.get("username")
    if isinstance(username, str) and username and not _ssh_url_user(url):
        env["MADENGINE_SSH_USER"] = username
        command.append('-l "$MADENGINE_SSH_USER"')
    env["GIT_SSH_COMMAND"] = " ".join(command)
    return env


def check_key_file(path: Path, where: str, field: str) -> None:
    """A private key ssh will use: present, readable, not readable by others."""
    try:
        mode = path.stat().st_mode
    except OSError:
        raise CredentialError(f"key file {path} does not exist", path=where, field=field) from None
    if not path.is_file() or not os.access(path, os.R_OK):
        raise CredentialError(f"key file {path} is not a readable file", path=where, field=field)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialError(f"key file {path} is accessible by others; ssh refuses it", path=where, field=field,
                              hint=f"chmod 600 {path}")


def git_credential_entry(model, credentials: Credentials) -> tuple[dict[str, Any] | None, str]:
    """The entry used to clone ``model.url`` and where it comes from (for messages)."""
    if model.cred:
        entry = credentials.model_entry(model.cred, model.name)
        return entry, f"{credentials.source(model.cred)}: {model.cred}"
    if _is_github(model.url):
        entry = credentials.github_key()
        if entry is not None:
            return entry, f"{credentials.source(GITHUB_KEY)}: {GITHUB_KEY}"
    return None, ""


def needs_credentials(model) -> bool:
    """Whether cloning ``model.url`` reads credential.json: a ``cred``, or a github.com URL (for
    ``PUBLIC_GITHUB_ROCM_KEY``)."""
    return bool(model.cred) or (bool(model.url) and _is_github(model.url))


def git_environment(model, root: Path | None = None,
                    environ: Mapping[str, str] | None = None) -> tuple[dict[str, str] | None, str, Callable[[], None]]:
    """(environment for git, URL to clone, cleanup) for cloning ``model.url`` on the host."""
    url, inline = _without_url_password(model.url)
    entry, where = git_credential_entry(model, load_credentials(credential_file(root), environ)) \
        if needs_credentials(model) else (None, "")
    if entry is None and inline is not None:  # its password is registered; its user shows, as in every URL
        entry, where = inline, f"url of model '{model.name}'"
    elif entry is not None:
        register_entry_secrets(entry)
    if entry is None:
        return {"GIT_TERMINAL_PROMPT": "0"}, url, lambda: None
    if is_ssh_url(url):
        return _ssh_environment(entry, url, where), url, lambda: None
    env, cleanup = _https_environment(entry, where)
    return env, url, cleanup


def check_model_credentials(model, credentials: Credentials) -> None:
    """Fail early (before any run) when a model's credential cannot be used."""
    if model.cred:
        entry = credentials.model_entry(model.cred, model.name)
        where = f"{credentials.source(model.cred)}: {model.cred}"
    elif model.url:
        entry, where = git_credential_entry(model, credentials)
    else:
        return
    if not model.url or entry is None:
        return
    if is_ssh_url(model.url):
        key_file = entry.get("ssh_key_file")
        if not isinstance(key_file, str) or not key_file:
            raise CredentialError(f"model '{model.name}' clones over SSH and needs 'ssh_key_file'", path=where)
        check_key_file(Path(key_file).expanduser(), where, "ssh_key_file")
    else:
        password = entry.get("password", entry.get("token"))
        if not entry.get("username") or not password:
            raise CredentialError(f"model '{model.name}' clones over HTTPS and needs 'username' and 'password' "
                                  "(or 'token')", path=where)

"""madengine report to-email: the email body of a folder of CSVs, and sending it to a real SMTP
server (aiosmtpd, started on 127.0.0.1 by the test)."""

from __future__ import annotations

import email
import email.policy
import socket
from pathlib import Path

import pytest

from conftest import require_service
from madengine.core.redact import clear_secrets
from madengine.results import PerfRecord, append_records

XSS = "<script>alert(1)</script>"
PASSWORD = "smtp-secret-pw-123"


def write_csvs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    append_records(folder / "b_run.csv", [PerfRecord(model="bert", status="SUCCESS", performance=10.0, metric="x"),
                                          PerfRecord(model=XSS, status="FAILURE", reason="<b>boom</b>")])
    append_records(folder / "a_run.csv", [PerfRecord(model="gpt2", status="SUCCESS", performance=3.0, metric="ms"),
                                          PerfRecord(model="skip", status="SKIPPED")])
    (folder / "notes.txt").write_text("not a csv")
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Inbox:
    """An aiosmtpd handler keeping every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], email.message.EmailMessage]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 OK"


@pytest.fixture
def smtp_server():
    """A real SMTP server on 127.0.0.1 that accepts logins as alice / PASSWORD (no TLS, local only)."""
    try:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult
    except ImportError:
        Controller = None
    require_service("aiosmtpd", Controller is not None, "pip install -e '.[test]'")

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"alice" and auth_data.password == PASSWORD.encode()
        return AuthResult(success=ok, handled=False)  # handled=False: the server answers 535 itself

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(), authenticator=authenticate,
                            auth_require_tls=False)
    controller.start()
    try:
        yield controller.port, inbox
    finally:
        controller.stop()
        clear_secrets()


def test_body_has_a_section_per_csv_sorted_with_summary(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    out = cli("report", "to-email", "--csv-file-path", str(folder))
    assert out.code == 0, out
    target = folder / "run_results.html"
    assert out.stdout.strip() == str(target)
    body = target.read_text()
    assert body.index("<h2") < body.index(">a_run.csv</h2>") < body.index(">b_run.csv</h2>")
    assert "notes.txt" not in body and body.count("<h2") == 2
    assert "4 rows in 2 file(s): 2 SUCCESS, 1 FAILURE, 1 SKIPPED" in body  # subject/title
    assert "<script" not in body and "<svg" not in body  # mail clients run no scripts
    assert ">2</b> <span style=\"color:#64748b\">rows</span>" in body


def test_output_option_subject_and_dir_alias(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    target = tmp_path / "mail" / "body.html"
    assert cli("report", "to-email", "--dir", str(folder), "-o", str(target), "--subject", "Nightly & <co>").code == 0
    body = target.read_text()
    assert "<title>Nightly &amp; &lt;co&gt;</title>" in body and not (folder / "run_results.html").exists()


def test_default_folder_is_the_current_one(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(write_csvs(tmp_path / "here"))
    assert cli("report", "to-email").code == 0
    assert (tmp_path / "here" / "run_results.html").is_file()


def test_cell_text_is_escaped_in_the_email(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    cli("report", "to-email", "--csv-file-path", str(folder))
    body = (folder / "run_results.html").read_text()
    assert XSS not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<b>boom</b>" not in body and "&lt;b&gt;boom&lt;/b&gt;" in body


def test_bad_inputs(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = write_csvs(tmp_path / "broken")
    (broken / "c_bad.csv").write_text("model,status\nx,SUCCESS,extra\n")
    cases = [
        (("--csv-file-path", str(tmp_path / "absent")), "absent: file or folder not found"),
        (("--perf-csv", str(empty)), "no CSV files in this folder"),
        (("--csv-file-path", str(broken)), "c_bad.csv: data row 1 has 3 cells"),
        (("--csv-file-path", str(broken), "--smtp-host", "127.0.0.1"), "sending needs --from and --to"),
    ]
    for argv, expected in cases:
        out = cli("report", "to-email", *argv)
        assert out.code == 2 and expected in out.stderr, (argv, out)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out
    assert not (broken / "run_results.html").exists()


def test_one_perf_csv_is_a_report_of_its_own(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    out = cli("report", "to-email", "--perf-csv", str(folder / "a_run.csv"))
    assert out.code == 0, out
    assert (folder / "run_results.html").is_file()


def test_sends_a_mime_message(cli, tmp_path, smtp_server):
    port, inbox = smtp_server
    folder = write_csvs(tmp_path / "results")
    out = cli("report", "to-email", "--csv-file-path", str(folder), "--smtp-host", "127.0.0.1", "--smtp-port",
              str(port), "--to", "a@example.com,b@example.com", "--to", "c@example.com", "--from", "ci@example.com",
              "--subject", "nightly results")
    assert out.code == 0, out
    assert "sent to a@example.com, b@example.com, c@example.com" in out.stderr
    [(sender, recipients, message)] = inbox.messages
    assert sender == "ci@example.com" and recipients == ["a@example.com", "b@example.com", "c@example.com"]
    assert message["Subject"] == "nightly results" and message["To"] == "a@example.com, b@example.com, c@example.com"
    assert message.get_content_type() == "multipart/alternative"
    html_part = message.get_body(("html",)).get_content()
    text_part = message.get_body(("plain",)).get_content()
    assert html_part.replace("\r\n", "\n").rstrip() == (folder / "run_results.html").read_text().rstrip()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_part and XSS not in html_part
    assert "a_run.csv: 2 rows, 1 SUCCESS, 0 FAILURE, 1 SKIPPED" in text_part


def test_settings_from_the_environment_with_login(cli, tmp_path, smtp_server):
    port, inbox = smtp_server
    folder = write_csvs(tmp_path / "results")
    environ = {"MADENGINE_SMTP_HOST": "127.0.0.1", "MADENGINE_SMTP_PORT": str(port),
               "MADENGINE_SMTP_TO": "ops@example.com", "MADENGINE_SMTP_FROM": "bot@example.com",
               "MADENGINE_SMTP_USER": "alice", "MADENGINE_SMTP_PASSWORD": PASSWORD}
    out = cli("report", "to-email", "--csv-file-path", str(folder), environ=environ)
    assert out.code == 0, out
    [(sender, recipients, message)] = inbox.messages
    assert (sender, recipients) == ("bot@example.com", ["ops@example.com"])
    assert "4 rows in 2 file(s)" in message["Subject"]


def test_wrong_password_and_missing_password(cli, tmp_path, smtp_server):
    port, inbox = smtp_server
    folder = write_csvs(tmp_path / "results")
    argv = ("report", "to-email", "--csv-file-path", str(folder), "--smtp-host", "127.0.0.1", "--smtp-port",
            str(port), "--to", "a@example.com", "--from", "b@example.com", "--smtp-user", "alice")
    wrong = cli(*argv, environ={"MADENGINE_SMTP_PASSWORD": "wrong-password-1"})
    assert wrong.code == 2 and "the SMTP server refused the login (535)" in wrong.stderr, wrong
    assert "wrong-password-1" not in wrong.stderr + wrong.stdout
    missing = cli(*argv, environ={"MADENGINE_SMTP_PASSWORD": ""})
    assert missing.code == 2 and "an SMTP user needs a password" in missing.stderr, missing
    assert inbox.messages == []


def test_unreachable_server_is_a_service_error(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    out = cli("report", "to-email", "--csv-file-path", str(folder), "--smtp-host", "127.0.0.1", "--smtp-port",
              str(free_port()), "--to", "a@example.com", "--from", "b@example.com", "--smtp-timeout", "5")
    assert out.code == 2, out
    error = out.stderr.strip().splitlines()[-1]  # after the line saying where the body was written
    assert error.startswith("madengine: error: 127.0.0.1:") and "cannot send the email" in error
    assert [line for line in out.stderr.splitlines() if "error" in line] == [error]
    assert (folder / "run_results.html").is_file()  # the body is written before sending is tried


def test_bad_port_in_the_environment(cli, tmp_path):
    folder = write_csvs(tmp_path / "results")
    out = cli("report", "to-email", "--csv-file-path", str(folder),
              environ={"MADENGINE_SMTP_HOST": "127.0.0.1", "MADENGINE_SMTP_PORT": "smtp"})
    assert out.code == 2 and "MADENGINE_SMTP_PORT: 'smtp' is not a port number" in out.stderr

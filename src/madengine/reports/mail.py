"""The results email: one HTML body from every CSV of a folder, optionally sent over SMTP.

Every ``*.csv`` directly in the folder (not recursive), sorted by name, becomes one section with
the file's summary counts, its per-model table and its latest rows. Styles are inline and there
is no script or chart: mail clients strip them.
"""

from __future__ import annotations

import dataclasses
import datetime
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from madengine.core.version import __version__
from madengine.core.errors import CredentialError, InputError, ServiceError
from madengine.core.inputfile import check_input
from madengine.core.redact import redact
from madengine.reports.render import environment, rows_view, summary_cards, write_atomically
from madengine.reports.summary import Summary, summarize
from madengine.reports.table import bulk, load_table

DEFAULT_NAME = "run_results.html"
EMAIL_ROW_LIMIT = 500  # latest rows per file in the email
EMAIL_MODEL_LIMIT = 500


@dataclasses.dataclass
class EmailBody:
    html: str
    subject: str
    text: str  # the plain-text alternative
    files: list[Path]


@dataclasses.dataclass
class SmtpSettings:
    host: str
    port: int = 25
    sender: str = ""
    recipients: list[str] = dataclasses.field(default_factory=list)
    user: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    use_ssl: bool = False  # implicit TLS (port 465); otherwise STARTTLS whenever the server offers it
    timeout: float = 30.0


def csv_files(folder: Path) -> list[Path]:
    """A perf.csv itself, or the CSV files directly in a folder, sorted by name; InputError when
    there are none."""
    folder = Path(folder)
    if not folder.exists():
        raise InputError("file or folder not found", path=str(folder), hint="give a perf.csv or a folder of CSV files")
    if not folder.is_dir():
        check_input(folder)
        return [folder]
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".csv" and p.is_file())
    if not files:
        raise InputError("no CSV files in this folder", path=str(folder))
    return files


def _section(path: Path) -> tuple[dict, Summary]:
    table = load_table(path)
    summary = summarize(table)
    models = summary.models
    if len(models) > EMAIL_MODEL_LIMIT:
        models = sorted(sorted(models, key=lambda s: -s.rows)[:EMAIL_MODEL_LIMIT], key=lambda s: s.model)
    return {"name": path.name, "cards": summary_cards(summary), "models": models,
            "models_total": len(summary.models), "view": rows_view(table, EMAIL_ROW_LIMIT)}, summary


def build_email(folder: Path, subject: str | None = None) -> EmailBody:
    """The email body of every CSV in ``folder`` (see module docstring)."""
    files = csv_files(folder)
    sections, totals = [], {"rows": 0, "SUCCESS": 0, "FAILURE": 0, "SKIPPED": 0}
    for path in files:
        with bulk():
            section, summary = _section(path)
        sections.append(section)
        totals["rows"] += summary.total
        for status in ("SUCCESS", "FAILURE", "SKIPPED"):
            totals[status] += summary.counts[status]
    text = (f"madengine results: {totals['rows']} rows in {len(files)} file(s): {totals['SUCCESS']} SUCCESS, "
            f"{totals['FAILURE']} FAILURE, {totals['SKIPPED']} SKIPPED")
    subject = subject or text
    html = environment().get_template("email.html.j2").render(
        title=subject, folder=str(folder), sections=sections, version=__version__,
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    lines = [text, ""] + [f"{s['name']}: " + ", ".join(f"{v} {k}" for k, v, _ in s["cards"][:4]) for s in sections]
    return EmailBody(redact(html), redact(subject), redact("\n".join(lines) + "\n"), files)


def write_email(folder: Path, output: Path | None = None, subject: str | None = None) -> tuple[Path, EmailBody]:
    """Build the email body of ``folder`` and write it to ``output`` (default ``folder/run_results.html``)."""
    body = build_email(folder, subject)
    target = Path(output) if output else (Path(folder) if Path(folder).is_dir() else Path(folder).parent) / DEFAULT_NAME
    write_atomically(target, body.html)
    return target, body


def mime_message(body: EmailBody, settings: SmtpSettings) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = body.subject
    message["From"] = settings.sender
    message["To"] = ", ".join(settings.recipients)
    message["Date"] = formatdate(localtime=True)
    message["Message-ID"] = make_msgid(domain="madengine")
    message.set_content(body.text)
    message.add_alternative(body.html, subtype="html")
    return message


def send_email(body: EmailBody, settings: SmtpSettings) -> None:
    """Send ``body`` as a multipart (text + HTML) message; ServiceError/CredentialError on failure."""
    if not settings.sender or not settings.recipients:
        raise InputError("sending needs a sender and at least one recipient", path="--from/--to",
                         hint="or set MADENGINE_SMTP_FROM and MADENGINE_SMTP_TO")
    where = f"{settings.host}:{settings.port}"
    message = mime_message(body, settings)
    try:
        with _connect(settings) as smtp:
            if settings.user:
                smtp.login(settings.user, settings.password or "")
            smtp.send_message(message)
    except smtplib.SMTPAuthenticationError as exc:
        raise CredentialError(f"the SMTP server refused the login ({exc.smtp_code})", path=where,
                              hint="check --smtp-user and MADENGINE_SMTP_PASSWORD") from None
    except smtplib.SMTPRecipientsRefused as exc:
        refused = ", ".join(sorted(exc.recipients))
        raise InputError(f"the SMTP server refused the recipient(s) {refused}", path=where) from None
    except (smtplib.SMTPException, OSError) as exc:
        reason = redact(str(exc) or type(exc).__name__)
        raise ServiceError(f"cannot send the email: {reason}", path=where,
                           hint="check --smtp-host/--smtp-port and that the server is up") from None


def _connect(settings: SmtpSettings) -> smtplib.SMTP:
    if settings.use_ssl:
        return smtplib.SMTP_SSL(settings.host, settings.port, timeout=settings.timeout,
                                context=ssl.create_default_context())
    smtp = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout, local_hostname=_local_name())
    try:
        smtp.ehlo()
        if smtp.has_extn("starttls"):
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
    except BaseException:
        smtp.close()
        raise
    return smtp


def _local_name() -> str:
    # a stable name for HELO; getfqdn() can take seconds on hosts without DNS
    return socket.gethostname() or "localhost"

"""Reports on results: perf.html, the results email, comparisons, and appending result files
to perf.csv (``report update-perf``). Reports read perf.csv only; rows are appended only through
:mod:`madengine.results.perfcsv`.
"""

from madengine.reports.compare import CompareResult, Comparison, compare_csv, compare_paths, compare_rows, compare_runs
from madengine.reports.html import csv_to_html, render_html
from madengine.reports.mail import EmailBody, SmtpSettings, build_email, send_email, write_email
from madengine.reports.update_perf import update_perf

__all__ = [
    "CompareResult", "Comparison", "compare_csv", "compare_paths", "compare_rows", "compare_runs", "csv_to_html", "render_html", "EmailBody",
    "SmtpSettings", "build_email", "send_email", "write_email", "update_perf",
]

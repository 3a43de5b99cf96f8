"""Results: the one record type for a result, the perf.csv column set, parsing of a run's
performance, and the perf.csv writer. Knows nothing of executors; reports and databases read
results only through this package.
"""

from madengine.results.columns import EXTRA_COLUMNS, PERF_COLUMNS, Status
from madengine.results.record import PerfRecord, Provenance, RecordFactory
from madengine.results.outcome import RunSummary
from madengine.results.perfcsv import append_records, read_header, read_rows
from madengine.results.parsing import Performance, parse_performance, parse_multiple_results

__all__ = [
    "EXTRA_COLUMNS", "PERF_COLUMNS", "Status", "PerfRecord", "Provenance", "RecordFactory", "RunSummary", "append_records", "read_header",
    "read_rows", "Performance", "parse_performance", "parse_multiple_results",
]

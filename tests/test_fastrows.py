"""The C part of the perf.csv import (``madengine.database._fastrows``) against the Python it stands
in for: a plain line's cells as the csv module reads them, a row's key text as orjson writes the
dict of its non-empty cells, and a whole import the same with it and without it."""

import csv
import hashlib
import json
import sqlite3

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from madengine.database import rows as rowlib
from tests.conftest import require_module

LIMIT = 131072  # the csv module's default field limit


@pytest.fixture(scope="module")
def fast():
    """The built C part: an install without a C compiler leaves it out (a skip here), CI builds it."""
    return require_module("madengine.database._fastrows")


def read_by_csv(line: str):
    """What the import's Python path makes of one line: its cells stripped, or the csv error."""
    try:
        found = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        return f"error: {exc}"
    return [cell.strip() for cell in found[0]] if found else []


# lines made of what CSV syntax turns on, with text around it; a line ends as newline="" reading ends it
CSV_PIECES = st.sampled_from([",", '"', '""', " ", "\t", "\x0b", "\x1c", "a", "bc", "é", "\x00", "\\", "{}"])
LINE_ENDS = st.sampled_from(["", "\n", "\r\n", "\r"])


@given(st.lists(CSV_PIECES, max_size=16).map("".join), LINE_ENDS)
def test_a_line_split_in_c_has_the_cells_the_csv_module_reads(fast, body, end):
    line = body + end
    cells = fast.split_line(line, LIMIT)
    if cells is not None:  # None: the csv module reads the line
        assert cells == read_by_csv(line)


PLAIN_CELLS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@given(st.lists(st.tuples(PLAIN_CELLS, st.booleans()), min_size=1, max_size=12), LINE_ENDS)
def test_a_plain_line_is_split_in_c(fast, cells, end):
    """Cells of printable ASCII, quoted (quotes doubled) where they hold a quote or a comma, or
    where the writer chose to: the C path splits the line, none goes back to the csv module."""
    def written(cell: str, quoted: bool) -> str:
        return '"' + cell.replace('"', '""') + '"' if quoted or '"' in cell or "," in cell else cell

    body = ",".join(written(cell, quoted) for cell, quoted in cells)
    expected = [cell.strip() for cell, _ in cells] if body else []  # an empty line has no cells
    assert fast.split_line(body + end, LIMIT) == read_by_csv(body + end) == expected


def test_what_the_c_path_leaves_to_the_csv_module(fast):
    for line in ['a,"b\n',  # a quoted cell going on on the next line
                 'a,b"c\n',  # a quote inside an unquoted cell
                 '"a" ,b\n',  # text after a closing quote
                 "caf\u00e9,1\n",  # outside ASCII
                 "a\x00,b\n",
                 "x" * 20 + "\n"]:
        assert fast.split_line(line, 20) is None, line


KEY_CELLS = st.text(max_size=8) | st.sampled_from(["", '"', "\\", "\x00\x1f\x7f", "\u2028", "😀"])


@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), KEY_CELLS), max_size=10))
def test_the_key_text_in_c_is_the_bytes_orjson_writes(fast, named):
    by_name = dict(named)
    names = sorted(by_name)
    cells = tuple(by_name[name] for name in names)
    prefixes = tuple(orjson.dumps(name) + b":" for name in names)
    expected = orjson.dumps({k: v for k, v in by_name.items() if v != ""}, option=orjson.OPT_SORT_KEYS)
    assert fast.key_text(prefixes, cells) == rowlib._key_text(names, cells) == expected
    # and what earlier releases wrote with the json module
    assert expected == json.dumps({k: v for k, v in by_name.items() if v != ""}, sort_keys=True, ensure_ascii=False,
                                  separators=(",", ":")).encode()


def test_wrong_arguments_are_a_type_error_not_a_crash(fast):
    with pytest.raises(TypeError):
        fast.key_text((b'"a":',), ("x", "y"))
    with pytest.raises(TypeError):
        fast.key_text(("a",), ("x",))
    with pytest.raises(TypeError):
        fast.split_line(b"a,b\n", LIMIT)


# a perf.csv with a line of each kind: plain, quoted with doubled quotes, a cell over two lines,
# text outside ASCII, padded cells, a blank line, CRLF endings, a row repeated (occurrence numbers)
TRICKY = ("model,performance,metric,status,context,tags\r\n"
          "m1,1.5,samples_per_second,SUCCESS,\"{\"\"gpu\"\": \"\"x\"\"}\",\"a,b\"\r\n"
          "m2, 2.5 ,tokens,SUCCESS,\"two\r\nlines\",\r\n"
          "\r\n"
          "caf\u00e9,3.5,tokens,SUCCESS,,\r\n"
          "m1,1.5,samples_per_second,SUCCESS,\"{\"\"gpu\"\": \"\"x\"\"}\",\"a,b\"\r\n"
          "  m3  ,4.5,tokens,FAILURE,\" padded \",\r\n")


def stored(db) -> list[tuple]:
    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT row_key, model, performance, context, tags, relative_change "
                                  "FROM dlm_table ORDER BY id").fetchall()
    finally:
        connection.close()


def test_an_import_stores_the_same_rows_with_the_c_part_and_without(fast, tmp_path, monkeypatch, cli):
    perf = tmp_path / "perf.csv"
    perf.write_bytes(TRICKY.encode())
    with_c = tmp_path / "c.db"
    assert cli("database", "update-table", "--csv-file-path", str(perf), "--db-url", f"sqlite:///{with_c}").code == 0
    monkeypatch.setattr(rowlib, "_c_split_line", None)
    monkeypatch.setattr(rowlib, "_c_key_text", None)
    in_python = tmp_path / "py.db"
    assert cli("database", "update-table", "--csv-file-path", str(perf), "--db-url", f"sqlite:///{in_python}").code == 0
    rows = stored(with_c)
    assert rows == stored(in_python)
    assert [row[1] for row in rows] == ["m1", "m2", "caf\u00e9", "m1", "m3"]
    assert rows[1][3] == "two\r\nlines" and rows[4][3] == "padded"
    # the key of a row is the SHA-256 of its non-empty cells' JSON and its occurrence number
    cells = {"context": '{"gpu": "x"}', "metric": "samples_per_second", "model": "m1", "performance": "1.5",
             "status": "SUCCESS", "tags": "a,b"}
    text = json.dumps(cells, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    assert [rows[0][0], rows[3][0]] == [hashlib.sha256(text + b"\n#%d" % n).hexdigest() for n in (0, 1)]


def test_a_bad_line_after_a_cell_over_two_lines_is_named_by_its_line(fast, tmp_path, cli):
    perf = tmp_path / "perf.csv"
    perf.write_text("model,performance,context\nm1,1,\"two\nlines\"\nm2,2,x,extra\n")
    result = cli("database", "update-table", "--csv-file-path", str(perf), "--db-url", f"sqlite:///{tmp_path / 'r.db'}")
    assert result.code == 2
    assert "line 4 has 4 cells but the header has 3" in result.stderr


def test_the_lines_madengine_writes_take_the_c_path(fast):
    """A row as ``madengine run`` writes it (csv.writer: JSON cells, quoted lists, empty cells) is a
    plain line."""
    import io

    row = ["pyt_bert", "8", "fp16", "", "--batch-size 1", "pyt,nightly", "rocm/pytorch:latest", "96.6263",
           "samples_per_second", "", "SUCCESS", '{"gpu_architecture": "gfx942", "system_ngpus": 8}',
           "[96.5492, 96.6263, 96.7448]", '{"python": "3.10.14", "torch": "2.3.0+rocm6.2"}', "0.06"]
    for ending in ("\n", "\r\n"):
        out = io.StringIO(newline="")
        csv.writer(out, lineterminator=ending).writerow(row)
        assert fast.split_line(out.getvalue(), LIMIT) == row

/* Two steps of a perf.csv import (madengine.database.rows) in C, where a million rows spent a
 * third of their CPU: splitting each line into its cells, and writing the key text of each row.
 * Each gives exactly what the Python path it replaces gives, or hands the case back to it; property
 * tests hold the two to the same results (tests/test_fastrows.py).
 *
 * split_line(line, limit) -> list[str] | None
 *   the cells of one line of a CSV read with newline="", each stripped as str.strip does: what
 *   [c.strip() for c in next(csv.reader([line], strict=True))] gives ([] for an empty line); None
 *   where the line is not the plain case (a character outside ASCII, a NUL, a quote inside an
 *   unquoted cell or not closed on the line, text after a closing quote, a line of `limit`
 *   characters or more): the caller reads that line with the csv module.
 *
 * key_text(prefixes, cells) -> bytes
 *   prefixes: a tuple of bytes, each a column's JSON name and a colon ('"model":'), sorted by name
 *   cells:    a tuple of str, the row's cells in the same order
 *   returns '{' + the non-empty cells as '"name":"value"' joined by ',' + '}': what
 *   orjson.dumps(dict_of_the_non_empty_cells, option=OPT_SORT_KEYS) writes, byte for byte (a value
 *   is written as UTF-8; '"' and '\' are escaped, and the characters below U+0020 as \b \t \n \f
 *   \r or \u00xx).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* bytes a UTF-8 byte takes once escaped */
static unsigned char escaped_size[256];
static const char HEX[] = "0123456789abcdef";

static void init_sizes(void) {
    for (int b = 0; b < 256; b++) {
        escaped_size[b] = 1;
    }
    for (int b = 0; b < 0x20; b++) {
        escaped_size[b] = 6;
    }
    escaped_size['\b'] = escaped_size['\t'] = escaped_size['\n'] = escaped_size['\f'] = escaped_size['\r'] = 2;
    escaped_size['"'] = escaped_size['\\'] = 2;
}

/* whether any of the 8 bytes of ``word`` must be escaped: below 0x20, '"' or '\\' (each test sets
 * the high bit of a byte that matches; bytes of 0x80 and over never match) */
static inline int any_escaped(uint64_t word) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = word ^ (ones * '"'), slash = word ^ (ones * '\\');
    uint64_t below = (word - ones * 0x20) & ~word;
    uint64_t is_quote = (quote - ones) & ~quote, is_slash = (slash - ones) & ~slash;
    return ((below | is_quote | is_slash) & highs) != 0;
}

/* the bytes ``text`` takes once escaped */
static Py_ssize_t escaped_length(const unsigned char *text, Py_ssize_t size) {
    Py_ssize_t total = size, k = 0;
    for (; k + 8 <= size; k += 8) {
        uint64_t word;
        memcpy(&word, text + k, 8);
        if (!any_escaped(word)) {
            continue;
        }
        for (int j = 0; j < 8; j++) {
            total += escaped_size[text[k + j]] - 1;
        }
    }
    for (; k < size; k++) {
        total += escaped_size[text[k]] - 1;
    }
    return total;
}

static char *write_escaped(char *out, const unsigned char *text, Py_ssize_t size) {
    Py_ssize_t run = 0, k = 0;  /* run: where the bytes not copied yet start */
    for (; k < size; k++) {
        if (!(k & 7) && k + 8 <= size) {  /* eight bytes at once while none needs escaping */
            uint64_t word;
            memcpy(&word, text + k, 8);
            if (!any_escaped(word)) {
                k += 7;
                continue;
            }
        }
        unsigned char b = text[k];
        if (escaped_size[b] == 1) {
            continue;
        }
        memcpy(out, text + run, (size_t)(k - run));
        out += k - run;
        run = k + 1;
        *out++ = '\\';
        switch (b) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\t': *out++ = 't'; break;
        case '\n': *out++ = 'n'; break;
        case '\f': *out++ = 'f'; break;
        case '\r': *out++ = 'r'; break;
        default:
            *out++ = 'u'; *out++ = '0'; *out++ = '0';
            *out++ = HEX[b >> 4]; *out++ = HEX[b & 15];
        }
    }
    memcpy(out, text + run, (size_t)(size - run));
    return out + (size - run);
}

static PyObject *key_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])
            || PyTuple_GET_SIZE(args[0]) != PyTuple_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_TypeError, "key_text(prefixes, cells): two tuples of the same length");
        return NULL;
    }
    PyObject *prefixes = args[0], *cells = args[1];
    Py_ssize_t count = PyTuple_GET_SIZE(cells), total = 2, written = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *cell = PyTuple_GET_ITEM(cells, i), *prefix = PyTuple_GET_ITEM(prefixes, i);
        if (!PyUnicode_Check(cell) || !PyBytes_Check(prefix)) {
            PyErr_SetString(PyExc_TypeError, "key_text(prefixes, cells): bytes prefixes, str cells");
            return NULL;
        }
        Py_ssize_t size;
        const unsigned char *text = (const unsigned char *)PyUnicode_AsUTF8AndSize(cell, &size);
        if (text == NULL) {
            return NULL;
        }
        if (size == 0) {
            continue;
        }
        total += PyBytes_GET_SIZE(prefix) + 2 + (written++ ? 1 : 0) + escaped_length(text, size);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        return NULL;
    }
    char *start = PyBytes_AS_STRING(result), *out = start;
    *out++ = '{';
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size;  /* the first pass made each cell's UTF-8 (CPython keeps it): this cannot fail */
        const unsigned char *text = (const unsigned char *)PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(cells, i), &size);
        if (size == 0) {
            continue;
        }
        if (out != start + 1) {  /* a comma after the first cell */
            *out++ = ',';
        }
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, i);
        memcpy(out, PyBytes_AS_STRING(prefix), (size_t)PyBytes_GET_SIZE(prefix));
        out += PyBytes_GET_SIZE(prefix);
        *out++ = '"';
        out = write_escaped(out, text, size);
        *out++ = '"';
    }
    *out = '}';
    return result;
}

/* what str.strip removes, of the ASCII characters */
static unsigned char is_space[128];

static void init_spaces(void) {
    const char spaces[] = " \t\n\v\f\r\x1c\x1d\x1e\x1f";
    for (const char *c = spaces; *c; c++) {
        is_space[(unsigned char)*c] = 1;
    }
}

/* ``size`` bytes at ``text``, stripped, as a str appended to ``cells`` (0) or -1 */
static int append_stripped(PyObject *cells, const char *text, Py_ssize_t size) {
    while (size && is_space[(unsigned char)text[0]]) {
        text++;
        size--;
    }
    while (size && is_space[(unsigned char)text[size - 1]]) {
        size--;
    }
    PyObject *cell = PyUnicode_New(size, 127);  /* ASCII: nothing to decode (0: the empty str) */
    if (cell == NULL) {
        return -1;
    }
    memcpy(PyUnicode_DATA(cell), text, (size_t)size);
    int failed = PyList_Append(cells, cell);
    Py_DECREF(cell);
    return failed;
}

static PyObject *split_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "split_line(line, limit): a str and an int");
        return NULL;
    }
    PyObject *line = args[0];
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(line)) {
        Py_RETURN_NONE;
    }
    const char *text = (const char *)PyUnicode_DATA(line);
    Py_ssize_t size = PyUnicode_GET_LENGTH(line);
    if (size && text[size - 1] == '\n') {
        size--;
    }
    if (size && text[size - 1] == '\r') {
        size--;
    }
    /* a line read with newline="" has no other line break; NUL and long lines go to the csv module */
    if (size >= limit || memchr(text, '\0', (size_t)size) != NULL || memchr(text, '\r', (size_t)size) != NULL
            || memchr(text, '\n', (size_t)size) != NULL) {
        Py_RETURN_NONE;
    }
    PyObject *cells = PyList_New(0);
    if (cells == NULL || size == 0) {
        return cells;  /* an empty line: no cells, as the csv module gives */
    }
    char *unquoted = NULL;  /* the text of a quoted cell with doubled quotes, made once needed */
    Py_ssize_t k = 0;
    for (;;) {  /* one cell a turn; k: where it starts (the line's end after a comma: an empty cell) */
        if (k == size || text[k] != '"') {
            const char *comma = memchr(text + k, ',', (size_t)(size - k));
            Py_ssize_t end = comma ? comma - text : size;
            if (memchr(text + k, '"', (size_t)(end - k)) != NULL) {
                goto plain_case_only;  /* a quote inside an unquoted cell */
            }
            if (append_stripped(cells, text + k, end - k) < 0) {
                goto failed;
            }
            if (end == size) {
                break;
            }
            k = end + 1;
            continue;
        }
        /* a quoted cell: up to the quote not doubled, then a comma or the line's end */
        Py_ssize_t start = k + 1, length = 0, at = start;
        int doubled = 0;
        for (;;) {
            const char *quote = memchr(text + at, '"', (size_t)(size - at));
            if (quote == NULL) {
                goto plain_case_only;  /* the cell goes on past the line */
            }
            Py_ssize_t q = quote - text;
            if (q + 1 < size && text[q + 1] == '"') {
                doubled = 1;
                at = q + 2;
                continue;
            }
            length = q - start;
            k = q + 1;
            break;
        }
        if (k < size && text[k] != ',') {
            goto plain_case_only;  /* text after the closing quote */
        }
        const char *value = text + start;
        Py_ssize_t value_size = length;
        if (doubled) {
            if (unquoted == NULL && (unquoted = PyMem_Malloc((size_t)size)) == NULL) {
                PyErr_NoMemory();
                goto failed;
            }
            Py_ssize_t n = 0;
            for (Py_ssize_t j = start; j < start + length; j++) {
                unquoted[n++] = text[j];
                if (text[j] == '"') {
                    j++;  /* the second quote of a pair */
                }
            }
            value = unquoted;
            value_size = n;
        }
        if (append_stripped(cells, value, value_size) < 0) {
            goto failed;
        }
        if (k == size) {
            break;
        }
        k++;  /* past the comma */
    }
    PyMem_Free(unquoted);
    return cells;
plain_case_only:
    PyMem_Free(unquoted);
    Py_DECREF(cells);
    Py_RETURN_NONE;
failed:
    PyMem_Free(unquoted);
    Py_DECREF(cells);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split_line", (PyCFunction)(void (*)(void))split_line, METH_FASTCALL,
     "split_line(line, limit) -> list[str] | None: the stripped cells of a plain CSV line (see the module)"},
    {"key_text", (PyCFunction)(void (*)(void))key_text, METH_FASTCALL,
     "key_text(prefixes, cells) -> bytes: the key text of a row's non-empty cells (see the module)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "madengine.database._fastrows",
    "Splitting perf.csv lines and writing their key text, in C (madengine.database.rows).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastrows(void) {
    init_sizes();
    init_spaces();
    return PyModule_Create(&module);
}

/* ddtreed._fastscan: the serving watch's reading of a log block's decode lines in one C pass.
 *
 * Optional: built where a C compiler is found (setup.py, optional=True); without it
 * ddtreed.health.serving reads the block with `re` (`_EVERY_DECODE_BYTES`), the reference this
 * module is held to (tests/test_fastscan.py). Only bytes are read; nothing is decoded.
 *
 * Every "Decode batch, " of the block, outside the given line spans, is one decode line. Its rest
 * is read as SGLang 0.5.16 prints it (the `_STRICT_DECODE` form):
 *   #running-req: D, #token: D, token usage: D.D, [accept len: D.D, accept rate: D.D, ]
 *   cuda graph: (True|False), gen throughput (token/s): D.D, #queue-req: D[,[ \t]*]
 * then the end of the line (a newline or the end of the range read). D is [0-9]+.
 *
 * fields(block, spans) -> list of (accept, graph) bytes, what `findall` of
 *   `_EVERY_DECODE_BYTES` gives around the spans: (b"", b"") for a line not in that form.
 * summary(block, spans[, low_of]) -> None when some decode line is not in that form, else
 *   (accepts, false_lines): each line's accept length as printed (b"" where it has none) and the
 *   count of `cuda graph: False` lines; with low_of (a mapping of accept length to 0 or 1) a
 *   third item, bytes: low_of[accept] of each non-empty accept, in order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static const char MARK[] = "Decode batch, ";
#define MARK_LEN (sizeof(MARK) - 1)

/* accept values of the form d.dd (what SGLang prints), one shared bytes object each */
static PyObject *short_accepts[1000];
static PyObject *empty_bytes, *true_bytes, *false_bytes;

typedef struct {
    const char *p;
    const char *end; /* the end of the range read: `$` matches here or before a newline */
} cursor;

static int lit(cursor *c, const char *text, size_t len) {
    if ((size_t)(c->end - c->p) < len || memcmp(c->p, text, len) != 0)
        return 0;
    c->p += len;
    return 1;
}

#define LIT(c, s) lit((c), (s), sizeof(s) - 1)

static int digits(cursor *c) {
    const char *start = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    return c->p > start;
}

static int decimal(cursor *c) {
    return digits(c) && LIT(c, ".") && digits(c);
}

/* The strict rest after a mark, from c->p. 1 when the line is strict; the accept value's
 * bounds (*a0 == NULL when it has none) and the graph flag. */
static int strict_rest(cursor *c, const char **a0, const char **a1, int *graph) {
    *a0 = *a1 = NULL;
    if (!(LIT(c, "#running-req: ") && digits(c) && LIT(c, ", #token: ") && digits(c) &&
          LIT(c, ", token usage: ") && decimal(c) && LIT(c, ", ")))
        return 0;
    if (c->p < c->end && *c->p == 'a') {
        if (!LIT(c, "accept len: "))
            return 0;
        *a0 = c->p;
        if (!decimal(c))
            return 0;
        *a1 = c->p;
        if (!(LIT(c, ", accept rate: ") && decimal(c) && LIT(c, ", ")))
            return 0;
    }
    if (!LIT(c, "cuda graph: "))
        return 0;
    if (LIT(c, "True"))
        *graph = 1;
    else if (LIT(c, "False"))
        *graph = 0;
    else
        return 0;
    if (!(LIT(c, ", gen throughput (token/s): ") && decimal(c) && LIT(c, ", #queue-req: ") && digits(c)))
        return 0;
    if (c->p < c->end && *c->p == ',') {
        c->p++;
        while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
            c->p++;
    }
    return c->p == c->end || *c->p == '\n';
}

static PyObject *accept_object(const char *a0, const char *a1) {
    if (a0 == NULL) {
        Py_INCREF(empty_bytes);
        return empty_bytes;
    }
    if (a1 - a0 == 4 && a0[1] == '.') {
        int index = (a0[0] - '0') * 100 + (a0[2] - '0') * 10 + (a0[3] - '0');
        PyObject *known = short_accepts[index];
        if (known == NULL) {
            known = PyBytes_FromStringAndSize(a0, 4);
            if (known == NULL)
                return NULL;
            short_accepts[index] = known; /* kept for the module's life */
        }
        Py_INCREF(known);
        return known;
    }
    return PyBytes_FromStringAndSize(a0, a1 - a0);
}

/* The first mark in [p, end): its "D" found with memchr (rare in a log line but for the mark), the
 * rest compared; faster than memmem here, where most lines of a block are decode lines. */
static const char *find_mark(const char *p, const char *end) {
    while (end - p >= (Py_ssize_t)MARK_LEN) {
        const char *at = memchr(p, 'D', (size_t)(end - p) - (MARK_LEN - 1));
        if (at == NULL)
            return NULL;
        if (memcmp(at + 1, MARK + 1, MARK_LEN - 1) == 0)
            return at;
        p = at + 1;
    }
    return NULL;
}

/* Read [lo, hi) of data. mode 0: append (accept, graph) tuples to out; mode 1: append accepts
 * and count false lines; returns -1 on error, 1 when a non-strict line was met in mode 1, else 0. */
static int read_range(const char *data, Py_ssize_t lo, Py_ssize_t hi, int mode, PyObject *out,
                      Py_ssize_t *false_lines) {
    const char *p = data + lo, *end = data + hi;
    while (end - p >= (Py_ssize_t)MARK_LEN) {
        const char *at = find_mark(p, end);
        if (at == NULL)
            break;
        cursor c = {at + MARK_LEN, end};
        const char *a0, *a1;
        int graph = 0;
        int ok = strict_rest(&c, &a0, &a1, &graph);
        if (mode == 1) {
            if (!ok)
                return 1;
            PyObject *accept = accept_object(a0, a1);
            if (accept == NULL)
                return -1;
            int failed = PyList_Append(out, accept);
            Py_DECREF(accept);
            if (failed)
                return -1;
            if (!graph)
                (*false_lines)++;
        } else {
            PyObject *pair;
            if (ok) {
                PyObject *accept = accept_object(a0, a1);
                if (accept == NULL)
                    return -1;
                pair = PyTuple_Pack(2, accept, graph ? true_bytes : false_bytes);
                Py_DECREF(accept);
            } else {
                pair = PyTuple_Pack(2, empty_bytes, empty_bytes);
            }
            if (pair == NULL)
                return -1;
            int failed = PyList_Append(out, pair);
            Py_DECREF(pair);
            if (failed)
                return -1;
        }
        /* the next search starts where this match ended: after the strict rest, or after the mark */
        p = ok ? c.p : at + MARK_LEN;
    }
    return 0;
}

/* The ranges between the spans, as `_findall_outside` reads them. */
static int read_outside(PyObject *block, PyObject *spans, int mode, PyObject *out, Py_ssize_t *false_lines) {
    const char *data = PyBytes_AS_STRING(block);
    Py_ssize_t size = PyBytes_GET_SIZE(block);
    PyObject *seq = PySequence_Fast(spans, "spans must be a sequence of (start, end)");
    if (seq == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), pos = 0;
    int result = 0;
    for (Py_ssize_t i = 0; i < count && result == 0; i++) {
        Py_ssize_t start, end;
        PyObject *span = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyArg_ParseTuple(span, "nn;a span must be (start, end)", &start, &end)) {
            result = -1;
            break;
        }
        if (pos < start) {
            /* `findall(data, pos, start)`: both clamped to the data */
            Py_ssize_t lo = pos < 0 ? 0 : (pos > size ? size : pos);
            Py_ssize_t hi = start > size ? size : start;
            if (lo < hi)
                result = read_range(data, lo, hi, mode, out, false_lines);
        }
        if (end > pos)
            pos = end;
    }
    Py_DECREF(seq);
    if (result == 0) {
        Py_ssize_t lo = pos < 0 ? 0 : (pos > size ? size : pos);
        result = read_range(data, lo, size, mode, out, false_lines);
    }
    return result;
}

static PyObject *fastscan_fields(PyObject *self, PyObject *args) {
    PyObject *block, *spans;
    if (!PyArg_ParseTuple(args, "SO:fields", &block, &spans))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    if (read_outside(block, spans, 0, out, NULL) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* low_of[accept] (0 or 1) of each non-empty accept, in order, as bytes: what
 * `bytes(map(low_of.__getitem__, values))` gives (a dict subclass's __missing__ is called). */
static PyObject *low_flags(PyObject *accepts, PyObject *low_of) {
    Py_ssize_t count = PyList_GET_SIZE(accepts), used = 0;
    PyObject *low = PyBytes_FromStringAndSize(NULL, count);
    if (low == NULL)
        return NULL;
    char *flags = PyBytes_AS_STRING(low);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *accept = PyList_GET_ITEM(accepts, i);
        if (PyBytes_GET_SIZE(accept) == 0)
            continue;
        PyObject *flag = PyObject_GetItem(low_of, accept);
        if (flag == NULL) {
            Py_DECREF(low);
            return NULL;
        }
        long value = PyLong_AsLong(flag);
        Py_DECREF(flag);
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(low);
            return NULL;
        }
        if (value < 0 || value > 255) {
            Py_DECREF(low);
            PyErr_SetString(PyExc_ValueError, "low_of must map an accept length to 0 or 1");
            return NULL;
        }
        flags[used++] = (char)value;
    }
    if (_PyBytes_Resize(&low, used) < 0)
        return NULL;
    return low;
}

static PyObject *fastscan_summary(PyObject *self, PyObject *args) {
    PyObject *block, *spans, *low_of = Py_None;
    if (!PyArg_ParseTuple(args, "SO|O:summary", &block, &spans, &low_of))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t false_lines = 0;
    int result = read_outside(block, spans, 1, out, &false_lines);
    if (result < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (result == 1) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (low_of == Py_None)
        return Py_BuildValue("(Nn)", out, false_lines);
    PyObject *low = low_flags(out, low_of);
    if (low == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(NnN)", out, false_lines, low);
}

static PyMethodDef methods[] = {
    {"fields", fastscan_fields, METH_VARARGS,
     "fields(block, spans) -> [(accept, graph)]: findall of the strict decode form around spans"},
    {"summary", fastscan_summary, METH_VARARGS,
     "summary(block, spans[, low_of]) -> (accepts, false_lines[, low]), or None when a decode line is "
     "not strict"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastscan",
                                    "The serving watch's decode-line reading of a block, in C.", -1, methods};

PyMODINIT_FUNC PyInit__fastscan(void) {
    empty_bytes = PyBytes_FromStringAndSize("", 0);
    true_bytes = PyBytes_FromStringAndSize("True", 4);
    false_bytes = PyBytes_FromStringAndSize("False", 5);
    if (empty_bytes == NULL || true_bytes == NULL || false_bytes == NULL)
        return NULL;
    return PyModule_Create(&module);
}

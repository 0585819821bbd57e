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
 *
 * needles(tuple of bytes) -> an opaque table; first(table, data, pos=0, end=None) -> int: where
 *   the first of those needles starts in data[pos:end] (the smallest offset at which one of them
 *   lies wholly inside the range), -1 when none does, or when pos < 0 or pos > end; an end past
 *   len(data) is len(data). What the assembler's RE2 alternation of the same needles answers
 *   (ddtreed/tracebacks/scan.py `_finder`, held to it by tests/test_fastscan_needles.py).
 *   A (first byte, second byte) bitmap says where a needle can start; only there are the
 *   needles of that first byte compared.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* ---- the needle finder ---- */

#define NEEDLES_CAPSULE "ddtreed._fastscan.needles"

typedef struct {
    unsigned char pair[65536 / 8]; /* bit (b0 << 8 | b1): a needle can start with b0, b1 */
    unsigned char single[256 / 8]; /* bit b: a needle of one byte, b */
    int has_empty;
    Py_ssize_t from[257]; /* the needles starting with byte b: text[from[b] .. from[b + 1]) */
    Py_ssize_t count;
    char **text;
    Py_ssize_t *len;
    uint32_t *head, *mask; /* a needle's first (up to) 4 bytes as read by load4, and which of them count */
} needle_table;

static uint32_t load4(const unsigned char *at) {
    uint32_t word;
    memcpy(&word, at, 4);
    return word;
}

static void table_free(needle_table *table) {
    for (Py_ssize_t k = 0; k < table->count; k++)
        PyMem_Free(table->text[k]);
    PyMem_Free(table->text);
    PyMem_Free(table->len);
    PyMem_Free(table->head);
    PyMem_Free(table->mask);
    PyMem_Free(table);
}

static void needles_free(PyObject *capsule) {
    needle_table *table = PyCapsule_GetPointer(capsule, NEEDLES_CAPSULE);
    if (table != NULL)
        table_free(table);
}

static PyObject *fastscan_needles(PyObject *self, PyObject *args) {
    PyObject *given;
    if (!PyArg_ParseTuple(args, "O!:needles", &PyTuple_Type, &given))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(given);
    for (Py_ssize_t k = 0; k < count; k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(given, k))) {
            PyErr_SetString(PyExc_TypeError, "needles: every needle must be bytes");
            return NULL;
        }
    needle_table *table = PyMem_Calloc(1, sizeof(needle_table));
    if (table == NULL)
        return PyErr_NoMemory();
    table->count = count; /* the slots table_free frees (NULL until filled) */
    table->text = PyMem_Calloc(count ? count : 1, sizeof(char *));
    table->len = PyMem_Calloc(count ? count : 1, sizeof(Py_ssize_t));
    table->head = PyMem_Calloc(count ? count : 1, sizeof(uint32_t));
    table->mask = PyMem_Calloc(count ? count : 1, sizeof(uint32_t));
    if (table->text == NULL || table->len == NULL || table->head == NULL || table->mask == NULL) {
        table_free(table);
        return PyErr_NoMemory();
    }
    /* counting sort of the non-empty needles by their first byte */
    Py_ssize_t per[256] = {0};
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *needle = PyTuple_GET_ITEM(given, k);
        if (PyBytes_GET_SIZE(needle) == 0)
            table->has_empty = 1;
        else
            per[(unsigned char)PyBytes_AS_STRING(needle)[0]]++;
    }
    table->from[0] = 0;
    for (int b = 0; b < 256; b++)
        table->from[b + 1] = table->from[b] + per[b];
    Py_ssize_t next[256];
    memcpy(next, table->from, sizeof(next));
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *needle = PyTuple_GET_ITEM(given, k);
        Py_ssize_t len = PyBytes_GET_SIZE(needle);
        if (len == 0)
            continue;
        const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(needle);
        Py_ssize_t at = next[text[0]]++;
        table->text[at] = PyMem_Malloc(len);
        if (table->text[at] == NULL) {
            table_free(table);
            return PyErr_NoMemory();
        }
        memcpy(table->text[at], text, len);
        table->len[at] = len;
        unsigned char head[4] = {0, 0, 0, 0}, mask[4] = {0, 0, 0, 0};
        for (Py_ssize_t b = 0; b < len && b < 4; b++) {
            head[b] = text[b];
            mask[b] = 0xff;
        }
        table->head[at] = load4(head);
        table->mask[at] = load4(mask);
        if (len == 1) {
            table->single[text[0] >> 3] |= (unsigned char)(1 << (text[0] & 7));
            for (int b = 0; b < 256; b++) {
                unsigned int pair = (unsigned int)text[0] << 8 | (unsigned int)b;
                table->pair[pair >> 3] |= (unsigned char)(1 << (pair & 7));
            }
        } else {
            unsigned int pair = (unsigned int)text[0] << 8 | text[1];
            table->pair[pair >> 3] |= (unsigned char)(1 << (pair & 7));
        }
    }
    table->count = table->from[256]; /* the non-empty needles, in text[] */
    PyObject *capsule = PyCapsule_New(table, NEEDLES_CAPSULE, needles_free);
    if (capsule == NULL)
        table_free(table);
    return capsule;
}

/* does a needle starting with data[at] lie wholly inside data[at:end]? `size`: the bytes readable
 * from data (4 of them read at a time where there are) */
static int needle_at(const needle_table *table, const unsigned char *data, Py_ssize_t at, Py_ssize_t end,
                     Py_ssize_t size) {
    unsigned char b = data[at];
    uint32_t word = 0;
    if (at + 4 <= size)
        word = load4(data + at);
    for (Py_ssize_t k = table->from[b]; k < table->from[b + 1]; k++) {
        Py_ssize_t len = table->len[k];
        if (len > end - at)
            continue;
        if (at + 4 <= size && (word & table->mask[k]) != table->head[k])
            continue;
        if (memcmp(table->text[k], data + at, (size_t)len) == 0)
            return 1;
    }
    return 0;
}

static Py_ssize_t first_needle(const needle_table *table, const unsigned char *data, Py_ssize_t pos,
                               Py_ssize_t end, Py_ssize_t size) {
    if (table->has_empty)
        return pos;
    const unsigned char *pair = table->pair;
    Py_ssize_t at = pos;
    /* eight offsets a step, one branch for them (the bitmap is seldom hit in a log's lines) */
    for (; at + 8 < end; at += 8) {
        unsigned int hits = 0;
        for (int k = 0; k < 8; k++) {
            unsigned int two = (unsigned int)data[at + k] << 8 | data[at + k + 1];
            hits |= (unsigned int)((pair[two >> 3] >> (two & 7)) & 1) << k;
        }
        while (hits) {
            int k = __builtin_ctz(hits);
            if (needle_at(table, data, at + k, end, size))
                return at + k;
            hits &= hits - 1;
        }
    }
    for (; at + 1 < end; at++) {
        unsigned int two = (unsigned int)data[at] << 8 | data[at + 1];
        if ((pair[two >> 3] >> (two & 7)) & 1 && needle_at(table, data, at, end, size))
            return at;
    }
    if (at < end && (table->single[data[at] >> 3] >> (data[at] & 7)) & 1)
        return at;
    return -1;
}

static PyObject *fastscan_first(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "first(table, data, pos=0, end=None) takes 2 to 4 arguments");
        return NULL;
    }
    if (!PyCapsule_IsValid(args[0], NEEDLES_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "first: table must be what needles() returns");
        return NULL;
    }
    needle_table *table = PyCapsule_GetPointer(args[0], NEEDLES_CAPSULE);
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "first: data must be bytes");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]), pos = 0, end = size;
    if (nargs > 2) {
        pos = PyNumber_AsSsize_t(args[2], NULL);
        if (pos == -1 && PyErr_Occurred())
            return NULL;
    }
    if (nargs > 3 && args[3] != Py_None) {
        end = PyNumber_AsSsize_t(args[3], NULL);
        if (end == -1 && PyErr_Occurred())
            return NULL;
        if (end > size)
            end = size;
    }
    if (pos < 0 || pos > end)
        return PyLong_FromLong(-1);
    Py_ssize_t found = first_needle(table, (const unsigned char *)PyBytes_AS_STRING(args[1]), pos, end, size);
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"needles", fastscan_needles, METH_VARARGS,
     "needles(tuple of bytes) -> table for first()"},
    {"first", (PyCFunction)(void (*)(void))fastscan_first, METH_FASTCALL,
     "first(table, data, pos=0, end=None) -> where the first needle starts in data[pos:end], -1 if none"},
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

/* The connector's two hot loops in C: optional, imported through pyspark_eventhubs.native.
 *
 * Each function does exactly what the pure-Python fast path next to it does for the common case
 * and stops at the first frame or message that is not that case, returning its position so the
 * Python code (which stays the reference and the fallback) takes it from there:
 *
 *   scan_laid_out    fast_receiver._scan's layout check: transfers laid out as the link's last
 *                    plain transfer (_TransferLayout), appended to the starts/ends lists.
 *   decode_laid_out  delivery_decoder._decode_messages's layout check: messages laid out as the
 *                    last walked one (message_layout.MessageLayout), their 12 row values and
 *                    property spans appended to the columns' int64 arrays (array.array('q')).
 *
 * Every read is bounds-checked against the buffer: hostile bytes end the fast run, never read
 * past the buffer. Runs in executor Python workers, with the GIL held (the loops are short).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int64_t be64s(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4));
}

/* True when the n bytes of `want` are at buf[at:at+n] and that range lies within [0, limit). */
static inline int holds(const unsigned char *buf, Py_ssize_t limit, Py_ssize_t at, const Py_buffer *want) {
    return at >= 0 && at + want->len <= limit && memcmp(buf + at, want->buf, (size_t)want->len) == 0;
}

static int append_index(PyObject *list, Py_ssize_t value) {
    PyObject *item = PyLong_FromSsize_t(value);
    if (item == NULL) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

PyDoc_STRVAR(scan_doc,
"scan_laid_out(buf, pos, room, head, tag_at, tag_size, tail_at, tail, payload_at, starts, ends) -> pos\n\n"
"From ``pos``, take up to ``room`` complete transfer frames laid out as the given _TransferLayout\n"
"(heartbeat frames between them are skipped), appending each message's start and end to\n"
"``starts`` and ``ends``; return the position of the first frame not taken.");

static PyObject *scan_laid_out(PyObject *self, PyObject *args) {
    Py_buffer data, head, tag_size, tail;
    Py_ssize_t pos, room, tag_at, tail_at, payload_at;
    PyObject *starts, *ends;
    if (!PyArg_ParseTuple(args, "y*nny*ny*ny*nO!O!", &data, &pos, &room, &head, &tag_at, &tag_size,
                          &tail_at, &tail, &payload_at, &PyList_Type, &starts, &PyList_Type, &ends))
        return NULL;
    const unsigned char *buf = data.buf;
    const Py_ssize_t total = data.len;
    int failed = 0;
    while (room > 0 && pos >= 0 && pos + 8 <= total) {
        const Py_ssize_t end = pos + (Py_ssize_t)be32(buf + pos);
        if (end > total) break;             /* not complete yet */
        if (end - pos == 8) {               /* an empty frame (heartbeat) */
            pos = end;
            continue;
        }
        if (end - pos < 8 || pos + payload_at > end) break;
        if (!holds(buf, end, pos + 4, &head) || !holds(buf, end, pos + tag_at, &tag_size)
            || !holds(buf, end, pos + tail_at, &tail))
            break;
        if (append_index(starts, pos + payload_at) < 0 || append_index(ends, end) < 0) {
            failed = 1;
            break;
        }
        room--;
        pos = end;
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    PyBuffer_Release(&tag_size);
    PyBuffer_Release(&tail);
    if (failed) return NULL;
    return PyLong_FromSsize_t(pos);
}

/* A growing block of int64 values, handed to an array.array('q') with one frombytes call. */
typedef struct {
    int64_t *values;
    Py_ssize_t count, capacity;
} Int64s;

static int int64s_reserve(Int64s *out, Py_ssize_t more) {
    if (out->count + more <= out->capacity) return 0;
    Py_ssize_t capacity = out->capacity ? out->capacity : 1024;
    while (capacity < out->count + more) capacity *= 2;
    int64_t *grown = PyMem_Realloc(out->values, (size_t)capacity * sizeof(int64_t));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->values = grown;
    out->capacity = capacity;
    return 0;
}

static int int64s_flush(Int64s *out, PyObject *array) {
    if (out->count == 0) return 0;
    PyObject *done = PyObject_CallMethod(array, "frombytes", "y#", (const char *)out->values,
                                         out->count * (Py_ssize_t)sizeof(int64_t));
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* A sequence of ints (or of (int, bytes) pairs) copied once per call. */
static int index_at(PyObject *fast, Py_ssize_t i, Py_ssize_t *value) {
    *value = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
    return (*value == -1 && PyErr_Occurred()) ? -1 : 0;
}

PyDoc_STRVAR(decode_doc,
"decode_laid_out(buf, starts, ends, index, segments, body_size_at, body_wide, seq_at, enq_at,\n"
"                offset_start, offset_end, props, missing, null, rows, prop_spans) -> index\n\n"
"From message ``index`` on, append the row values (12 int64) and application-property spans of\n"
"every message laid out as the given MessageLayout to the arrays ``rows`` and ``prop_spans``;\n"
"return the index of the first message that is not (``offset_start`` < 0: no offset).");

static PyObject *decode_laid_out(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *starts_obj, *ends_obj, *segments_obj, *props_obj, *rows_obj, *spans_obj;
    Py_ssize_t index, body_size_at, seq_at, enq_at, off_s, off_e;
    int body_wide;
    long long missing, null;
    if (!PyArg_ParseTuple(args, "y*OOnOnpnnnnOLLOO", &data, &starts_obj, &ends_obj, &index, &segments_obj,
                          &body_size_at, &body_wide, &seq_at, &enq_at, &off_s, &off_e, &props_obj,
                          &missing, &null, &rows_obj, &spans_obj))
        return NULL;
    PyObject *starts = NULL, *ends = NULL, *segments = NULL, *props = NULL;
    Py_ssize_t *prop_at = NULL, *seg_at = NULL;
    Py_buffer *seg_bytes = NULL;
    Py_ssize_t n_seg = 0, n_seg_ok = 0, n_props = 0;
    Int64s rows = {0}, spans = {0};
    PyObject *result = NULL;

    starts = PySequence_Fast(starts_obj, "starts must be a sequence");
    ends = PySequence_Fast(ends_obj, "ends must be a sequence");
    segments = PySequence_Fast(segments_obj, "segments must be a sequence");
    props = PySequence_Fast(props_obj, "props must be a sequence");
    if (!starts || !ends || !segments || !props) goto done;
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(starts);
    if (PySequence_Fast_GET_SIZE(ends) != count) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto done;
    }
    n_seg = PySequence_Fast_GET_SIZE(segments);
    n_props = PySequence_Fast_GET_SIZE(props);
    seg_at = PyMem_Calloc((size_t)n_seg + 1, sizeof(Py_ssize_t));
    seg_bytes = PyMem_Calloc((size_t)n_seg + 1, sizeof(Py_buffer));
    prop_at = PyMem_Calloc((size_t)n_props + 1, sizeof(Py_ssize_t));
    if (!seg_at || !seg_bytes || !prop_at) {
        PyErr_NoMemory();
        goto done;
    }
    for (; n_seg_ok < n_seg; n_seg_ok++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(segments, n_seg_ok);
        if (!PyArg_ParseTuple(pair, "ny*", &seg_at[n_seg_ok], &seg_bytes[n_seg_ok])) goto done;
    }
    for (Py_ssize_t k = 0; k < n_props; k++)
        if (index_at(props, k, &prop_at[k]) < 0) goto done;

    const unsigned char *buf = data.buf;
    const Py_ssize_t total = data.len;
    for (; index < count; index++) {
        Py_ssize_t pos, end;
        if (index_at(starts, index, &pos) < 0 || index_at(ends, index, &end) < 0) goto done;
        if (pos < 0 || end > total || pos > end) break;
        int laid_out = 1;
        for (Py_ssize_t k = 0; k < n_seg && laid_out; k++)
            laid_out = holds(buf, total, pos + seg_at[k], &seg_bytes[k]);
        if (!laid_out) break;
        const Py_ssize_t size_at = pos + body_size_at;
        Py_ssize_t body_s;
        if (body_wide) {
            if (size_at < 0 || size_at + 4 > total) break;
            body_s = size_at + 4;
            if (body_s + (Py_ssize_t)be32(buf + size_at) != end) break;
        } else {
            if (size_at < 0 || size_at + 1 > total) break;
            body_s = size_at + 1;
            if (body_s + buf[size_at] != end) break;
        }
        if ((seq_at >= 0 && pos + seq_at + 8 > end) || (enq_at >= 0 && pos + enq_at + 8 > end)) break;
        if (int64s_reserve(&rows, 12) < 0 || int64s_reserve(&spans, n_props) < 0) goto done;
        int64_t *row = rows.values + rows.count;
        row[0] = body_s;
        row[1] = end;
        row[2] = off_s < 0 ? null : pos + off_s;
        row[3] = off_s < 0 ? 0 : pos + off_e;
        row[4] = seq_at < 0 ? missing : be64s(buf + pos + seq_at);
        row[5] = enq_at < 0 ? missing : be64s(buf + pos + enq_at);
        row[6] = null;
        row[7] = 0;
        row[8] = null;
        row[9] = 0;
        row[10] = n_props >> 2;
        row[11] = 0;
        rows.count += 12;
        for (Py_ssize_t k = 0; k < n_props; k++) spans.values[spans.count++] = pos + prop_at[k];
    }
    if (int64s_flush(&rows, rows_obj) < 0 || int64s_flush(&spans, spans_obj) < 0) goto done;
    result = PyLong_FromSsize_t(index);

done:
    for (Py_ssize_t k = 0; k < n_seg_ok; k++) PyBuffer_Release(&seg_bytes[k]);
    PyMem_Free(seg_bytes);
    PyMem_Free(seg_at);
    PyMem_Free(prop_at);
    PyMem_Free(rows.values);
    PyMem_Free(spans.values);
    Py_XDECREF(starts);
    Py_XDECREF(ends);
    Py_XDECREF(segments);
    Py_XDECREF(props);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_laid_out", scan_laid_out, METH_VARARGS, scan_doc},
    {"decode_laid_out", decode_laid_out, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyspark_eventhubs._native",
    "Compiled hot loops of the Event Hubs connector (see native.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

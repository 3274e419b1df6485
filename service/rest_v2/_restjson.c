/* The REST v2 records array's text for decoded record columns (CPython C API).
 *
 * render_binary_rows writes the objects of a records fetch answer in the binary embedded format,
 * {"topic":T,"key":K,"value":V,"partition":P,"offset":O} with K and V null or base64 text, straight from
 * the columns tierlog.tiering.codec.columns.decode_columns makes: no Python object per record, base64
 * and JSON in one pass, the GIL released for large runs. service/rest_v2/convert.py's msgspec renderer
 * (_struct_body) is the reference: this writes its text byte for byte (tests/unit/test_rest_v2_convert.py).
 * It lives here, not in the codec's compiled core, because the text is REST's shape, not the codec's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/* the two characters of every 12-bit group: half the lookups of one character per 6 bits */
static char b64_pairs[4096][2];

static void
b64_encode_init(void)
{
    for (int v = 0; v < 4096; v++) {
        b64_pairs[v][0] = b64_chars[v >> 6];
        b64_pairs[v][1] = b64_chars[v & 63];
    }
}

/* Standard base64 with padding (base64.b64encode's), n bytes of p into o; answers the end of what it wrote. */
static char *
b64_encode(char *o, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        memcpy(o, b64_pairs[x >> 12], 2);
        memcpy(o + 2, b64_pairs[x & 4095], 2);
        o += 4;
    }
    if (n - i == 1) {
        uint32_t x = (uint32_t)p[i] << 16;
        o[0] = b64_chars[x >> 18];
        o[1] = b64_chars[(x >> 12) & 63];
        o[2] = o[3] = '=';
        o += 4;
    } else if (n - i == 2) {
        uint32_t x = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        o[0] = b64_chars[x >> 18];
        o[1] = b64_chars[(x >> 12) & 63];
        o[2] = b64_chars[(x >> 6) & 63];
        o[3] = '=';
        o += 4;
    }
    return o;
}

/* Decimal digits of v (with its '-'), as str(v) writes it. */
static Py_ssize_t
decimal_len(long long v)
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    Py_ssize_t n = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

static char *
decimal_write(char *o, long long v)
{
    Py_ssize_t n = decimal_len(v);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    char *end = o + n;
    do {
        *--end = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) {
        *o = '-';
    }
    return o + n;
}

#define LIT(o, text) (memcpy((o), (text), sizeof(text) - 1), (o) + sizeof(text) - 1)

typedef struct {
    const int64_t *offsets;
    const int32_t *key_ends, *value_ends;
    const unsigned char *key_data, *value_data, *key_valid, *value_valid;
    const char *topic;
    Py_ssize_t topic_len;
    long long partition;
} rows_in;

static int
row_valid(const unsigned char *bitmap, Py_ssize_t i)
{
    return bitmap[i >> 3] >> (i & 7) & 1;
}

/* The text of rows [low, high): each {"topic":T,"key":K,"value":V,"partition":P,"offset":O} with K and V
   null or a base64 string, joined by ','; rows_size bytes. Needs no GIL. */
static void
rows_write(const rows_in *in, Py_ssize_t low, Py_ssize_t high, char *o)
{
    for (Py_ssize_t i = low; i < high; i++) {
        if (i > low) {
            *o++ = ',';
        }
        o = LIT(o, "{\"topic\":");
        memcpy(o, in->topic, in->topic_len);
        o += in->topic_len;
        o = LIT(o, ",\"key\":");
        if (row_valid(in->key_valid, i)) {
            *o++ = '"';
            o = b64_encode(o, in->key_data + in->key_ends[i], in->key_ends[i + 1] - in->key_ends[i]);
            *o++ = '"';
        } else {
            o = LIT(o, "null");
        }
        o = LIT(o, ",\"value\":");
        if (row_valid(in->value_valid, i)) {
            *o++ = '"';
            o = b64_encode(o, in->value_data + in->value_ends[i], in->value_ends[i + 1] - in->value_ends[i]);
            *o++ = '"';
        } else {
            o = LIT(o, "null");
        }
        o = LIT(o, ",\"partition\":");
        o = decimal_write(o, in->partition);
        o = LIT(o, ",\"offset\":");
        o = decimal_write(o, in->offsets[i]);
        *o++ = '}';
    }
}

/* The quoted base64 of n bytes, or 4 for null. */
static Py_ssize_t
field_size(int valid, int32_t start, int32_t end)
{
    return valid ? 2 + ((Py_ssize_t)end - (Py_ssize_t)start + 2) / 3 * 4 : 4;
}

/* The exact length rows_write writes for rows [low, high), or -1 if it passes PY_SSIZE_T_MAX. */
static Py_ssize_t
rows_size(const rows_in *in, Py_ssize_t low, Py_ssize_t high)
{
    const Py_ssize_t fixed =
        (Py_ssize_t)(sizeof("{\"topic\":,\"key\":,\"value\":,\"partition\":,\"offset\":}") - 1);
    Py_ssize_t partition_len = decimal_len(in->partition);
    Py_ssize_t total = high > low ? high - low - 1 : 0; /* the commas */
    for (Py_ssize_t i = low; i < high; i++) {
        /* each term is below 2^34 (a topic is a bytes object, so at most PY_SSIZE_T_MAX: checked first) */
        Py_ssize_t row = fixed + partition_len + decimal_len(in->offsets[i]) +
                         field_size(row_valid(in->key_valid, i), in->key_ends[i], in->key_ends[i + 1]) +
                         field_size(row_valid(in->value_valid, i), in->value_ends[i], in->value_ends[i + 1]);
        if (in->topic_len > PY_SSIZE_T_MAX - row || total > PY_SSIZE_T_MAX - row - in->topic_len) {
            return -1;
        }
        total += row + in->topic_len;
    }
    return total;
}

/* bisect.bisect_left(offsets, x, lo, hi) */
static Py_ssize_t
bisect_offsets(const int64_t *offsets, long long x, Py_ssize_t lo, Py_ssize_t hi)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* render_binary_rows(offsets, key_offsets, key_data, key_validity, value_offsets, value_data, value_validity,
 *                    first, last, start_offset, high_watermark, topic_json, partition, out) -> (low, high)
 * Appends to the bytearray out the REST v2 records (binary embedded format) of the decoded columns' rows
 * [low, high): the rows of [first, last) (one run of ascending offsets) whose offset is in
 * [start_offset, high_watermark), as the JSON objects msgspec writes for them, joined by ',' and preceded
 * by one when out already ends in a row ('}'). topic_json is the topic as a JSON string. Past 64 KiB of
 * text the writing runs with the GIL released (the columns are bytes, immutable; out is resized first and
 * exported meanwhile, so no other thread can resize it). */
static PyObject *
py_render_binary_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError,
                        "render_binary_rows(offsets, key_offsets, key_data, key_validity, value_offsets, "
                        "value_data, value_validity, first, last, start_offset, high_watermark, topic_json, "
                        "partition, out)");
        return NULL;
    }
    PyObject *out = args[13];
    if (!PyByteArray_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "render_binary_rows: out must be a bytearray");
        return NULL;
    }
    for (int k = 0; k < 7; k++) {
        if (!PyBytes_Check(args[k])) {
            PyErr_SetString(PyExc_TypeError, "render_binary_rows: the columns must be bytes");
            return NULL;
        }
    }
    if (!PyBytes_Check(args[11])) {
        PyErr_SetString(PyExc_TypeError, "render_binary_rows: topic_json must be bytes");
        return NULL;
    }
    Py_ssize_t first, last;
    long long start, hw, partition;
    if (((first = PyLong_AsSsize_t(args[7])) == -1 && PyErr_Occurred()) ||
        ((last = PyLong_AsSsize_t(args[8])) == -1 && PyErr_Occurred()) ||
        ((start = PyLong_AsLongLong(args[9])) == -1 && PyErr_Occurred()) ||
        ((hw = PyLong_AsLongLong(args[10])) == -1 && PyErr_Occurred()) ||
        ((partition = PyLong_AsLongLong(args[12])) == -1 && PyErr_Occurred())) {
        return NULL;
    }
    Py_ssize_t count = PyBytes_GET_SIZE(args[0]) / 8;
    /* every column must cover the rows asked for, and every data range must lie inside its data */
    if (first < 0 || last < first || last > count || PyBytes_GET_SIZE(args[1]) < (last + 1) * 4 ||
        PyBytes_GET_SIZE(args[4]) < (last + 1) * 4 || PyBytes_GET_SIZE(args[3]) < (last + 7) / 8 ||
        PyBytes_GET_SIZE(args[6]) < (last + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "render_binary_rows: the columns do not cover the rows");
        return NULL;
    }
    rows_in in = {
        .offsets = (const int64_t *)PyBytes_AS_STRING(args[0]),
        .key_ends = (const int32_t *)PyBytes_AS_STRING(args[1]),
        .key_data = (const unsigned char *)PyBytes_AS_STRING(args[2]),
        .key_valid = (const unsigned char *)PyBytes_AS_STRING(args[3]),
        .value_ends = (const int32_t *)PyBytes_AS_STRING(args[4]),
        .value_data = (const unsigned char *)PyBytes_AS_STRING(args[5]),
        .value_valid = (const unsigned char *)PyBytes_AS_STRING(args[6]),
        .topic = PyBytes_AS_STRING(args[11]),
        .topic_len = PyBytes_GET_SIZE(args[11]),
        .partition = partition,
    };
    for (Py_ssize_t i = first; i < last; i++) {
        int32_t k0 = in.key_ends[i], k1 = in.key_ends[i + 1], v0 = in.value_ends[i], v1 = in.value_ends[i + 1];
        if (k0 < 0 || k1 < k0 || k1 > PyBytes_GET_SIZE(args[2]) || v0 < 0 || v1 < v0 ||
            v1 > PyBytes_GET_SIZE(args[5])) {
            PyErr_SetString(PyExc_ValueError, "render_binary_rows: a data range lies outside its column");
            return NULL;
        }
    }
    /* bisect.bisect_left's answers, as the msgspec renderer finds the rows */
    Py_ssize_t low = bisect_offsets(in.offsets, start, first, last);
    Py_ssize_t high = bisect_offsets(in.offsets, hw, low, last);
    if (high == low) {
        return Py_BuildValue("(nn)", low, high);
    }
    Py_ssize_t at = PyByteArray_GET_SIZE(out);
    int comma = at > 0 && PyByteArray_AS_STRING(out)[at - 1] == '}';
    Py_ssize_t size = rows_size(&in, low, high);
    if (size < 0 || at > PY_SSIZE_T_MAX - 1 - size) {
        PyErr_SetString(PyExc_OverflowError, "render_binary_rows: the text would be too long");
        return NULL;
    }
    if (PyByteArray_Resize(out, at + comma + size) < 0) {
        return NULL;
    }
    /* an export of out for the write: while it is held, nobody can resize out (BufferError), so the
       pointer stays valid with the GIL released */
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    char *o = (char *)view.buf + at;
    if (comma) {
        *o++ = ',';
    }
    if (size > 65536) {
        Py_BEGIN_ALLOW_THREADS
        rows_write(&in, low, high, o);
        Py_END_ALLOW_THREADS
    } else {
        rows_write(&in, low, high, o);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", low, high);
}

static PyMethodDef methods[] = {
    {"render_binary_rows", (PyCFunction)(void (*)(void))py_render_binary_rows, METH_FASTCALL,
     "render_binary_rows(offsets, key_offsets, key_data, key_validity, value_offsets, value_data, "
     "value_validity, first, last, start_offset, high_watermark, topic_json, partition, out) -> (low, high)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_restjson", "The REST v2 records array's text for decoded record columns.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__restjson(void)
{
    b64_encode_init();
    return PyModule_Create(&module);
}

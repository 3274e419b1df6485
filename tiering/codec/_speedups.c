/* The compiled core of tierlog's record batch v2 codec (CPython C API, no Cython).
 *
 * The pure-Python modules next to this file (varint.py, records.py, validate.py, batch.py, columns.py) are
 * the reference: every function here accepts exactly the inputs they accept, raises CorruptRecordError or
 * InvalidRequestError where they do, and writes the same bytes. tierlog.tiering.codec._accel decides which
 * implementation runs (TIERLOG_PURE_CODEC=1 forces the pure one).
 *
 * Entry points (all pure, thread-safe while their buffers do not change, holding the GIL):
 *   decode_varint(buf, pos) / decode_varlong(buf, pos) -> (value, next position)
 *   encode_varint(value) / encode_varlong(value) -> bytes
 *   decode_records(data, count, base_offset, base_timestamp, append_time) -> list[Record]
 *   validate_records(buf, start, end, count, base_timestamp) -> None
 *   encode_records(records, now) -> (body bytes, base_timestamp, max_timestamp)
 *   build_uncompressed(records, now, base_offset, leader_epoch, attributes, producer_id, producer_epoch,
 *                      base_sequence) -> a whole uncompressed batch with its CRC
 *   decode_columns(sections) -> tuple of column buffers (see columns.py)
 *   set_record_type(Record) binds the dataclass whose slots decode_records fills directly.
 *   count_bytes(buf, needle, limit) -> bytes.count(needle), at most limit (scans JSON bodies for the REST path)
 *   decode_base64_list(items) -> True having decoded each base64 str of the list in place, or False
 *
 * Record layout (records.py has the diagram): length varint, attributes int8, timestamp_delta varlong,
 * offset_delta varint, key, value, header_count varint, headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptRecordError;
static PyObject *InvalidRequestError;
static PyObject *crc32c_fn;
static PyTypeObject *RecordType;
/* Byte offsets of Record's slots key, value, headers, timestamp, offset; valid when record_fast. */
static Py_ssize_t record_slots[5];
static int record_fast;

#define MIN_BODY_SIZE 6
#define HEADER_SIZE 61

/* ---------------------------------------------------------------- growable buffer */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} gbuf;

static int
gb_reserve(gbuf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap) {
        return 0;
    }
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int
gb_append(gbuf *b, const void *src, Py_ssize_t n)
{
    if (gb_reserve(b, n) < 0) {
        return -1;
    }
    if (n) {
        memcpy(b->data + b->len, src, (size_t)n);
    }
    b->len += n;
    return 0;
}

static void
gb_free(gbuf *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* One scratch buffer for building batches, kept between calls (up to 8 MiB) so that a batch does not
 * pay for page faults on a fresh allocation; the answer is copied out of it once. Taken and given back
 * with the GIL held; a call that finds it taken (re-entered from Python code it ran) uses a fresh one. */
#define SCRATCH_KEEP (8 << 20)
static gbuf scratch;
static int scratch_taken;

static gbuf
scratch_take(void)
{
    gbuf b = {0};
    if (!scratch_taken) {
        scratch_taken = 1;
        b = scratch;
        b.len = 0;
        scratch.data = NULL;
        scratch.cap = 0;
    }
    return b;
}

static void
scratch_give(gbuf *b, int was_taken)
{
    if (was_taken && b->cap <= SCRATCH_KEEP) {
        scratch = *b;
        scratch.len = 0;
        b->data = NULL;
        b->len = b->cap = 0;
    }
    if (was_taken) {
        scratch_taken = 0;
    }
    gb_free(b);
}

/* ---------------------------------------------------------------- varints */

static inline uint64_t
zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int
varsize(int64_t v)
{
    uint64_t u = zigzag(v);
    int size = 1;
    while (u > 0x7F) {
        u >>= 7;
        size++;
    }
    return size;
}

static inline char *
put_var(char *p, int64_t v)
{
    uint64_t u = zigzag(v);
    while (u > 0x7F) {
        *p++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* Decode the zigzag varint (max_bytes 5) or varlong (10) at d[*pos], reading nothing at or past limit.
 * Bits beyond 32 (or 64) are dropped, as Kafka's reader drops them. */
static inline int
read_var(const uint8_t *d, Py_ssize_t limit, Py_ssize_t *pos, int max_bytes, int64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < limit && d[p] < 0x80) {
        uint8_t b = d[p];
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= limit) {
            PyErr_Format(CorruptRecordError, "truncated varint at position %zd", p);
            return -1;
        }
        uint8_t b = d[p + i];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (max_bytes == 5) {
                result &= 0xFFFFFFFFu;
            }
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *pos = p + i + 1;
            return 0;
        }
        shift += 7;
    }
    PyErr_Format(CorruptRecordError, "varint longer than %d bytes at position %zd", max_bytes, p);
    return -1;
}

static PyObject *
decode_var(PyObject *const *args, Py_ssize_t nargs, int max_bytes)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "expected (buf, pos)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0) {
        PyErr_Format(CorruptRecordError, "negative varint position %zd", pos);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    int64_t value;
    int rc = read_var((const uint8_t *)view.buf, view.len, &pos, max_bytes, &value);
    PyBuffer_Release(&view);
    if (rc < 0) {
        return NULL;
    }
    return Py_BuildValue("(Ln)", (long long)value, pos);
}

static PyObject *
py_decode_varint(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return decode_var(args, nargs, 5);
}

static PyObject *
py_decode_varlong(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return decode_var(args, nargs, 10);
}

static PyObject *
encode_var(PyObject *arg, int is_long)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow || (!is_long && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(InvalidRequestError, "%s out of %s range: %S", is_long ? "varlong" : "varint",
                     is_long ? "int64" : "int32", arg);
        return NULL;
    }
    char out[10];
    char *end = put_var(out, v);
    return PyBytes_FromStringAndSize(out, end - out);
}

static PyObject *
py_encode_varint(PyObject *self, PyObject *arg)
{
    return encode_var(arg, 0);
}

static PyObject *
py_encode_varlong(PyObject *self, PyObject *arg)
{
    return encode_var(arg, 1);
}

/* ---------------------------------------------------------------- UTF-8 check (strict, as Python's codec) */

static int
utf8_valid(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        }
        else {
            return 0;
        }
        if (n - i - 1 < need) {
            return 0;
        }
        for (int k = 1; k <= need; k++) {
            uint8_t t = s[i + k];
            if ((t & 0xC0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (t & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            return 0;
        }
        i += need + 1;
    }
    return 1;
}

/* ---------------------------------------------------------------- one record, checked */

typedef struct {
    int64_t ts_delta;
    int64_t off_delta;
    Py_ssize_t key_pos, key_len; /* key_len -1: null */
    Py_ssize_t val_pos, val_len;
    int64_t header_count;
    Py_ssize_t header_pos;
} record_t;

static int
corrupt(Py_ssize_t index, const char *reason)
{
    PyErr_Format(CorruptRecordError, "record %zd: %s", index, reason);
    return -1;
}

static int
parse_bytes(const uint8_t *d, Py_ssize_t stop, Py_ssize_t *pos, Py_ssize_t *at, Py_ssize_t *len,
            Py_ssize_t index, const char *what)
{
    int64_t n;
    if (read_var(d, stop, pos, 5, &n) < 0) {
        return -1;
    }
    if (n < -1) {
        PyErr_Format(CorruptRecordError, "record %zd: %s length %lld", index, what, (long long)n);
        return -1;
    }
    *at = *pos;
    *len = (Py_ssize_t)n;
    if (n > 0) {
        if (n > stop - *pos) {
            PyErr_Format(CorruptRecordError, "record %zd: %s runs past the record (%lld bytes)", index,
                         what, (long long)n);
            return -1;
        }
        *pos += (Py_ssize_t)n;
    }
    return 0;
}

/* Parse and check the record at d[*pos] within d[0:n]; on success *pos is the position after it. */
static int
parse_record(const uint8_t *d, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t index, record_t *r)
{
    int64_t length;
    if (read_var(d, n, pos, 5, &length) < 0) {
        return -1;
    }
    if (length < MIN_BODY_SIZE || length > n - *pos) {
        PyErr_Format(CorruptRecordError, "record %zd: impossible record length %lld", index,
                     (long long)length);
        return -1;
    }
    Py_ssize_t stop = *pos + (Py_ssize_t)length;
    Py_ssize_t p = *pos + 1; /* attributes: no bits defined */
    if (read_var(d, stop, &p, 10, &r->ts_delta) < 0 || read_var(d, stop, &p, 5, &r->off_delta) < 0 ||
        parse_bytes(d, stop, &p, &r->key_pos, &r->key_len, index, "key") < 0 ||
        parse_bytes(d, stop, &p, &r->val_pos, &r->val_len, index, "value") < 0 ||
        read_var(d, stop, &p, 5, &r->header_count) < 0) {
        return -1;
    }
    r->header_pos = p;
    if (r->header_count) {
        if (r->header_count < 0 || r->header_count > (stop - p) / 2) {
            PyErr_Format(CorruptRecordError, "record %zd: impossible header count %lld", index,
                         (long long)r->header_count);
            return -1;
        }
        for (int64_t h = 0; h < r->header_count; h++) {
            Py_ssize_t at, len;
            if (parse_bytes(d, stop, &p, &at, &len, index, "header key") < 0) {
                return -1;
            }
            if (len < 0) {
                return corrupt(index, "header key length -1 (a null header key)");
            }
            if (!utf8_valid(d + at, len)) {
                return corrupt(index, "header key is not UTF-8");
            }
            if (parse_bytes(d, stop, &p, &at, &len, index, "header value") < 0) {
                return -1;
            }
        }
    }
    if (p != stop) {
        PyErr_Format(CorruptRecordError, "record %zd: record body is %zd bytes, declared %lld", index,
                     (Py_ssize_t)length - (stop - p), (long long)length);
        return -1;
    }
    *pos = stop;
    return 0;
}

/* Re-read one header of a record parse_record already checked. */
static inline void
next_header(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t *kat, Py_ssize_t *klen, Py_ssize_t *vat,
            Py_ssize_t *vlen)
{
    int64_t n = 0;
    read_var(d, PY_SSIZE_T_MAX, pos, 5, &n);
    *kat = *pos;
    *klen = (Py_ssize_t)n;
    *pos += *klen;
    read_var(d, PY_SSIZE_T_MAX, pos, 5, &n);
    *vat = *pos;
    *vlen = (Py_ssize_t)n;
    if (n > 0) {
        *pos += *vlen;
    }
}

static int
check_count(Py_ssize_t count, Py_ssize_t n)
{
    if (count < 0 || count > n / 7) {
        PyErr_Format(CorruptRecordError, "records_count %zd cannot fit in %zd bytes of records", count, n);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- decode_records */

static PyObject *
bytes_or_none(const uint8_t *d, Py_ssize_t at, Py_ssize_t len)
{
    if (len < 0) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize((const char *)d + at, len);
}

/* The header keys of the previous record, by position: records of a batch mostly repeat their header
 * keys, so the str is shared rather than decoded again (strings are immutable; sharing is invisible). */
#define KEY_CACHE 8
typedef struct {
    const uint8_t *at[KEY_CACHE];
    Py_ssize_t len[KEY_CACHE];
    PyObject *str[KEY_CACHE];
} key_cache_t;

static void
key_cache_clear(key_cache_t *cache)
{
    for (int i = 0; i < KEY_CACHE; i++) {
        Py_CLEAR(cache->str[i]);
    }
}

static PyObject *
header_key(key_cache_t *cache, Py_ssize_t h, const uint8_t *at, Py_ssize_t len)
{
    if (h < KEY_CACHE && cache->str[h] != NULL && cache->len[h] == len && memcmp(cache->at[h], at, len) == 0) {
        return Py_NewRef(cache->str[h]);
    }
    PyObject *key = PyUnicode_DecodeUTF8((const char *)at, len, "strict");
    if (key != NULL && h < KEY_CACHE) {
        Py_XSETREF(cache->str[h], Py_NewRef(key));
        cache->at[h] = at;
        cache->len[h] = len;
    }
    return key;
}

static PyObject *
decode_headers(const uint8_t *d, const record_t *r, key_cache_t *cache)
{
    PyObject *headers = PyTuple_New((Py_ssize_t)r->header_count);
    if (headers == NULL) {
        return NULL;
    }
    Py_ssize_t p = r->header_pos;
    for (Py_ssize_t h = 0; h < r->header_count; h++) {
        Py_ssize_t kat, klen, vat, vlen;
        next_header(d, &p, &kat, &klen, &vat, &vlen);
        PyObject *key = header_key(cache, h, d + kat, klen);
        PyObject *value = key ? bytes_or_none(d, vat, vlen) : NULL;
        PyObject *pair = value ? PyTuple_New(2) : NULL;
        if (pair == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* holds only str and bytes or None: never in a cycle */
        PyTuple_SET_ITEM(headers, h, pair);
    }
    PyObject_GC_UnTrack(headers); /* holds only such pairs */
    return headers;
}

/* base + delta as a Python int, exact even past int64 (as the pure code's arbitrary-precision ints). */
static PyObject *
add_exact(int64_t base, PyObject *base_obj, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL) {
        return NULL;
    }
    PyObject *result = PyNumber_Add(base_obj, d);
    Py_DECREF(d);
    return result;
}

/* A Record from five new references (all stolen, NULLs allowed after an error). */
static PyObject *
new_record(PyObject *fields[5])
{
    for (int i = 0; i < 5; i++) {
        if (fields[i] == NULL) {
            for (int k = 0; k < 5; k++) {
                Py_XDECREF(fields[k]);
            }
            return NULL;
        }
    }
    if (record_fast) {
        PyObject *obj = RecordType->tp_alloc(RecordType, 0);
        if (obj == NULL) {
            for (int k = 0; k < 5; k++) {
                Py_DECREF(fields[k]);
            }
            return NULL;
        }
        for (int k = 0; k < 5; k++) {
            *(PyObject **)((char *)obj + record_slots[k]) = fields[k];
        }
        /* Its fields are bytes, None, ints and tuples of (str, bytes): it can never be part of a cycle,
           so the cyclic GC need not scan it (1000-record batches otherwise trigger collections). */
        if (PyObject_GC_IsTracked(obj)) {
            PyObject_GC_UnTrack(obj);
        }
        return obj;
    }
    PyObject *obj = PyObject_Vectorcall((PyObject *)RecordType, fields, 5, NULL);
    for (int k = 0; k < 5; k++) {
        Py_DECREF(fields[k]);
    }
    return obj;
}

static int
as_int64(PyObject *obj, int64_t *out)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%S does not fit in an int64", obj);
        return -1;
    }
    *out = v;
    return 0;
}

static PyObject *
py_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_records(data, count, base_offset, base_timestamp, append_time=None)");
        return NULL;
    }
    if (RecordType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_record_type() was not called");
        return NULL;
    }
    PyObject *append_time = nargs == 5 ? args[4] : Py_None;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    int64_t base_offset, base_timestamp;
    if ((count == -1 && PyErr_Occurred()) || as_int64(args[2], &base_offset) < 0 ||
        as_int64(args[3], &base_timestamp) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const uint8_t *d = view.buf;
    Py_ssize_t n = view.len;
    PyObject *list = NULL;
    key_cache_t cache;
    memset(&cache, 0, sizeof cache);
    if (check_count(count, n) < 0 || (list = PyList_New(count)) == NULL) {
        goto fail;
    }
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        if (parse_record(d, n, &pos, i, &r) < 0) {
            goto fail;
        }
        PyObject *fields[5];
        fields[0] = bytes_or_none(d, r.key_pos, r.key_len);
        fields[1] = bytes_or_none(d, r.val_pos, r.val_len);
        fields[2] = r.header_count ? decode_headers(d, &r, &cache) : PyTuple_New(0);
        if (append_time == Py_None) {
            fields[3] = add_exact(base_timestamp, args[3], r.ts_delta);
        }
        else {
            fields[3] = Py_NewRef(append_time);
        }
        fields[4] = add_exact(base_offset, args[2], r.off_delta);
        PyObject *record = new_record(fields);
        if (record == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(list, i, record);
    }
    if (pos != n) {
        PyErr_Format(CorruptRecordError, "%zd bytes left after the last of %zd records", n - pos, count);
        goto fail;
    }
    key_cache_clear(&cache);
    PyBuffer_Release(&view);
    return list;
fail:
    key_cache_clear(&cache);
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------- validate_records */

static PyObject *
py_validate_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "validate_records(buf, start, end, count, base_timestamp)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = start == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = end == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[3]);
    int64_t base_timestamp;
    if ((count == -1 && PyErr_Occurred()) || as_int64(args[4], &base_timestamp) < 0) {
        return NULL;
    }
    if (count < 0 || end < start || count > (end - start) / 7) {
        PyErr_Format(CorruptRecordError, "records_count %zd cannot fit in %zd bytes of records", count,
                     end - start);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const uint8_t *d = view.buf;
    if (end > view.len) {
        PyErr_Format(CorruptRecordError, "records section ends at %zd, past the buffer's %zd bytes", end,
                     view.len);
        goto fail;
    }
    if (start < 0 || start > end) {
        PyErr_Format(CorruptRecordError, "impossible records section [%zd, %zd)", start, end);
        goto fail;
    }
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        if (parse_record(d, end, &pos, i, &r) < 0) {
            goto fail;
        }
        int64_t ts;
        if (__builtin_add_overflow(base_timestamp, r.ts_delta, &ts) || ts < 0) {
            corrupt(i, "timestamp is negative or overflows");
            goto fail;
        }
        if (r.off_delta != i) {
            PyErr_Format(CorruptRecordError, "record %zd: offset delta %lld, expected %zd", i,
                         (long long)r.off_delta, i);
            goto fail;
        }
    }
    if (pos != end) {
        PyErr_Format(CorruptRecordError, "%zd bytes left after the last of %zd records", end - pos, count);
        goto fail;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------- encode_records / build_uncompressed */

/* A key, value or header value being written: None, or a buffer held until written. */
typedef struct {
    int is_null;
    Py_buffer view;
} field_t;

static int
field_get(PyObject *obj, field_t *f)
{
    if (obj == Py_None) {
        f->is_null = 1;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    f->is_null = 0;
    if (f->view.len > INT32_MAX) {
        f->is_null = 1;
        PyBuffer_Release(&f->view);
        PyErr_Format(InvalidRequestError, "varint out of int32 range: %zd", f->view.len);
        return -1;
    }
    return 0;
}

static void
field_release(field_t *f)
{
    if (!f->is_null) {
        PyBuffer_Release(&f->view);
    }
}

static inline Py_ssize_t
field_size(const field_t *f)
{
    return f->is_null ? 1 : varsize(f->view.len) + f->view.len;
}

static inline char *
field_put(char *p, const field_t *f)
{
    if (f->is_null) {
        *p++ = 0x01;
        return p;
    }
    p = put_var(p, f->view.len);
    memcpy(p, f->view.buf, (size_t)f->view.len);
    return p + f->view.len;
}

/* New reference to field k (0 key, 1 value, 2 headers, 3 timestamp) of a record. */
static PyObject *
record_field(PyObject *record, int k)
{
    static const char *names[] = {"key", "value", "headers", "timestamp"};
    if (record_fast && Py_IS_TYPE(record, RecordType)) {
        PyObject *v = *(PyObject **)((char *)record + record_slots[k]);
        if (v != NULL) {
            return Py_NewRef(v);
        }
    }
    return PyObject_GetAttrString(record, names[k]);
}

/* One header pair (key str, value) from a header item; new references. */
static int
header_pair(PyObject *item, PyObject **key, PyObject **value)
{
    PyObject *seq = PySequence_Fast(item, "a header must be a (key, value) pair");
    if (seq == NULL) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != 2) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "a header must be a (key, value) pair");
        return -1;
    }
    *key = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 0));
    *value = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 1));
    Py_DECREF(seq);
    if (!PyUnicode_Check(*key)) {
        PyErr_Format(InvalidRequestError, "header key must be a string, not %s", Py_TYPE(*key)->tp_name);
        Py_DECREF(*key);
        Py_DECREF(*value);
        return -1;
    }
    return 0;
}

/* With size_only, answer the bytes the headers take; else write them into out, which has room. */
static int
write_headers(gbuf *out, PyObject *headers_seq, Py_ssize_t *size_only)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers_seq);
    Py_ssize_t size = 0;
    for (Py_ssize_t h = 0; h < count; h++) {
        PyObject *key, *value;
        if (header_pair(PySequence_Fast_GET_ITEM(headers_seq, h), &key, &value) < 0) {
            return -1;
        }
        Py_ssize_t klen;
        const char *k = PyUnicode_AsUTF8AndSize(key, &klen);
        field_t f;
        if (k == NULL || field_get(value, &f) < 0) {
            Py_DECREF(key);
            Py_DECREF(value);
            return -1;
        }
        if (klen > INT32_MAX) {
            field_release(&f);
            Py_DECREF(key);
            Py_DECREF(value);
            PyErr_Format(InvalidRequestError, "varint out of int32 range: %zd", klen);
            return -1;
        }
        if (size_only != NULL) {
            size += varsize(klen) + klen + field_size(&f);
        }
        else {
            char *p = out->data + out->len;
            p = put_var(p, klen);
            memcpy(p, k, (size_t)klen);
            p = field_put(p + klen, &f);
            out->len = p - out->data;
        }
        field_release(&f);
        Py_DECREF(key);
        Py_DECREF(value);
    }
    if (size_only != NULL) {
        *size_only = size;
    }
    return 0;
}

static int
write_record(gbuf *out, int64_t offset_delta, int64_t ts_delta, PyObject *record)
{
    PyObject *key = record_field(record, 0);
    PyObject *value = key ? record_field(record, 1) : NULL;
    PyObject *headers = value ? record_field(record, 2) : NULL;
    PyObject *hseq = headers ? PySequence_Fast(headers, "record headers must be a sequence") : NULL;
    field_t k = {1}, v = {1};
    int rc = -1;
    if (hseq == NULL || field_get(key, &k) < 0) {
        goto done;
    }
    if (field_get(value, &v) < 0) {
        goto done;
    }
    Py_ssize_t hsize;
    Py_ssize_t hcount = PySequence_Fast_GET_SIZE(hseq);
    if (write_headers(out, hseq, &hsize) < 0) {
        goto done;
    }
    Py_ssize_t body = 1 + varsize(ts_delta) + varsize(offset_delta) + field_size(&k) + field_size(&v) +
                      varsize(hcount) + hsize;
    if (body > INT32_MAX) {
        PyErr_Format(InvalidRequestError, "varint out of int32 range: %zd", body);
        goto done;
    }
    if (gb_reserve(out, body + 5) < 0) {
        goto done;
    }
    char *p = out->data + out->len;
    p = put_var(p, body);
    *p++ = 0; /* attributes */
    p = put_var(p, ts_delta);
    p = put_var(p, offset_delta);
    p = field_put(p, &k);
    p = field_put(p, &v);
    p = put_var(p, hcount);
    out->len = p - out->data;
    rc = write_headers(out, hseq, NULL);
done:
    field_release(&k);
    field_release(&v);
    Py_XDECREF(hseq);
    Py_XDECREF(headers);
    Py_XDECREF(value);
    Py_XDECREF(key);
    return rc;
}

/* Write the records of `records` into out (after what it holds); answer base and max timestamps. */
static int
encode_body(PyObject *records, PyObject *now_obj, gbuf *out, int64_t *base_ts, int64_t *max_ts)
{
    int64_t now;
    if (as_int64(now_obj, &now) < 0) {
        return -1;
    }
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *stamps = NULL;
    int rc = -1;
    if (n == 0) {
        PyErr_SetString(InvalidRequestError, "a record batch needs at least one record");
        goto done;
    }
    stamps = PyMem_Malloc(sizeof(int64_t) * (size_t)n);
    if (stamps == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Reserve the likely size once (exact for bytes keys and values without headers). */
    Py_ssize_t estimate = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = PySequence_Fast_GET_ITEM(seq, i);
        estimate += 32;
        if (record_fast && Py_IS_TYPE(record, RecordType)) {
            for (int k = 0; k < 2; k++) {
                PyObject *v = *(PyObject **)((char *)record + record_slots[k]);
                if (v != NULL && PyBytes_CheckExact(v)) {
                    estimate += PyBytes_GET_SIZE(v);
                }
            }
        }
    }
    if (gb_reserve(out, estimate) < 0) {
        goto done;
    }
    int64_t low = INT64_MAX, high = INT64_MIN;
    int too_big = 0;
    PyObject *big = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ts = record_field(PySequence_Fast_GET_ITEM(seq, i), 3);
        if (ts == NULL) {
            goto done;
        }
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(ts);
            goto done;
        }
        if (overflow < 0) {
            PyErr_Format(InvalidRequestError, "negative record timestamp %S", ts);
            Py_DECREF(ts);
            goto done;
        }
        if (overflow > 0 && !too_big) {
            too_big = 1;
            big = Py_NewRef(ts);
        }
        Py_DECREF(ts);
        stamps[i] = v == -1 ? now : v;
        if (stamps[i] < low) {
            low = stamps[i];
        }
        if (stamps[i] > high) {
            high = stamps[i];
        }
    }
    if (low < 0) {
        Py_XDECREF(big);
        PyErr_Format(InvalidRequestError, "negative record timestamp %lld", (long long)low);
        goto done;
    }
    if (too_big) {
        PyErr_Format(InvalidRequestError, "max_timestamp=%S is outside [0, %lld]", big, (long long)INT64_MAX);
        Py_DECREF(big);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (write_record(out, i, stamps[i] - stamps[0], PySequence_Fast_GET_ITEM(seq, i)) < 0) {
            goto done;
        }
    }
    *base_ts = stamps[0];
    *max_ts = high;
    rc = 0;
done:
    PyMem_Free(stamps);
    Py_DECREF(seq);
    return rc;
}

static PyObject *
py_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_records(records, now)");
        return NULL;
    }
    int mine = !scratch_taken;
    gbuf out = scratch_take();
    int64_t base_ts, max_ts;
    PyObject *result = NULL;
    if (encode_body(args[0], args[1], &out, &base_ts, &max_ts) == 0) {
        result = Py_BuildValue("(y#LL)", out.data ? out.data : "", out.len, (long long)base_ts,
                               (long long)max_ts);
    }
    scratch_give(&out, mine);
    return result;
}

static inline void
put_be(char *p, uint64_t v, int size)
{
    for (int i = size - 1; i >= 0; i--) {
        p[i] = (char)(v & 0xFF);
        v >>= 8;
    }
}

/* Write the records of the columns `keys` and `values` (sequences of equal length, each item a buffer or
 * None) into out, each record timestamped `now` without headers: the records section encode_body writes
 * for Record(key, value) objects of timestamp -1. */
static int
encode_columns_body(PyObject *keys, PyObject *values, PyObject *now_obj, gbuf *out, int64_t *base_ts,
                    int64_t *max_ts)
{
    int64_t now;
    if (as_int64(now_obj, &now) < 0) {
        return -1;
    }
    PyObject *kseq = PySequence_Fast(keys, "keys must be a sequence");
    if (kseq == NULL) {
        return -1;
    }
    PyObject *vseq = PySequence_Fast(values, "values must be a sequence");
    if (vseq == NULL) {
        Py_DECREF(kseq);
        return -1;
    }
    int rc = -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(kseq);
    if (PySequence_Fast_GET_SIZE(vseq) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and values differ in length");
        goto done;
    }
    if (n == 0) {
        PyErr_SetString(InvalidRequestError, "a record batch needs at least one record");
        goto done;
    }
    if (now < 0) {
        PyErr_Format(InvalidRequestError, "negative record timestamp %lld", (long long)now);
        goto done;
    }
    Py_ssize_t estimate = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PySequence_Fast_GET_ITEM(kseq, i), *v = PySequence_Fast_GET_ITEM(vseq, i);
        estimate += 32 + (PyBytes_CheckExact(k) ? PyBytes_GET_SIZE(k) : 0) +
                    (PyBytes_CheckExact(v) ? PyBytes_GET_SIZE(v) : 0);
    }
    if (gb_reserve(out, estimate) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        field_t k = {1}, v = {1};
        if (field_get(PySequence_Fast_GET_ITEM(kseq, i), &k) < 0) {
            goto done;
        }
        if (field_get(PySequence_Fast_GET_ITEM(vseq, i), &v) < 0) {
            field_release(&k);
            goto done;
        }
        Py_ssize_t body = 1 + varsize(0) + varsize(i) + field_size(&k) + field_size(&v) + varsize(0);
        if (body > INT32_MAX) {
            PyErr_Format(InvalidRequestError, "varint out of int32 range: %zd", body);
        }
        else if (gb_reserve(out, body + 5) == 0) {
            char *p = out->data + out->len;
            p = put_var(p, body);
            *p++ = 0; /* attributes */
            p = put_var(p, 0);
            p = put_var(p, i);
            p = field_put(p, &k);
            p = field_put(p, &v);
            p = put_var(p, 0); /* no headers */
            out->len = p - out->data;
        }
        field_release(&k);
        field_release(&v);
        if (PyErr_Occurred()) {
            goto done;
        }
    }
    *base_ts = *max_ts = now;
    rc = 0;
done:
    Py_DECREF(vseq);
    Py_DECREF(kseq);
    return rc;
}

/* The batch of `args` (build_uncompressed's, or build_uncompressed_columns' with the values column
 * inserted after the keys: `columns` says which): the header filled in, the CRC set. */
static PyObject *
build_uncompressed_batch(PyObject *const *args, int columns)
{
    /* args[columns + 1] is now, then base_offset, partition_leader_epoch, attributes, producer_id,
       producer_epoch, base_sequence: the integers already range-checked by batch.build_batch */
    PyObject *now_obj = args[columns + 1];
    int64_t ints[6];
    for (int i = 0; i < 6; i++) {
        if (as_int64(args[columns + i + 2], &ints[i]) < 0) {
            return NULL;
        }
    }
    int64_t base_offset = ints[0], leader_epoch = ints[1], attributes = ints[2], producer_id = ints[3],
            producer_epoch = ints[4], base_sequence = ints[5];
    int mine = !scratch_taken;
    gbuf out = scratch_take();
    if (gb_reserve(&out, HEADER_SIZE) < 0) {
        scratch_give(&out, mine);
        return NULL;
    }
    memset(out.data, 0, HEADER_SIZE);
    out.len = HEADER_SIZE;
    int64_t base_ts, max_ts;
    Py_ssize_t count = PyObject_Length(args[0]);
    int failed = count < 0;
    if (!failed) {
        failed = columns ? encode_columns_body(args[0], args[1], now_obj, &out, &base_ts, &max_ts)
                         : encode_body(args[0], now_obj, &out, &base_ts, &max_ts);
    }
    if (failed) {
        scratch_give(&out, mine);
        return NULL;
    }
    if (attributes & 0x08) {
        as_int64(now_obj, &max_ts); /* LogAppendTime: max_timestamp is the append time */
    }
    Py_ssize_t batch_length = out.len - 12;
    if (batch_length > INT32_MAX) {
        scratch_give(&out, mine);
        PyErr_Format(InvalidRequestError, "batch length=%zd is outside [0, %d]", batch_length, INT32_MAX);
        return NULL;
    }
    char *h = out.data;
    put_be(h + 0, (uint64_t)base_offset, 8);
    put_be(h + 8, (uint64_t)batch_length, 4);
    put_be(h + 12, (uint64_t)leader_epoch, 4);
    h[16] = 2;
    put_be(h + 21, (uint64_t)attributes, 2);
    put_be(h + 23, (uint64_t)(count - 1), 4);
    put_be(h + 27, (uint64_t)base_ts, 8);
    put_be(h + 35, (uint64_t)max_ts, 8);
    put_be(h + 43, (uint64_t)producer_id, 8);
    put_be(h + 51, (uint64_t)producer_epoch, 2);
    put_be(h + 53, (uint64_t)base_sequence, 4);
    put_be(h + 57, (uint64_t)count, 4);
    PyObject *view = PyMemoryView_FromMemory(out.data + 21, out.len - 21, PyBUF_READ);
    PyObject *crc = view ? PyObject_CallOneArg(crc32c_fn, view) : NULL;
    Py_XDECREF(view);
    unsigned long crc_value = crc ? PyLong_AsUnsignedLong(crc) : (unsigned long)-1;
    Py_XDECREF(crc);
    if (PyErr_Occurred()) {
        scratch_give(&out, mine);
        return NULL;
    }
    put_be(h + 17, crc_value, 4);
    PyObject *result = PyBytes_FromStringAndSize(out.data, out.len);
    scratch_give(&out, mine);
    return result;
}

static PyObject *
py_build_uncompressed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "build_uncompressed() takes 8 arguments");
        return NULL;
    }
    return build_uncompressed_batch(args, 0);
}

static PyObject *
py_build_uncompressed_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "build_uncompressed_columns() takes 9 arguments");
        return NULL;
    }
    return build_uncompressed_batch(args, 1);
}

/* ---------------------------------------------------------------- decode_columns */

typedef struct {
    gbuf offsets, timestamps;                               /* int64 per record */
    gbuf key_offsets, key_data, key_valid;                  /* int32 count+1, bytes, bitmap */
    gbuf value_offsets, value_data, value_valid;
    gbuf header_offsets;                                    /* int32 count+1, into the header entries */
    gbuf hkey_offsets, hkey_data;                           /* int32 entries+1, UTF-8 */
    gbuf hvalue_offsets, hvalue_data, hvalue_valid;
    Py_ssize_t count, entries, key_nulls, value_nulls, hvalue_nulls;
} columns_t;

#define NCOLUMN_BUFS 14

static columns_t columns_scratch;
static int columns_taken;

static gbuf *
col_buf(columns_t *c, int i)
{
    gbuf *all[NCOLUMN_BUFS] = {&c->offsets,        &c->timestamps,    &c->key_offsets,    &c->key_data,
                               &c->key_valid,      &c->value_offsets, &c->value_data,     &c->value_valid,
                               &c->header_offsets, &c->hkey_offsets,  &c->hkey_data,      &c->hvalue_offsets,
                               &c->hvalue_data,    &c->hvalue_valid};
    return all[i];
}

static int
put_i32(gbuf *b, Py_ssize_t v)
{
    if (v > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column is larger than 2 GiB (int32 offsets)");
        return -1;
    }
    int32_t x = (int32_t)v;
    return gb_append(b, &x, 4);
}

/* Set (or leave clear) bit `index` of a validity bitmap, growing it by a zero byte every 8 bits. */
static int
put_bit(gbuf *b, Py_ssize_t index, int valid)
{
    if (index % 8 == 0) {
        char zero = 0;
        if (gb_append(b, &zero, 1) < 0) {
            return -1;
        }
    }
    if (valid) {
        b->data[index / 8] |= (char)(1 << (index % 8));
    }
    return 0;
}

static int
put_binary(gbuf *offsets, gbuf *data, gbuf *valid, Py_ssize_t index, Py_ssize_t *nulls, const uint8_t *d,
           Py_ssize_t at, Py_ssize_t len)
{
    if (put_bit(valid, index, len >= 0) < 0) {
        return -1;
    }
    if (len < 0) {
        ++*nulls;
    }
    else if (gb_append(data, d + at, len) < 0) {
        return -1;
    }
    return put_i32(offsets, data->len);
}

static int
columns_section(columns_t *c, const uint8_t *d, Py_ssize_t n, Py_ssize_t count, int64_t base_offset,
                int64_t base_ts, int has_append, int64_t append_time)
{
    if (check_count(count, n) < 0 || gb_reserve(&c->offsets, 8 * count) < 0 ||
        gb_reserve(&c->timestamps, 8 * count) < 0 || gb_reserve(&c->key_offsets, 4 * count) < 0 ||
        gb_reserve(&c->value_offsets, 4 * count) < 0 || gb_reserve(&c->header_offsets, 4 * count) < 0 ||
        gb_reserve(&c->value_data, n) < 0) {
        return -1;
    }
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        if (parse_record(d, n, &pos, i, &r) < 0) {
            return -1;
        }
        int64_t offset, ts = append_time;
        if (__builtin_add_overflow(base_offset, r.off_delta, &offset) ||
            (!has_append && __builtin_add_overflow(base_ts, r.ts_delta, &ts))) {
            PyErr_Format(CorruptRecordError, "record %zd: offset or timestamp overflows an int64", i);
            return -1;
        }
        Py_ssize_t row = c->count++;
        if (gb_append(&c->offsets, &offset, 8) < 0 || gb_append(&c->timestamps, &ts, 8) < 0 ||
            put_binary(&c->key_offsets, &c->key_data, &c->key_valid, row, &c->key_nulls, d, r.key_pos,
                       r.key_len) < 0 ||
            put_binary(&c->value_offsets, &c->value_data, &c->value_valid, row, &c->value_nulls, d,
                       r.val_pos, r.val_len) < 0) {
            return -1;
        }
        Py_ssize_t p = r.header_pos;
        for (int64_t h = 0; h < r.header_count; h++) {
            Py_ssize_t kat, klen, vat, vlen;
            next_header(d, &p, &kat, &klen, &vat, &vlen);
            if (gb_append(&c->hkey_data, d + kat, klen) < 0 || put_i32(&c->hkey_offsets, c->hkey_data.len) < 0 ||
                put_binary(&c->hvalue_offsets, &c->hvalue_data, &c->hvalue_valid, c->entries, &c->hvalue_nulls,
                           d, vat, vlen) < 0) {
                return -1;
            }
            c->entries++;
        }
        if (put_i32(&c->header_offsets, c->entries) < 0) {
            return -1;
        }
    }
    if (pos != n) {
        PyErr_Format(CorruptRecordError, "%zd bytes left after the last of %zd records", n - pos, count);
        return -1;
    }
    return 0;
}

static PyObject *
py_decode_columns(PyObject *self, PyObject *sections)
{
    /* sections: iterable of (data, count, base_offset, base_timestamp, append_time or None) */
    /* A tuple of its own: the items stay alive and the same while Python code that the walk runs (an
     * append time's __index__) changes the caller's list. */
    PyObject *seq = PySequence_Tuple(sections);
    if (seq == NULL) {
        return NULL;
    }
    /* The column buffers are kept between calls like the build scratch buffer (see scratch_take). */
    int mine = !columns_taken;
    columns_t c;
    memset(&c, 0, sizeof c);
    if (mine) {
        columns_taken = 1;
        c = columns_scratch;
        memset(&columns_scratch, 0, sizeof columns_scratch);
        for (int k = 0; k < NCOLUMN_BUFS; k++) {
            col_buf(&c, k)->len = 0;
        }
        c.count = c.entries = c.key_nulls = c.value_nulls = c.hvalue_nulls = 0;
    }
    PyObject *result = NULL;
    /* The values are written straight into the bytes object answered (sized for every section's bytes,
     * shrunk at the end): the scratch copy and the copy out of it cost two passes over the largest
     * column. gb_reserve never moves it: the values of sections 0..s fit in their total size. */
    gbuf kept_values = c.value_data;
    PyObject *values = NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t s = 0; s < PySequence_Fast_GET_SIZE(seq); s++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, s);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) {
            continue;  /* the parse below raises */
        }
        Py_buffer view;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        Py_ssize_t len = view.len;
        PyBuffer_Release(&view);
        if (len > PY_SSIZE_T_MAX - total) {
            PyErr_NoMemory();
            goto done;
        }
        total += len;
    }
    values = PyBytes_FromStringAndSize(NULL, total);
    if (values == NULL) {
        goto done;
    }
    c.value_data.data = PyBytes_AS_STRING(values);
    c.value_data.len = 0;
    c.value_data.cap = total;
    for (int k = 2; k < NCOLUMN_BUFS; k++) {
        gbuf *b = col_buf(&c, k);
        if ((k == 2 || k == 5 || k == 8 || k == 9 || k == 11) && put_i32(b, 0) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t s = 0; s < PySequence_Fast_GET_SIZE(seq); s++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, s);
        PyObject *data, *append_obj;
        Py_ssize_t count;
        long long base_offset, base_ts;
        if (!PyArg_ParseTuple(item, "OnLLO", &data, &count, &base_offset, &base_ts, &append_obj)) {
            goto done;
        }
        int64_t append_time = 0;
        if (append_obj != Py_None && as_int64(append_obj, &append_time) < 0) {
            goto done;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        if (view.len > c.value_data.cap - c.value_data.len) {  /* a section grew since it was measured */
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "a section changed size during decode_columns");
            goto done;
        }
        int rc = columns_section(&c, view.buf, view.len, count, base_offset, base_ts, append_obj != Py_None,
                                 append_time);
        PyBuffer_Release(&view);
        if (rc < 0) {
            goto done;
        }
    }
    result = PyTuple_New(NCOLUMN_BUFS + 5);
    if (result == NULL) {
        goto done;
    }
    for (int k = 0; k < NCOLUMN_BUFS; k++) {
        gbuf *b = col_buf(&c, k);
        PyObject *bytes;
        if (b == &c.value_data) {
            if (_PyBytes_Resize(&values, b->len) < 0) {
                Py_CLEAR(result);
                goto done;
            }
            bytes = values;
            values = NULL;
        }
        else {
            bytes = PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
        }
        if (bytes == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, k, bytes);
    }
    Py_ssize_t counts[5] = {c.count, c.entries, c.key_nulls, c.value_nulls, c.hvalue_nulls};
    for (int k = 0; k < 5; k++) {
        PyObject *v = PyLong_FromSsize_t(counts[k]);
        if (v == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, NCOLUMN_BUFS + k, v);
    }
done:
    Py_XDECREF(values);
    c.value_data = kept_values;
    for (int k = 0; k < NCOLUMN_BUFS; k++) {
        gbuf *b = col_buf(&c, k);
        if (!mine || b->cap > SCRATCH_KEEP) {
            gb_free(b);
        }
    }
    if (mine) {
        columns_scratch = c;
        columns_taken = 0;
    }
    Py_DECREF(seq);
    return result;
}

/* ---------------------------------------------------------------- module */

/* make_record(key, value, headers, timestamp): a Record with offset -1, as Record(key, value, headers,
   timestamp) makes it, without the frozen dataclass's field-by-field __setattr__ (a producer makes one per
   record sent). The fields are the caller's: a producer's bytes, None, an int and a tuple of pairs. */
static PyObject *
py_make_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "make_record(key, value, headers, timestamp)");
        return NULL;
    }
    if (RecordType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_record_type was not called");
        return NULL;
    }
    PyObject *fields[5] = {
        Py_NewRef(args[0]), Py_NewRef(args[1]), Py_NewRef(args[2]), Py_NewRef(args[3]), PyLong_FromLong(-1),
    };
    return new_record(fields);
}

/* Whether the collector might have to see o: CPython's own rule (exact tuples it has untracked are safe,
   every other container is not). */
static int
may_be_tracked(PyObject *o)
{
    if (!PyObject_IS_GC(o)) {
        return 0;
    }
    return PyTuple_CheckExact(o) ? PyObject_GC_IsTracked(o) : 1;
}

/* A plain tuple subclass of exactly a tuple's layout: no __dict__, no extra slots, no weak references (a
   named tuple is one). Only such a class may be filled item by item and untracked. */
static int
plain_tuple_subclass(PyTypeObject *cls)
{
    if (cls->tp_base != &PyTuple_Type || cls->tp_dictoffset != 0 ||
        cls->tp_basicsize != PyTuple_Type.tp_basicsize || cls->tp_itemsize != PyTuple_Type.tp_itemsize ||
        cls->tp_weaklistoffset != 0 || !(cls->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        return 0;
    }
#ifdef Py_TPFLAGS_MANAGED_DICT
    if (cls->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
        return 0;
    }
#endif
    /* a named tuple of the eight fields; not a struct sequence (os.stat_result and kin: they look the
       same from here, but own hidden fields past their items) */
    if (PyDict_GetItemString(cls->tp_dict, "n_fields") != NULL) {
        return 0;
    }
    PyObject *fields = PyObject_GetAttrString((PyObject *)cls, "_fields");
    int named = fields != NULL && PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == 8;
    Py_XDECREF(fields);
    PyErr_Clear();
    return named;
}

/* consumer_records(records, cls, topic, partition, timestamp_type, min_offset): the consumer's view of the
   decoded records whose offset is at least min_offset, as instances of cls, a plain tuple subclass (a named
   tuple) of the fields (topic, partition, offset, timestamp, timestamp_type, key, value, headers). A
   consumer builds one per record read. Each is untracked by the cyclic garbage collector when none of its
   items might be tracked (strings, numbers, bytes, None and the codec's untracked header tuples), as the
   collector itself untracks such exact tuples (it leaves subclasses alone): an immutable tuple of such
   items takes part in no cycle, and the collector no longer walks every record a consumer holds. */
static PyObject *
py_consumer_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *names[5] = {"key", "value", "headers", "timestamp", "offset"};
    if (nargs != 6 || !PyList_Check(args[0]) || !PyType_Check(args[1]) ||
        !plain_tuple_subclass((PyTypeObject *)args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "consumer_records(records: list, cls: a named tuple class, topic, partition, "
                        "timestamp_type, min_offset)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[1];
    PyObject *min_offset = args[5];
    if (!PyLong_Check(min_offset)) {
        PyErr_SetString(PyExc_TypeError, "consumer_records: min_offset must be an int");
        return NULL;
    }
    int shared_untracked = !may_be_tracked(args[2]) && !may_be_tracked(args[3]) && !may_be_tracked(args[4]);
    PyObject *records = Py_NewRef(args[0]);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = Py_NewRef(PyList_GET_ITEM(records, i));
        PyObject *f[5] = {NULL, NULL, NULL, NULL, NULL}; /* key, value, headers, timestamp, offset */
        int ok = 1;
        for (int k = 0; k < 5 && ok; k++) {
            if (record_fast && Py_IS_TYPE(record, RecordType)) {
                f[k] = Py_XNewRef(*(PyObject **)((char *)record + record_slots[k]));
                if (f[k] == NULL) {
                    PyErr_Format(PyExc_AttributeError, "record has no %s", names[k]);
                }
            } else {
                f[k] = PyObject_GetAttrString(record, names[k]);
            }
            ok = f[k] != NULL;
        }
        Py_DECREF(record);
        int keep = 0;
        if (ok) { /* exact for any int, past int64 too */
            keep = PyObject_RichCompareBool(f[4], min_offset, Py_GE);
            ok = keep >= 0;
        }
        if (ok && keep) {
            PyObject *t = cls->tp_alloc(cls, 8);
            if (t == NULL) {
                ok = 0;
            } else {
#if PY_VERSION_HEX >= 0x030E0000
                ((PyTupleObject *)t)->ob_hash = -1; /* the cached hash, unset (as tuple_subtype_new does) */
#endif
                int untrack = shared_untracked;
                for (int k = 0; k < 5; k++) {
                    untrack = untrack && !may_be_tracked(f[k]);
                }
                PyObject *items[8] = {Py_NewRef(args[2]), Py_NewRef(args[3]), f[4], f[3],
                                      Py_NewRef(args[4]), f[0], f[1], f[2]};
                for (int k = 0; k < 8; k++) {
                    PyTuple_SET_ITEM(t, k, items[k]);
                }
                for (int k = 0; k < 5; k++) {
                    f[k] = NULL; /* the tuple owns them now */
                }
                if (untrack && PyObject_GC_IsTracked(t)) {
                    PyObject_GC_UnTrack(t);
                }
                ok = PyList_Append(out, t) == 0;
                Py_DECREF(t);
            }
        }
        for (int k = 0; k < 5; k++) {
            Py_XDECREF(f[k]);
        }
        if (!ok) {
            Py_DECREF(records);
            Py_DECREF(out);
            return NULL;
        }
    }
    Py_DECREF(records);
    return out;
}

static PyObject *
py_set_record_type(PyObject *self, PyObject *cls)
{
    static const char *names[5] = {"key", "value", "headers", "timestamp", "offset"};
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_record_type() needs a class");
        return NULL;
    }
    Py_XSETREF(RecordType, (PyTypeObject *)Py_NewRef(cls));
    record_fast = 0;
    /* Fill the slots directly only for a plain slotted class whose five fields are object slots. */
    PyObject *dict = RecordType->tp_dict;
    if (RecordType->tp_alloc != PyType_GenericAlloc || RecordType->tp_dictoffset != 0 ||
        PyDict_GetItemString(dict, "__post_init__") != NULL) {
        Py_RETURN_NONE;
    }
    for (int k = 0; k < 5; k++) {
        PyObject *descr = PyDict_GetItemString(dict, names[k]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            Py_RETURN_NONE;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
            Py_RETURN_NONE;
        }
        record_slots[k] = member->offset;
    }
    record_fast = 1;
    Py_RETURN_NONE;
}

/* count_bytes(buf, needle, limit) -> the non-overlapping occurrences of ``needle`` in ``buf``, as bytes.count
 * counts them, but at most ``limit`` (the scan stops there; a negative limit counts them all). A one-byte
 * needle is counted a block at a time by a loop the compiler vectorizes (bytes.count stops on every hit and
 * runs at a few GB/s); a longer one is found with memmem (a GNU extension, as pyconfig.h's _GNU_SOURCE
 * declares it). */
static Py_ssize_t
count_occurrences(const unsigned char *p, Py_ssize_t n, const unsigned char *needle, Py_ssize_t m,
                  Py_ssize_t limit)
{
    Py_ssize_t total = 0;
    if (m == 1) {
        const unsigned char c = needle[0];
        /* 16 byte lanes over blocks of 255 * 16 bytes: no lane passes 255, and gcc (12 and later at -O2)
         * turns the inner loop into vector compares (some 25 GB/s against bytes.count's 3 here) */
        while (n >= 4080 && (limit < 0 || total < limit)) {
            unsigned char lanes[16] = {0};
            for (Py_ssize_t i = 0; i < 4080; i += 16) {
                for (int k = 0; k < 16; k++) {
                    lanes[k] += p[i + k] == c;
                }
            }
            for (int k = 0; k < 16; k++) {
                total += lanes[k];
            }
            p += 4080;
            n -= 4080;
        }
        for (Py_ssize_t i = 0; i < n && (limit < 0 || total < limit); i++) {
            total += p[i] == c;
        }
        return limit >= 0 && total > limit ? limit : total;
    }
    while (n >= m && (limit < 0 || total < limit)) {
        const unsigned char *hit = memmem(p, (size_t)n, needle, (size_t)m);
        if (hit == NULL) {
            break;
        }
        total++;
        n -= (hit - p) + m;
        p = hit + m;
    }
    return total;
}

static PyObject *
py_count_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "count_bytes() takes 3 arguments");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer needle;
    if (PyObject_GetBuffer(args[1], &needle, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (needle.len == 0) {
        PyBuffer_Release(&needle);
        PyErr_SetString(PyExc_ValueError, "count_bytes: an empty needle");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&needle);
        return NULL;
    }
    /* the GIL stays held: at some 25 GB/s even a 64 MiB body is under a switch interval, and the REST route
     * counts bodies of up to 2 MiB on the event loop, which must not hand the GIL to a busy worker */
    Py_ssize_t total = count_occurrences(view.buf, view.len, needle.buf, needle.len, limit);
    PyBuffer_Release(&view);
    PyBuffer_Release(&needle);
    return PyLong_FromSsize_t(total);
}

/* decode_base64_list(items) -> bool: replaces each str of the list ``items`` by the bytes it encodes in
 * base64, leaving None as it is, and answers True; answers False, the list unchanged, when an item is
 * neither, or not ASCII, or not canonical base64: a length that is a multiple of 4, the 64-character
 * alphabet, and at most two '=' only at the end. What it accepts it decodes as base64.b64decode(s,
 * validate=True) does (bits past the last byte ignored); the caller falls back to a decoder that knows the
 * exact error for the rest. The output objects are made first, then filled with the GIL released when the
 * text is large (the strs are held until then; the list must not be shared with another thread). */
#define B64_BAD 0x01000000u
static uint32_t b64_table[4][256];

static void
b64_init(void)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int k = 0; k < 4; k++) {
        for (int c = 0; c < 256; c++) {
            b64_table[k][c] = B64_BAD;
        }
        for (uint32_t v = 0; v < 64; v++) {
            b64_table[k][(unsigned char)alphabet[v]] = v << (18 - 6 * k);
        }
    }
}

/* Decode ``n`` (a multiple of 4, not 0) characters into ``out``; 0 when a character is outside the alphabet
 * or the padding is misplaced. */
static int
b64_decode(const unsigned char *in, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t full = n - 4; /* the last quantum may carry padding */
    uint32_t bad = 0;
    for (Py_ssize_t i = 0; i < full; i += 4) {
        uint32_t x = b64_table[0][in[i]] | b64_table[1][in[i + 1]] | b64_table[2][in[i + 2]] |
                     b64_table[3][in[i + 3]];
        bad |= x;
        out[0] = (unsigned char)(x >> 16);
        out[1] = (unsigned char)(x >> 8);
        out[2] = (unsigned char)x;
        out += 3;
    }
    if (bad & B64_BAD) {
        return 0;
    }
    const unsigned char *q = in + full;
    int pads = (q[3] == '=') + (q[3] == '=' && q[2] == '=');
    uint32_t x = b64_table[0][q[0]] | b64_table[1][q[1]] | (pads == 2 ? 0 : b64_table[2][q[2]]) |
                 (pads >= 1 ? 0 : b64_table[3][q[3]]);
    if (x & B64_BAD) {
        return 0;
    }
    out[0] = (unsigned char)(x >> 16);
    if (pads < 2) {
        out[1] = (unsigned char)(x >> 8);
    }
    if (pads < 1) {
        out[2] = (unsigned char)x;
    }
    return 1;
}

/* Decode every held text into its output; 0 at the first that is not base64. Needs no GIL: the texts are
 * held and immutable, the outputs not yet shared. */
static int
b64_decode_all(PyObject **texts, PyObject **outs, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n = texts[i] == NULL ? 0 : PyUnicode_GET_LENGTH(texts[i]);
        if (n && !b64_decode(PyUnicode_1BYTE_DATA(texts[i]), n, (unsigned char *)PyBytes_AS_STRING(outs[i]))) {
            return 0;
        }
    }
    return 1;
}

static PyObject *
py_decode_base64_list(PyObject *self, PyObject *items)
{
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "decode_base64_list() needs a list");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(items);
    PyObject **texts = PyMem_Calloc(count ? count : 1, sizeof(PyObject *));
    PyObject **outs = PyMem_Calloc(count ? count : 1, sizeof(PyObject *));
    if (texts == NULL || outs == NULL) {
        PyMem_Free(texts);
        PyMem_Free(outs);
        return PyErr_NoMemory();
    }
    int ok = 1;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (item == Py_None) {
            continue;
        }
        if (!PyUnicode_CheckExact(item) || !PyUnicode_IS_COMPACT_ASCII(item)) {
            ok = 0;
            break;
        }
        Py_ssize_t n = PyUnicode_GET_LENGTH(item);
        if (n % 4 != 0) {
            ok = 0;
            break;
        }
        const unsigned char *text = PyUnicode_1BYTE_DATA(item);
        Py_ssize_t size = n / 4 * 3;
        if (n) {
            size -= (text[n - 1] == '=') + (text[n - 1] == '=' && text[n - 2] == '=');
        }
        texts[i] = Py_NewRef(item);
        outs[i] = PyBytes_FromStringAndSize(NULL, size);
        if (outs[i] == NULL) {
            ok = -1;
            break;
        }
        total += n;
    }
    if (ok == 1) {
        if (total >= (1 << 16)) { /* below, a few us: not worth handing the GIL over */
            Py_BEGIN_ALLOW_THREADS
            ok = b64_decode_all(texts, outs, count);
            Py_END_ALLOW_THREADS
        } else {
            ok = b64_decode_all(texts, outs, count);
        }
        /* shared after all (changed while the GIL was released): leave it as it is now */
        for (Py_ssize_t i = 0; ok == 1 && i < count; i++) {
            if (texts[i] != NULL && (PyList_GET_SIZE(items) != count || PyList_GET_ITEM(items, i) != texts[i])) {
                ok = 0;
            }
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (ok == 1 && outs[i] != NULL) {
            PyList_SET_ITEM(items, i, outs[i]); /* the list's str is still held in texts[i] */
            Py_DECREF(texts[i]);            /* the list's reference */
            outs[i] = NULL;
        }
        Py_XDECREF(outs[i]);
        Py_XDECREF(texts[i]);
    }
    PyMem_Free(texts);
    PyMem_Free(outs);
    if (ok < 0) {
        return NULL;
    }
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"decode_varint", (PyCFunction)(void (*)(void))py_decode_varint, METH_FASTCALL, NULL},
    {"decode_varlong", (PyCFunction)(void (*)(void))py_decode_varlong, METH_FASTCALL, NULL},
    {"encode_varint", py_encode_varint, METH_O, NULL},
    {"encode_varlong", py_encode_varlong, METH_O, NULL},
    {"decode_records", (PyCFunction)(void (*)(void))py_decode_records, METH_FASTCALL, NULL},
    {"validate_records", (PyCFunction)(void (*)(void))py_validate_records, METH_FASTCALL, NULL},
    {"encode_records", (PyCFunction)(void (*)(void))py_encode_records, METH_FASTCALL, NULL},
    {"build_uncompressed", (PyCFunction)(void (*)(void))py_build_uncompressed, METH_FASTCALL, NULL},
    {"build_uncompressed_columns", (PyCFunction)(void (*)(void))py_build_uncompressed_columns, METH_FASTCALL,
     NULL},
    {"decode_columns", py_decode_columns, METH_O, NULL},
    {"make_record", (PyCFunction)(void (*)(void))py_make_record, METH_FASTCALL, NULL},
    {"consumer_records", (PyCFunction)(void (*)(void))py_consumer_records, METH_FASTCALL, NULL},
    {"set_record_type", py_set_record_type, METH_O, NULL},
    {"count_bytes", (PyCFunction)(void (*)(void))py_count_bytes, METH_FASTCALL, NULL},
    {"decode_base64_list", py_decode_base64_list, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The compiled core of the record batch v2 codec.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *errors = PyImport_ImportModule("tierlog.wire.errors");
    if (errors == NULL) {
        return NULL;
    }
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRequestError = PyObject_GetAttrString(errors, "InvalidRequestError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRequestError == NULL) {
        return NULL;
    }
    PyObject *crc = PyImport_ImportModule("crc32c");
    if (crc == NULL) {
        return NULL;
    }
    crc32c_fn = PyObject_GetAttrString(crc, "crc32c");
    Py_DECREF(crc);
    if (crc32c_fn == NULL) {
        return NULL;
    }
    b64_init();
    return PyModule_Create(&module);
}

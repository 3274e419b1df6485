/* REST v2's JSON in C (CPython C API): the records array's text for decoded record columns, and the
 * records of a binary produce body.
 *
 * render_binary_rows writes the objects of a records fetch answer in the binary embedded format,
 * {"topic":T,"key":K,"value":V,"partition":P,"offset":O} with K and V null or base64 text, straight from
 * the columns tierlog.tiering.codec.columns.decode_columns makes: no Python object per record, base64
 * and JSON in one pass, the GIL released for large runs. service/rest_v2/convert.py's msgspec renderer
 * (_struct_body) is the reference: this writes its text byte for byte (tests/unit/service/rest_v2/test_convert.py).
 * It lives here, not in the codec's compiled core, because the text is REST's shape, not the codec's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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

#if defined(__x86_64__) && defined(__GNUC__)
#include <tmmintrin.h>
#define HAVE_SSSE3_PATH 1

/* 12 bytes into 16 characters at a time with SSSE3's byte shuffle, while 16 bytes can be read (Mula and
   Lemire's method): each 3-byte group spread over a 32-bit lane, its four 6-bit values moved into the
   lane's bytes by two multiplies, then each value shifted into its character by a 16-entry table indexed
   by its range (A-Z, a-z, 0-9, '+', '/'). Answers how many bytes it encoded. */
__attribute__((target("ssse3"))) static Py_ssize_t
b64_encode_ssse3(char *o, const unsigned char *p, Py_ssize_t n)
{
    const __m128i spread = _mm_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1);
    const __m128i shift = _mm_setr_epi8('a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                        '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '+' - 62, '/' - 63,
                                        'A', 0, 0);
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 12) {
        __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + i)), spread);
        __m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00)),
                                     _mm_set1_epi32(0x04000040));
        __m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003f03f0)),
                                     _mm_set1_epi32(0x01000010));
        __m128i values = _mm_or_si128(hi, lo);
        /* 0..25 -> 13, 26..51 -> 0, 52..61 -> 1..10, 62 -> 11, 63 -> 12 */
        __m128i range = _mm_subs_epu8(values, _mm_set1_epi8(51));
        __m128i letters = _mm_cmpgt_epi8(_mm_set1_epi8(26), values);
        range = _mm_or_si128(range, _mm_and_si128(letters, _mm_set1_epi8(13)));
        _mm_storeu_si128((__m128i *)o, _mm_add_epi8(values, _mm_shuffle_epi8(shift, range)));
        o += 16;
    }
    return i;
}

static int use_ssse3;
#endif

/* Standard base64 with padding (base64.b64encode's), n bytes of p into o; answers the end of what it
   wrote. */
static char *
b64_encode(char *o, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
#ifdef HAVE_SSSE3_PATH
    if (use_ssse3 && n >= 16) {
        i = b64_encode_ssse3(o, p, n);
        o += i / 3 * 4;
    }
#endif
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
        int32_t k0 = in.key_ends[i], k1 = in.key_ends[i + 1];
        int32_t v0 = in.value_ends[i], v1 = in.value_ends[i + 1];
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

/* ---------------------------------------------------------------- produce bodies */

/* One record of a produce body as the scan finds it: each key and value the position and length of its
   base64 text (length -1: null), the partition -1 when null. */
typedef struct {
    Py_ssize_t key_at, key_len, value_at, value_len;
    long long partition;
} body_row;

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, i;
} cursor;

static void
skip_ws(cursor *c)
{
    while (c->i < c->n) {
        unsigned char ch = c->p[c->i];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
            break;
        }
        c->i++;
    }
}

/* Whether the text at the cursor is lit (and move past it). */
static int
take(cursor *c, const char *lit)
{
    size_t k = strlen(lit);
    if (c->n - c->i < (Py_ssize_t)k || memcmp(c->p + c->i, lit, k) != 0) {
        return 0;
    }
    c->i += (Py_ssize_t)k;
    return 1;
}

/* b64_bits[k][c]: the value of character c at position k of a quad, shifted into place; b64_bad[c]: 1 for
   a character outside the 64 */
static uint32_t b64_bits[4][256];
static unsigned char b64_bad[256];

static void
b64_decode_init(void)
{
    memset(b64_bad, 1, sizeof(b64_bad));
    for (int v = 0; v < 64; v++) {
        unsigned char ch = (unsigned char)b64_chars[v];
        b64_bad[ch] = 0;
        for (int k = 0; k < 4; k++) {
            b64_bits[k][ch] = (uint32_t)v << (18 - 6 * k);
        }
    }
}

#ifdef __SSE2__
/* The bytes of v that are in [lo, hi] (ASCII bounds; a byte of 0x80 and up is negative as a signed byte,
   so in no range). */
static __m128i
in_range(__m128i v, char lo, char hi)
{
    return _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8((char)(lo - 1))),
                         _mm_cmplt_epi8(v, _mm_set1_epi8((char)(hi + 1))));
}
#endif

/* Whether the n bytes at q are all of base64's 64 characters: 16 at a time with SSE2 (every x86-64 has
   it), the rest through the table. */
static int
all_base64(const unsigned char *q, Py_ssize_t n)
{
    Py_ssize_t j = 0;
#ifdef __SSE2__
    for (; j + 16 <= n; j += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(q + j));
        __m128i ok = _mm_or_si128(_mm_or_si128(in_range(v, 'A', 'Z'), in_range(v, 'a', 'z')),
                                  _mm_or_si128(in_range(v, '0', '9'),
                                               _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('+')),
                                                            _mm_cmpeq_epi8(v, _mm_set1_epi8('/')))));
        if (_mm_movemask_epi8(ok) != 0xFFFF) {
            return 0;
        }
    }
#endif
    unsigned char bad = 0;
    for (; j < n; j++) {
        bad |= b64_bad[q[j]];
    }
    return !bad;
}

/* A string of canonical base64 at the cursor (a length that is a multiple of 4, the 64 characters, at
   most two '=' and only at the end), or null: its position and length (-1 for null). 0 when it is
   anything else. The body holds no backslash (the caller checked), so a string ends at its next quote. */
static int
take_base64(cursor *c, Py_ssize_t *at, Py_ssize_t *len)
{
    if (take(c, "null")) {
        *at = 0;
        *len = -1;
        return 1;
    }
    if (c->i >= c->n || c->p[c->i] != '"') {
        return 0;
    }
    const unsigned char *q = c->p + c->i + 1;
    const unsigned char *close = memchr(q, '"', (size_t)(c->n - c->i - 1));
    if (close == NULL) {
        return 0;
    }
    Py_ssize_t n = close - q, text = n;
    if (n % 4 != 0) {
        return 0;
    }
    if (n && q[n - 1] == '=') { /* at most two '=', only at the end */
        text = q[n - 2] == '=' ? n - 2 : n - 1;
    }
    if (!all_base64(q, text)) {
        return 0;
    }
    *at = c->i + 1;
    *len = n;
    c->i += n + 2; /* the quotes */
    return 1;
}

/* A partition at the cursor: null (-1) or a JSON integer 0..10^18-1 without sign, fraction or exponent. */
static int
take_partition(cursor *c, long long *partition)
{
    if (take(c, "null")) {
        *partition = -1;
        return 1;
    }
    Py_ssize_t start = c->i;
    long long v = 0;
    while (c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9') {
        if (c->i - start == 18) {
            return 0; /* a 19th digit: msgspec decides */
        }
        v = v * 10 + (c->p[c->i] - '0');
        c->i++;
    }
    Py_ssize_t digits = c->i - start;
    if (digits == 0 || (digits > 1 && c->p[start] == '0')) {
        return 0;
    }
    if (c->i < c->n && (c->p[c->i] == '.' || c->p[c->i] == 'e' || c->p[c->i] == 'E')) {
        return 0;
    }
    *partition = v;
    return 1;
}

/* One record object at the cursor: members "key", "value" and "partition", each at most once. */
static int
take_record(cursor *c, body_row *row)
{
    row->key_len = row->value_len = -1;
    row->key_at = row->value_at = 0;
    row->partition = -1;
    int seen = 0;
    if (!take(c, "{")) {
        return 0;
    }
    skip_ws(c);
    if (take(c, "}")) {
        return 1;
    }
    for (;;) {
        int field;
        if (take(c, "\"key\"")) {
            field = 1;
        } else if (take(c, "\"value\"")) {
            field = 2;
        } else if (take(c, "\"partition\"")) {
            field = 4;
        } else {
            return 0; /* another field: msgspec refuses it, and the walk words the error */
        }
        if (seen & field) {
            return 0; /* a repeated field: the walk keeps the last one, decided there */
        }
        seen |= field;
        skip_ws(c);
        if (!take(c, ":")) {
            return 0;
        }
        skip_ws(c);
        int ok = field == 1   ? take_base64(c, &row->key_at, &row->key_len)
                 : field == 2 ? take_base64(c, &row->value_at, &row->value_len)
                              : take_partition(c, &row->partition);
        if (!ok) {
            return 0;
        }
        skip_ws(c);
        if (take(c, "}")) {
            return 1;
        }
        if (!take(c, ",")) {
            return 0;
        }
        skip_ws(c);
    }
}

/* The rows of a body that is exactly {"records": [record, ...]} (JSON whitespace anywhere), at least one
   and at most limit of them: the count, -1 for any other body, -2 out of memory. Needs no GIL. */
static Py_ssize_t
scan_body(const unsigned char *p, Py_ssize_t n, Py_ssize_t limit, body_row **rows_out)
{
    cursor c = {p, n, 0};
    body_row *rows = NULL;
    Py_ssize_t count = 0, cap = 0;
    skip_ws(&c);
    if (!take(&c, "{")) {
        goto decline;
    }
    skip_ws(&c);
    if (!take(&c, "\"records\"")) {
        goto decline;
    }
    skip_ws(&c);
    if (!take(&c, ":")) {
        goto decline;
    }
    skip_ws(&c);
    if (!take(&c, "[")) {
        goto decline;
    }
    skip_ws(&c);
    for (;;) {
        if (count == limit) {
            goto decline;
        }
        if (count == cap) {
            Py_ssize_t grown = cap ? cap * 2 : 64;
            if (grown > limit) {
                grown = limit;
            }
            body_row *more = PyMem_RawRealloc(rows, (size_t)grown * sizeof(body_row));
            if (more == NULL) {
                PyMem_RawFree(rows);
                return -2;
            }
            rows = more;
            cap = grown;
        }
        if (!take_record(&c, &rows[count])) {
            goto decline;
        }
        count++;
        skip_ws(&c);
        if (take(&c, "]")) {
            break;
        }
        if (!take(&c, ",")) {
            goto decline;
        }
        skip_ws(&c);
    }
    skip_ws(&c);
    if (!take(&c, "}")) {
        goto decline;
    }
    skip_ws(&c);
    if (c.i != c.n) {
        goto decline;
    }
    *rows_out = rows;
    return count;
decline:
    PyMem_RawFree(rows);
    return -1;
}

static Py_ssize_t
decoded_size(const unsigned char *text, Py_ssize_t n)
{
    Py_ssize_t pads = n >= 1 && text[n - 1] == '=' ? (n >= 2 && text[n - 2] == '=' ? 2 : 1) : 0;
    return n / 4 * 3 - pads;
}

/* Canonical base64 (checked by the scan) into out, as base64.b64decode(validate=True) decodes it: whole
   quads, then the last one, which may end in one or two '='. */
static void
b64_decode_into(const unsigned char *text, Py_ssize_t n, unsigned char *out)
{
    if (n == 0) {
        return;
    }
    Py_ssize_t whole = n - 4;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t x = b64_bits[0][text[i]] | b64_bits[1][text[i + 1]] | b64_bits[2][text[i + 2]] |
                     b64_bits[3][text[i + 3]];
        out[0] = (unsigned char)(x >> 16);
        out[1] = (unsigned char)(x >> 8);
        out[2] = (unsigned char)x;
        out += 3;
    }
    const unsigned char *q = text + whole;
    uint32_t x = b64_bits[0][q[0]] | b64_bits[1][q[1]];
    *out++ = (unsigned char)(x >> 16);
    if (q[2] != '=') {
        x |= b64_bits[2][q[2]];
        *out++ = (unsigned char)(x >> 8);
        if (q[3] != '=') {
            x |= b64_bits[3][q[3]];
            *out = (unsigned char)x;
        }
    }
}

/* parse_binary_records(body, limit) -> (keys, values, partitions) or None
 * The records of a binary-format produce body that is exactly {"records": [...]} with one to limit
 * records, each an object of at most "key", "value" (canonical base64 strings or null) and "partition"
 * (null or a non-negative integer), each at most once, as three lists (bytes or None, int or None).
 * None for any other body: it may be valid (other body fields, repeated fields, other spellings) or not;
 * the caller's other paths decide. The body must hold no backslash (the caller checks). The scan and the
 * decoding run with the GIL released (the body is bytes, immutable; the new bytes are the call's own). */
static PyObject *
py_parse_binary_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse_binary_records(body: bytes, limit: int)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]), count;
    body_row *rows = NULL;
    if (limit < 1) {
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    count = scan_body(p, n, limit, &rows);
    Py_END_ALLOW_THREADS
    if (count == -2) {
        return PyErr_NoMemory();
    }
    if (count < 0) {
        Py_RETURN_NONE;
    }
    /* The keys and values are made and decoded before any list holds them: while the GIL is released
       nothing but this call can reach them (a list is visible to the garbage collector, a bytes object
       held only here is not). items[2r] and items[2r + 1] are row r's key and value, NULL for a null. */
    PyObject **items = PyMem_RawCalloc((size_t)count * 2, sizeof(PyObject *));
    PyObject *keys = NULL, *values = NULL, *partitions = NULL;
    if (items == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t r = 0; r < 2 * count; r++) {
        Py_ssize_t at = r % 2 ? rows[r / 2].value_at : rows[r / 2].key_at;
        Py_ssize_t len = r % 2 ? rows[r / 2].value_len : rows[r / 2].key_len;
        if (len >= 0 && (items[r] = PyBytes_FromStringAndSize(NULL, decoded_size(p + at, len))) == NULL) {
            goto error;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < 2 * count; r++) {
        if (items[r] != NULL) {
            Py_ssize_t at = r % 2 ? rows[r / 2].value_at : rows[r / 2].key_at;
            Py_ssize_t len = r % 2 ? rows[r / 2].value_len : rows[r / 2].key_len;
            b64_decode_into(p + at, len, (unsigned char *)PyBytes_AS_STRING(items[r]));
        }
    }
    Py_END_ALLOW_THREADS
    keys = PyList_New(count);
    values = PyList_New(count);
    partitions = PyList_New(count);
    if (keys == NULL || values == NULL || partitions == NULL) {
        goto error;
    }
    for (Py_ssize_t r = 0; r < count; r++) {
        PyObject *partition =
            rows[r].partition < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(rows[r].partition);
        if (partition == NULL) {
            goto error;
        }
        PyList_SET_ITEM(partitions, r, partition);
        /* each list takes the reference items held */
        PyList_SET_ITEM(keys, r, items[2 * r] != NULL ? items[2 * r] : Py_NewRef(Py_None));
        PyList_SET_ITEM(values, r, items[2 * r + 1] != NULL ? items[2 * r + 1] : Py_NewRef(Py_None));
        items[2 * r] = items[2 * r + 1] = NULL;
    }
    PyMem_RawFree(items);
    PyMem_RawFree(rows);
    return Py_BuildValue("(NNN)", keys, values, partitions);
error:
    if (items != NULL) {
        for (Py_ssize_t r = 0; r < 2 * count; r++) {
            Py_XDECREF(items[r]);
        }
    }
    PyMem_RawFree(items);
    PyMem_RawFree(rows);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(partitions);
    return NULL;
}

/* ---------------------------------------------------------------- produce answers */

/* append_offsets(out, partition, low, high): appends to the bytearray out, for each offset from low up to
   high, the produce answer's line ,{"partition":P,"offset":O,"error_code":null,"error":null} (the text
   Python's %d formatting makes). */
static PyObject *
py_append_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append_offsets(out, partition, low, high)");
        return NULL;
    }
    PyObject *out = args[0];
    if (!PyByteArray_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "append_offsets: out must be a bytearray");
        return NULL;
    }
    long long partition, low, high;
    if (((partition = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) ||
        ((low = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred()) ||
        ((high = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())) {
        return NULL;
    }
    static const char head[] = ",{\"partition\":", mid[] = ",\"offset\":",
                      tail[] = ",\"error_code\":null,\"error\":null}";
    Py_ssize_t fixed = (Py_ssize_t)(sizeof(head) - 1 + sizeof(mid) - 1 + sizeof(tail) - 1) +
                       decimal_len(partition);
    /* 20 decimal digits at most per offset: a bound checked before the exact size is summed */
    if (low < 0 || high < low || high - low > (PY_SSIZE_T_MAX - PyByteArray_GET_SIZE(out)) / (fixed + 20)) {
        PyErr_SetString(PyExc_ValueError,
                        "append_offsets: low must be at least 0, high at least low, and the text fit");
        return NULL;
    }
    Py_ssize_t size = 0;
    for (long long v = low; v < high; v++) {
        size += fixed + decimal_len(v);
    }
    Py_ssize_t at = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, at + size) < 0) {
        return NULL;
    }
    char *o = PyByteArray_AS_STRING(out) + at;
    for (long long v = low; v < high; v++) {
        o = LIT(o, head);
        o = decimal_write(o, partition);
        o = LIT(o, mid);
        o = decimal_write(o, v);
        o = LIT(o, tail);
    }
    Py_RETURN_NONE;
}

/* use_simd(flag) -> whether the vector paths were on: turns them off (False) or back on where the CPU
   has them (True), for tests that compare both paths. Not thread-safe. */
static PyObject *
py_use_simd(PyObject *self, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0) {
        return NULL;
    }
#ifdef HAVE_SSSE3_PATH
    int was = use_ssse3;
    __builtin_cpu_init();
    use_ssse3 = on && __builtin_cpu_supports("ssse3");
    return PyBool_FromLong(was);
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"render_binary_rows", (PyCFunction)(void (*)(void))py_render_binary_rows, METH_FASTCALL,
     "render_binary_rows(offsets, key_offsets, key_data, key_validity, value_offsets, value_data, "
     "value_validity, first, last, start_offset, high_watermark, topic_json, partition, out) -> (low, high)"},
    {"parse_binary_records", (PyCFunction)(void (*)(void))py_parse_binary_records, METH_FASTCALL,
     "parse_binary_records(body, limit) -> (keys, values, partitions), or None"},
    {"append_offsets", (PyCFunction)(void (*)(void))py_append_offsets, METH_FASTCALL,
     "append_offsets(out, partition, low, high): the produce answer's lines of offsets low to high - 1"},
    {"use_simd", py_use_simd, METH_O, "use_simd(flag) -> whether the vector paths were on (for tests)"},
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
    b64_decode_init();
#ifdef HAVE_SSSE3_PATH
    __builtin_cpu_init();
    use_ssse3 = __builtin_cpu_supports("ssse3");
#endif
    return PyModule_Create(&module);
}

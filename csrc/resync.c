/* Native twin of sharestate/log/resync.py: the cheap header checks of resynchronisation,
 * and of sharestate/log/checksums.py's crc_shift, which keeps its CRCs linear.
 *
 * next_candidate(buf, off, stop, eof, max_batch) -> p >= 0: the first position in
 * [off, stop) whose header passes every check; -1 - p: none before p, where p is stop or
 * the first position whose checks need bytes past the end of buf (eof false). The checks
 * are those of resync.check_at, byte for byte.
 *
 * crc_shift(crc, length, castagnoli) -> x^(8 * length) * crc modulo CRC-32C's polynomial
 * (castagnoli) or CRC-32's, as checksums.crc_shift_py computes it.
 */
#include "native.h"

static const int32_t MIN_LENGTH[3] = {14, 22, 49};

static inline int32_t be32s(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)__builtin_bswap32(v);
}

static inline long long be64s(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (long long)__builtin_bswap64(v);
}

static inline int16_t be16s(const unsigned char *p) {
    return (int16_t)native_be16(p);
}

/* The v2 checks on an entry at b with `left` bytes at hand. */
static inline int check_v2(const unsigned char *b, Py_ssize_t left, int more,
                           long long length) {
    if (left < 61) return more;
    unsigned attributes = native_be16(b + 21);
    unsigned codec = attributes & 7;
    long long last_delta = be32s(b + 23);
    long long count = be32s(b + 57);
    if ((attributes & 0xFF80) || codec > 4 || last_delta < 0 || count < 0
        || count > last_delta + 1)
        return 0;
    if (be32s(b + 12) < -1 || be64s(b + 27) < -1 || be64s(b + 35) < -1 || be64s(b + 43) < -1
        || be16s(b + 51) < -1 || be32s(b + 53) < -1)
        return 0;
    if (count == 0) return length == 49;
    if (codec == 1 || codec == 3 || codec == 4) {
        static const unsigned char gzip[] = {0x1f, 0x8b}, lz4[] = {0x04, 0x22, 0x4d, 0x18},
                                   zstd[] = {0x28, 0xb5, 0x2f, 0xfd};
        const unsigned char *magic = codec == 1 ? gzip : codec == 3 ? lz4 : zstd;
        Py_ssize_t size = codec == 1 ? 2 : 4;
        if (left < 61 + size) return more;
        return memcmp(b + 61, magic, (size_t)size) == 0;
    }
    if (codec == 0 && count * 7 > length - 49) return 0;
    if (left < 67) return more;
    if (codec == 2 && memcmp(b + 61, "\x82SNAPPY", 6) == 0) return 1;
    unsigned long long raw = 0; /* the first record's length, or the raw snappy block's */
    int size = 0, ended = 0;
    while (size < 5) {
        unsigned byte = b[61 + size];
        raw |= (unsigned long long)(byte & 0x7F) << (7 * size);
        size++;
        if (byte < 0x80) { ended = 1; break; }
    }
    if (!ended) return 0;
    if (codec == 2) return (long long)raw >= count * 7; /* unsigned: the uncompressed size */
    long long record_length = (long long)(raw >> 1) ^ -(long long)(raw & 1);
    return record_length >= 6 && size + record_length <= length - 49 && b[61 + size] == 0;
}

/* 1 passes, 0 fails, -1 needs bytes past n. */
static inline int check_at(const unsigned char *buf, Py_ssize_t n, Py_ssize_t i, int eof,
                           long long max_batch) {
    int more = eof ? 0 : -1;
    if (i + 17 > n) return more;
    const unsigned char *b = buf + i;
    unsigned magic = b[16];
    if (magic > 2) return 0;
    long long length = (int32_t)native_be32(b + 8);
    if (length < MIN_LENGTH[magic] || length > max_batch - 12) return 0;
    if (eof && i + 12 + length > n) return 0;
    if (magic == 2) return check_v2(b, n - i, more, length);
    Py_ssize_t key_at = i + (magic == 0 ? 18 : 26);
    if (key_at + 4 > n) return more;
    unsigned attributes = b[17];
    if ((attributes & (magic == 0 ? 0xF8 : 0xF0)) || (attributes & 7) > 3) return 0;
    long long key_length = (int32_t)native_be32(buf + key_at);
    Py_ssize_t value_at = key_at + 4 + (key_length > 0 ? key_length : 0);
    long long end = i + 12 + length;
    if (key_length < -1 || value_at + 4 > end) return 0;
    if (value_at + 4 > n) return 1; /* the value length is checked once the message is read */
    long long value_length = (int32_t)native_be32(buf + value_at);
    return value_length >= -1 && value_at + 4 + (value_length > 0 ? value_length : 0) == end;
}

PyObject *native_next_candidate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "next_candidate takes 5 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t off = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    int eof = PyObject_IsTrue(args[3]);
    long long max_batch = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred() || eof < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len;
    if (off < 0) off = 0;
    if (stop > n) stop = n;
    Py_ssize_t i = off, result = -1 - (stop > off ? stop : off);
    /* Most positions fail on the magic byte or the length: reject those inline first. */
    Py_ssize_t fast_end = n - 16 < stop ? n - 16 : stop;
    long long longest = max_batch - 12;
    for (; i < stop; i++) {
        if (i < fast_end) {
            unsigned magic = buf[i + 16];
            if (magic > 2) continue;
            int32_t length = be32s(buf + i + 8);
            if (length < MIN_LENGTH[magic] || length > longest) continue;
        }
        int verdict = check_at(buf, n, i, eof, max_batch);
        if (verdict) {
            result = verdict > 0 ? i : -1 - i;
            break;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(result);
}

/* a * b modulo the (reflected) polynomial: zlib's multmodp. */
static uint32_t multiply(uint32_t a, uint32_t b, uint32_t poly) {
    uint32_t m = (uint32_t)1 << 31, product = 0;
    for (;;) {
        if (a & m) {
            product ^= b;
            if ((a & (m - 1)) == 0) return product;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ poly : b >> 1;
    }
}

static uint32_t powers[2][64]; /* x^(2^k) modulo CRC-32's and CRC-32C's polynomials */
static int powers_ready = 0;

PyObject *native_crc_shift(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "crc_shift takes 3 arguments");
        return NULL;
    }
    unsigned long long crc = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long length = PyLong_AsUnsignedLongLong(args[1]);
    int castagnoli = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || castagnoli < 0) return NULL;
    if (crc > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_OverflowError, "crc_shift: crc is not 32 bits");
        return NULL;
    }
    static const uint32_t polys[2] = {0xEDB88320u, 0x82F63B78u};
    if (!powers_ready) {
        for (int which = 0; which < 2; which++) {
            powers[which][0] = (uint32_t)1 << 30; /* x^1 */
            for (int k = 1; k < 64; k++)
                powers[which][k] = multiply(powers[which][k - 1], powers[which][k - 1],
                                            polys[which]);
        }
        powers_ready = 1;
    }
    uint32_t poly = polys[castagnoli], factor = (uint32_t)1 << 31; /* x^0 */
    for (int k = 3; length && k < 64; length >>= 1, k++)
        if (length & 1) factor = multiply(powers[castagnoli][k], factor, poly);
    return PyLong_FromUnsignedLong(multiply(factor, (uint32_t)crc, poly));
}

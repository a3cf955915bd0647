# HMAC-SHA-256 (FIPS 180-4, RFC 2104) in C, callable without the GIL: a
# dial's handshake computes its proof between its two waits without taking
# the GIL back (see DialAuth in _tcp.pyx). Included by _tcp.pyx; checked
# against Python's hmac module in tests/unit/test_dial_auth.py.

from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

ctypedef struct Sha256:
    uint32_t h[8]
    uint8_t block[64]
    size_t fill                   # bytes in `block`
    uint64_t total                # bytes hashed so far


cdef uint32_t _SHA_K[64]          # round constants, computed at import
cdef uint32_t _SHA_H0[8]          # initial state


def _root_bits(p, n):
    """The first 32 bits of the fraction of p's n-th root (the standard's
    definition of its constants), in integers."""
    x = p << (32 * n)
    lo, hi = 0, 1 << 64
    while lo < hi:                # the largest r with r**n <= x
        mid = (lo + hi + 1) // 2
        if mid ** n <= x:
            lo = mid
        else:
            hi = mid - 1
    return lo & 0xFFFFFFFF


def _sha_constants():
    primes, k = [], 2
    while len(primes) < 64:
        if all(k % q for q in primes):
            primes.append(k)
        k += 1
    for i in range(64):
        _SHA_K[i] = _root_bits(primes[i], 3)
    for i in range(8):
        _SHA_H0[i] = _root_bits(primes[i], 2)


_sha_constants()


cdef inline uint32_t _rotr(uint32_t x, int n) noexcept nogil:
    return (x >> n) | (x << (32 - n))


cdef void _sha_compress(Sha256 *s, const uint8_t *p) noexcept nogil:
    cdef uint32_t w[64]
    cdef uint32_t a, b, c, d, e, f, g, h, t1, t2, s0, s1
    cdef int i
    for i in range(16):
        w[i] = ((<uint32_t>p[4 * i] << 24) | (<uint32_t>p[4 * i + 1] << 16)
                | (<uint32_t>p[4 * i + 2] << 8) | <uint32_t>p[4 * i + 3])
    for i in range(16, 64):
        s0 = _rotr(w[i - 15], 7) ^ _rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
        s1 = _rotr(w[i - 2], 17) ^ _rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
        w[i] = w[i - 16] + s0 + w[i - 7] + s1
    a, b, c, d = s.h[0], s.h[1], s.h[2], s.h[3]
    e, f, g, h = s.h[4], s.h[5], s.h[6], s.h[7]
    for i in range(64):
        s1 = _rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)
        t1 = h + s1 + ((e & f) ^ (~e & g)) + _SHA_K[i] + w[i]
        s0 = _rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)
        t2 = s0 + ((a & b) ^ (a & c) ^ (b & c))
        h, g, f, e = g, f, e, d + t1
        d, c, b, a = c, b, a, t1 + t2
    s.h[0] += a
    s.h[1] += b
    s.h[2] += c
    s.h[3] += d
    s.h[4] += e
    s.h[5] += f
    s.h[6] += g
    s.h[7] += h


cdef void _sha_init(Sha256 *s) noexcept nogil:
    memcpy(s.h, _SHA_H0, sizeof(s.h))
    s.fill = 0
    s.total = 0


cdef void _sha_update(Sha256 *s, const uint8_t *p, size_t n) noexcept nogil:
    cdef size_t take
    s.total += n
    while n:
        take = 64 - s.fill
        if take > n:
            take = n
        memcpy(s.block + s.fill, p, take)
        s.fill += take
        p += take
        n -= take
        if s.fill == 64:
            _sha_compress(s, s.block)
            s.fill = 0


cdef void _sha_final(Sha256 *s, uint8_t *out) noexcept nogil:
    cdef uint64_t bits = s.total * 8
    cdef uint8_t pad[72]
    cdef size_t n = (55 - s.fill) % 64 + 1     # 0x80, zeros: 56 mod 64 filled
    cdef int i
    pad[0] = 0x80
    for i in range(1, <int>n):
        pad[i] = 0
    for i in range(8):
        pad[n + i] = <uint8_t>(bits >> (56 - 8 * i))
    _sha_update(s, pad, n + 8)
    for i in range(8):
        out[4 * i] = <uint8_t>(s.h[i] >> 24)
        out[4 * i + 1] = <uint8_t>(s.h[i] >> 16)
        out[4 * i + 2] = <uint8_t>(s.h[i] >> 8)
        out[4 * i + 3] = <uint8_t>s.h[i]


cdef void _hmac_sha256(const uint8_t *key, size_t klen, const uint8_t *a, size_t alen,
                       const uint8_t *b, size_t blen, const uint8_t *c, size_t clen,
                       uint8_t *out) noexcept nogil:
    """HMAC-SHA-256 under `key` of the bytes a + b + c, into out[32]."""
    cdef Sha256 s
    cdef uint8_t k[64]
    cdef uint8_t pad[64]
    cdef uint8_t inner[32]
    cdef int i
    for i in range(64):
        k[i] = 0
    if klen > 64:                 # a long key is hashed first
        _sha_init(&s)
        _sha_update(&s, key, klen)
        _sha_final(&s, k)
    else:
        memcpy(k, key, klen)
    for i in range(64):
        pad[i] = k[i] ^ 0x36
    _sha_init(&s)
    _sha_update(&s, pad, 64)
    _sha_update(&s, a, alen)
    _sha_update(&s, b, blen)
    _sha_update(&s, c, clen)
    _sha_final(&s, inner)
    for i in range(64):
        pad[i] = k[i] ^ 0x5c
    _sha_init(&s)
    _sha_update(&s, pad, 64)
    _sha_update(&s, inner, 32)
    _sha_final(&s, out)


def hmac_sha256_now(const unsigned char[::1] key, const unsigned char[::1] data):
    """HMAC-SHA-256 of `data` under `key` (the C code the dial uses; for
    tests: it must equal hmac.digest(key, data, "sha256"))."""
    cdef uint8_t out[32]
    cdef const uint8_t *k = &key[0] if key.shape[0] else <const uint8_t *>b""
    cdef const uint8_t *d = &data[0] if data.shape[0] else <const uint8_t *>b""
    with nogil:
        _hmac_sha256(k, key.shape[0], d, data.shape[0], d, 0, d, 0, out)
    return PyBytes_FromStringAndSize(<char *>out, 32)

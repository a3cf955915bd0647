# HMAC-SHA-256 in C, from the system's OpenSSL (libcrypto, the library
# Python's own hashlib uses), opened at import with dlopen so that building
# gloocy needs no OpenSSL headers: a dial's handshake computes its proof
# between its two waits without taking the GIL back (see DialAuth in
# _tcp.pyx), and the listener's MACs (handshake._mac, by hmac_sha256_now)
# keep the GIL rather than let it go as Python's hmac.digest does. Where no
# libcrypto can be opened, `_hmac_sha256` returns 0 and both use Python's
# hmac module instead. Included by _tcp.pyx; checked against Python's hmac
# in tests/unit/test_dial_auth.py.

from libc.stdint cimport uint8_t
from libc.string cimport memcpy

cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *filename, int flags)
    void *dlsym(void *handle, const char *symbol)
    enum:
        RTLD_NOW
        RTLD_LOCAL

ctypedef const void *(*_evp_md_fn)() noexcept nogil
ctypedef unsigned char *(*_hmac_fn)(const void *md, const void *key, int key_len,
                                    const unsigned char *data, size_t n,
                                    unsigned char *out, unsigned int *out_len) noexcept nogil

cdef _hmac_fn _HMAC = NULL        # libcrypto's one-shot HMAC()
cdef const void *_SHA256 = NULL   # its EVP_sha256()


cdef void _open_libcrypto():
    global _HMAC, _SHA256
    cdef void *lib = NULL
    cdef _evp_md_fn sha256
    for name in (b"libcrypto.so.3", b"libcrypto.so.1.1", b"libcrypto.so"):
        lib = dlopen(<const char *>name, RTLD_NOW | RTLD_LOCAL)
        if lib != NULL:
            break
    if lib == NULL:
        return
    sha256 = <_evp_md_fn>dlsym(lib, "EVP_sha256")
    _HMAC = <_hmac_fn>dlsym(lib, "HMAC")
    if sha256 == NULL or _HMAC == NULL:
        _HMAC = NULL
        return
    _SHA256 = sha256()


_open_libcrypto()
have_c_hmac = _HMAC != NULL


cdef int _hmac_sha256(const uint8_t *key, size_t klen, const uint8_t *a, size_t alen,
                      const uint8_t *b, size_t blen, const uint8_t *c, size_t clen,
                      uint8_t *out) noexcept nogil:
    """HMAC-SHA-256 under `key` of the bytes a + b + c, into out[32]:
    1 done, 0 not (no libcrypto, or no memory)."""
    cdef unsigned int got = 0
    cdef size_t n = alen + blen + clen
    cdef uint8_t *data
    cdef int ok
    if _HMAC == NULL:
        return 0
    data = <uint8_t *>malloc(n + 1)
    if data == NULL:
        return 0
    memcpy(data, a, alen)
    memcpy(data + alen, b, blen)
    memcpy(data + alen + blen, c, clen)
    ok = _HMAC(_SHA256, key, <int>klen, data, n, out, &got) != NULL and got == 32
    free(data)
    return ok


def hmac_sha256_now(const unsigned char[::1] key, const unsigned char[::1] data):
    """HMAC-SHA-256 of `data` under `key` through the C path the dial uses
    (it equals hmac.digest(key, data, "sha256")); None where no libcrypto
    could be opened. Keeps the GIL, unlike Python's hmac.digest: a
    handshake's MAC takes about a microsecond, and a thread that lets the
    GIL go waits to get it back behind the others that want it (hundreds,
    in a process of rank threads; the listener answering their dials)."""
    cdef uint8_t out[32]
    cdef const uint8_t *k = &key[0] if key.shape[0] else <const uint8_t *>b""
    cdef const uint8_t *d = &data[0] if data.shape[0] else <const uint8_t *>b""
    if not _hmac_sha256(k, key.shape[0], d, data.shape[0], d, 0, d, 0, out):
        return None
    return PyBytes_FromStringAndSize(<char *>out, 32)

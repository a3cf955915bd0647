/* A copy whose stores bypass the caches (non-temporal), for large results
 * that will not be read again soon: a plain store first reads the
 * destination's line from memory (read for ownership), so a cache-cold
 * copy moves three bytes through memory per byte copied, a streaming one
 * two. On x86-64 (SSE2 is part of the base ISA); elsewhere a memcpy. The
 * fence at the end orders the streamed stores before whatever the caller
 * stores next (a node step's arrival, which tells the others to read). */
#ifndef GLOOCY_COPY_H
#define GLOOCY_COPY_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline void gloocy_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE2__)
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t head = (size_t)(-(uintptr_t)d & 63);
    if (n < 4096) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);            /* up to the destination's next line */
    d += head;
    s += head;
    n -= head;
    while (n >= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
        d += 64;
        s += 64;
        n -= 64;
    }
    _mm_sfence();
    memcpy(d, s, n);
#else
    memcpy(dst, src, n);
#endif
}

#endif

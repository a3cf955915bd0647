/* IEEE 754 binary16 <-> binary32 conversions, portable C (no F16C needed).
 * Reductions on float16 compute in float32 and round once, as NumPy does. */
#ifndef GLOOCY_HALF_H
#define GLOOCY_HALF_H
#include <stdint.h>
#include <string.h>

static inline float gloocy_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {                      /* inf or nan */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {                  /* normal */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {                  /* zero */
        bits = sign;
    } else {                                /* subnormal: normalise */
        exp = 113u;
        while (!(man & 0x400u)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gloocy_f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff)                        /* inf or nan (keep nan quiet) */
        return sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0);
    int32_t e = (int32_t)exp - 112;         /* rebias 127 -> 15 */
    if (e >= 0x1f)                          /* overflow -> inf */
        return sign | 0x7c00u;
    if (e <= 0) {                           /* subnormal or zero in half */
        if (e < -10)
            return sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return sign | (uint16_t)half;
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
        half++;                             /* may carry into inf: correct */
    return sign | (uint16_t)half;
}
#endif

/* bfloat16: the upper half of a float32; rounding to nearest even. */
#ifndef GLOOCY_BF16_H
#define GLOOCY_BF16_H
static inline float gloocy_bf2f(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gloocy_f2bf(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)    /* nan: keep it quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
#endif

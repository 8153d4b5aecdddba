/*
 * half.c - IEEE 754 binary16 (FP16) and bfloat16 (BF16) <-> binary32.
 *
 * binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 * bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa).
 * Widening is exact; narrowing rounds to nearest, ties to even.
 */
#include <string.h>

#include "oip.h"

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/*
 * oip_fp16_to_float: exact widening. Normals rebias the exponent (15 ->
 * 127) and shift the mantissa; subnormals (exponent 0) are m * 2^-24 and
 * are normalised by shifting until the implicit bit appears; exponent 31 is
 * inf (mantissa 0) or NaN (payload kept in the top mantissa bits).
 */
float oip_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1f) /* inf / NaN */
        return bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp != 0) /* normal */
        return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) /* +-0 */
        return bits_to_float(sign);
    /* subnormal: value = man * 2^-24; normalise so bit 10 is set */
    int e = 113; /* biased float exponent of 2^-14, the fp16 subnormal scale */
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    man &= 0x3ffu;
    return bits_to_float(sign | ((uint32_t)e << 23) | (man << 13));
}

float oip_bf16_to_float(uint16_t b)
{
    return bits_to_float((uint32_t)b << 16);
}

/*
 * oip_float_to_fp16: round to nearest even. Works on the magnitude bits:
 * values at or above 65520 (the midpoint between the largest finite half
 * and 2^16) overflow to inf; values below 2^-14 become subnormal by shifting
 * the full 24-bit significand right with a round-to-nearest-even on the
 * dropped bits; a carry out of the mantissa correctly bumps the exponent.
 */
uint16_t oip_float_to_fp16(float f)
{
    uint32_t u = float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 or inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* >= 2^-14: normal half */
        uint32_t r = a - ((uint32_t)(127 - 15) << 23); /* rebias */
        uint32_t lsb = (r >> 13) & 1u;
        r += 0xfffu + lsb; /* round to nearest even on 13 dropped bits */
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 ties to 0) */
        return sign;
    /* subnormal half: significand with implicit bit, shifted right */
    uint32_t e = a >> 23;                      /* 102 .. 112 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;  /* 24 bits */
    uint32_t shift = 126u - e;                 /* 14 .. 24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* may carry into the smallest normal: still correct bits */
    return (uint16_t)(sign | q);
}

uint16_t oip_float_to_bf16(float f)
{
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, keep top payload */
        return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb; /* overflow of the exponent gives inf, as it should */
    return (uint16_t)(u >> 16);
}

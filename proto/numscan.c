/*
 * numscan.c - eight numbers of a JSON tensor's data at a time (AVX-512).
 *
 * The common shape of tensor data in JSON is a run of short numbers,
 * "-0.731272, 0.694867, ..." (Python's json.dumps of rounded floats, the
 * page's requests): one integer digit, one to seven fraction digits.
 * oip__short_float takes one such number in ~9 ns, bound by its
 * instruction count. Here eight are taken at once: the commas of the next
 * 128 bytes give each number's start and length, each number's 16 bytes
 * go to one 128-bit lane, one shuffle per lane lines its digits up and
 * two multiply-adds make its integer, and the eight integers are divided
 * by their powers of ten as doubles (exact operands, one rounding) and
 * rounded to float, as oip__short_float does: the same floats. Anything
 * else (a longer number, an exponent, other spacing, fewer than eight
 * commas in the 128 bytes, a CPU without AVX-512) declines with nothing
 * decided, and the caller goes on one number at a time.
 */
#include "proto/oip_internal.h"

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512dq,avx512cd,avx512vl,avx512bw")))

/* For a number of neg ('-' or not) and k fraction digits (1..7), the byte
 * shuffle that puts its 1 + k digit values right-aligned in bytes 0..7 of
 * its lane and its '.' in byte 8 (128: a zero byte): the integer digit is
 * at byte neg, the '.' at neg + 1, fraction digit t at neg + 2 + t. */
#define CTL(n, k, j)                                                        \
    ((j) == 8 ? (n) + 1                                                     \
     : (j) > 8 || (j) < 7 - (k) ? 128                                       \
     : (j) == 7 - (k)           ? (n)                                       \
                                : (n) + (j) + (k) - 6)
#define CTL_ROW(n, k)                                                            \
    {CTL(n, k, 0),  CTL(n, k, 1),  CTL(n, k, 2),  CTL(n, k, 3), CTL(n, k, 4),    \
     CTL(n, k, 5),  CTL(n, k, 6),  CTL(n, k, 7),  CTL(n, k, 8), CTL(n, k, 9),    \
     CTL(n, k, 10), CTL(n, k, 11), CTL(n, k, 12), CTL(n, k, 13), CTL(n, k, 14), \
     CTL(n, k, 15)}
#define CTL_NEG(n)                                                              \
    {CTL_ROW(n, 0), CTL_ROW(n, 1), CTL_ROW(n, 2), CTL_ROW(n, 3), CTL_ROW(n, 4), \
     CTL_ROW(n, 5), CTL_ROW(n, 6), CTL_ROW(n, 7)}
static const uint8_t ctl[2][8][16] = {CTL_NEG(0), CTL_NEG(1)};

/*
 * oip__short_floats8 (AVX-512): see oip_internal.h. The checks per number
 * are exactly lex_short's grammar: the bytes before its comma are '-'?
 * digit '.' digit{1,7} (the length fixes k, the shuffle then takes every
 * byte after the '-').
 */
AVX512 static const char *floats8(const char *p, float *out)
{
    const __m512i comma = _mm512_set1_epi8(',');
    uint64_t m0 = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(p), comma);
    uint64_t m1 = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(p + 64), comma);
    int start[8], c = 0;
    uint32_t neg = 0;
    int32_t k[8];
    __m512i lane[2], ctlv[2];
    int s = 0;
    for (int i = 0; i < 8; i++) {
        if (m0) {
            c = __builtin_ctzll(m0);
            m0 &= m0 - 1;
        } else if (m1) {
            c = 64 + __builtin_ctzll(m1);
            m1 &= m1 - 1;
        } else {
            return NULL; /* long numbers: fewer than 8 in 128 bytes */
        }
        /* the number is [s, c): '-'?, then 1 + 1 + k bytes */
        int n = p[s] == '-', kk = c - s - n - 2;
        if ((unsigned)(kk - 1) > 6)
            return NULL;
        start[i] = s;
        k[i] = kk;
        neg |= (uint32_t)n << i;
        s = c + 1;
        s += p[s] == ' ';
    }
    for (int h = 0; h < 2; h++) {
        __m512i v = _mm512_setzero_si512(), t = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            int i = 4 * h + j;
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + start[i]));
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)ctl[(neg >> i) & 1][k[i]]);
            switch (j) { /* the lane index must be a constant */
            case 0: v = _mm512_inserti32x4(v, b, 0); t = _mm512_inserti32x4(t, x, 0); break;
            case 1: v = _mm512_inserti32x4(v, b, 1); t = _mm512_inserti32x4(t, x, 1); break;
            case 2: v = _mm512_inserti32x4(v, b, 2); t = _mm512_inserti32x4(t, x, 2); break;
            default: v = _mm512_inserti32x4(v, b, 3); t = _mm512_inserti32x4(t, x, 3); break;
            }
        }
        lane[h] = v;
        ctlv[h] = t;
    }
    /* the '.' (byte 8, '.' - '0' after the subtraction) becomes 0 */
    const __m512i dot = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0,
                                                             (char)('.' - '0'), 0, 0, 0, 0, 0, 0, 0));
    const __m512i w10 = _mm512_broadcast_i32x4(_mm_setr_epi8(10, 1, 10, 1, 10, 1, 10, 1, 0, 0,
                                                             0, 0, 0, 0, 0, 0));
    const __m512i w100 = _mm512_broadcast_i32x4(_mm_setr_epi16(100, 1, 100, 1, 0, 0, 0, 0));
    const __m512i w10k = _mm512_broadcast_i32x4(_mm_setr_epi16(10000, 1, 0, 0, 0, 0, 0, 0));
    const uint64_t dots = 0x0100010001000100ull; /* byte 8 of each lane */
    __m512i mant[2];
    for (int h = 0; h < 2; h++) {
        /* every byte of the number but a leading '-' is in the shuffle:
         * the digits must be 0..9 and the '.' a '.' (0 once xored; the
         * bytes around '.' xor to 1..9 as well, hence its own test) */
        __m512i d = _mm512_sub_epi8(lane[h], _mm512_set1_epi8('0'));
        __m512i x = _mm512_xor_si512(_mm512_shuffle_epi8(d, ctlv[h]), dot);
        if (_mm512_cmpgt_epu8_mask(x, _mm512_set1_epi8(9)) ||
            (_mm512_cmpeq_epi8_mask(x, _mm512_setzero_si512()) & dots) != dots)
            return NULL;
        x = _mm512_maddubs_epi16(x, w10);               /* 4 of 2 digits */
        x = _mm512_madd_epi16(x, w100);                 /* 2 of 4 digits */
        x = _mm512_packus_epi32(x, x);
        mant[h] = _mm512_madd_epi16(x, w10k);           /* 8 digits, dword 0 */
    }
    const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
    __m256i m = _mm512_castsi512_si256(_mm512_permutex2var_epi32(mant[0], pick, mant[1]));
    __m512i ki = _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i *)(const void *)k));
    const __m512d p10 = _mm512_setr_pd(1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7);
    /* one rounding to double, then to float: wrong only for a double
     * exactly halfway between two floats (or below FLT_MIN), which no
     * quotient of up to 8 digits by 10^1..10^7 is (oip__short_float
     * checks for it; tests/proto/test_numscan.c checks every one) */
    __m512d q = _mm512_div_pd(_mm512_cvtepi32_pd(m), _mm512_permutexvar_pd(ki, p10));
    __m256 f = _mm512_cvtpd_ps(q);
    f = _mm256_castsi256_ps(_mm256_mask_xor_epi32(_mm256_castps_si256(f), (__mmask8)neg,
                                                  _mm256_castps_si256(f),
                                                  _mm256_set1_epi32((int)0x80000000u)));
    _mm256_storeu_ps(out, f);
    return p + c;
}

const char *oip__short_floats8(const char *p, const char *end, float *out)
{
    if (end - p < OIP__FLOATS8_ROOM || !oip__fmt_floats_simd())
        return NULL;
    return floats8(p, out);
}

#else

const char *oip__short_floats8(const char *p, const char *end, float *out)
{
    (void)p, (void)end, (void)out;
    return NULL;
}

#endif

/*
 * numfmt.c - JSON numbers <-> float/int, fast and exact.
 *
 * Printing: 9 significant digits always round-trip a binary32 (the decimal
 * spacing, at most 1e-8 of the value, is finer than half a float ulp, at
 * least 2^-25 of it). The digits come from one double multiplication by a
 * power of ten: its error (< 3e-16 relative) moves the 9-digit integer by
 * far less than the margin, so the printed text still lies within half an
 * ulp of f and parses back to f.
 *
 * Parsing: the value is computed in double, then rounded to float; the
 * double carries 29 more bits than the float, so rounding it gives the
 * correctly rounded float unless it sits (within its own error) on a float
 * midpoint. Clinger's case (significand <= 2^53, |exp10| <= 22) is one
 * correctly rounded operation on exact operands, ambiguous only on an exact
 * midpoint. Otherwise (up to 19 digits, exp10 in [-64, 40]) three roundings
 * leave an error of a few double ulps, and anything within 8 ulps of a
 * midpoint is handed over. The rest (longer significands, far exponents,
 * float subnormals, the ambiguous cases) goes to strtof on a copy, which
 * is correctly rounded in glibc. Python's 17-digit reprs take the fast
 * path.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oip_internal.h"

static const double p10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10,
    1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21,
    1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32,
    1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43,
    1e44, 1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54,
    1e55, 1e56, 1e57, 1e58, 1e59, 1e60, 1e61, 1e62, 1e63, 1e64};

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* d * 10^e for the e range the printer needs (-31 .. 56). */
static double scale10(double d, int e)
{
    return e >= 0 ? d * p10[e] : d / p10[-e];
}

/* The two ASCII digits of v < 100, the first in the low byte. */
static uint16_t pair(uint32_t v)
{
    uint16_t t;
    memcpy(&t, digit_pairs + 2 * v, 2);
    return t;
}

/* eight_digits: lo < 1e8 as eight ASCII digits in one word, the first in
 * the lowest byte. */
static uint64_t eight_digits(uint32_t lo)
{
    uint32_t a = lo / 10000u, b = lo % 10000u;
    return (uint64_t)pair(a / 100) | (uint64_t)pair(a % 100) << 16 |
           (uint64_t)pair(b / 100) << 32 | (uint64_t)pair(b % 100) << 48;
}

/* kept: of the nine digits d0 and w, how many remain once trailing zeros
 * are dropped (at least one). */
static int kept(uint64_t w)
{
    uint64_t z = w ^ 0x3030303030303030ULL; /* nonzero bytes: digits > 0 */
    return z ? 9 - (__builtin_clzll(z) >> 3) : 1;
}

/*
 * emit: writes the nine digits d0, w (nd kept) of a number whose first
 * digit has decimal exponent k, after any sign; returns the end. The digits
 * are stored as one word (the point and what follows overwrite the rest),
 * so emit writes at most 16 bytes from the number's start, sign included,
 * though it may return less.
 */
static char *emit(char *p, char d0, uint64_t w, int nd, int k)
{
    if (k >= 0 && k <= 8) { /* ddd[.ddd] */
        *p++ = d0;
        if (k > 0) {
            memcpy(p, &w, 8);
            p += k;
        }
        if (nd > k + 1) {
            uint64_t fr = w >> (8 * k); /* k < 8 here */
            *p++ = '.';
            if (k <= 5) {
                memcpy(p, &fr, 8); /* ends by byte 16 */
                p += nd - k - 1;
            } else {
                for (int i = 0; i < nd - k - 1; i++, fr >>= 8)
                    *p++ = (char)fr;
            }
        }
    } else if (k < 0 && k >= -5) { /* 0.000ddd */
        memcpy(p, "0.000000", 8); /* "0." and up to four zeros */
        p += 1 - k;
        *p++ = d0;
        memcpy(p, &w, 8); /* ends by byte 16 */
        p += nd - 1;
    } else { /* d.ddde-x */
        *p++ = d0;
        if (nd > 1) {
            *p++ = '.';
            memcpy(p, &w, 8); /* the exponent overwrites the rest */
            p += nd - 1;
        }
        *p++ = 'e';
        if (k < 0) {
            *p++ = '-';
            k = -k;
        }
        if (k >= 10)
            *p++ = (char)('0' + k / 10);
        *p++ = (char)('0' + k % 10);
    }
    return p;
}

/*
 * oip__fmt_float: see oip_internal.h. k is first estimated from the binary
 * exponent (floor(log10 d) or one less), then corrected once from the
 * scaled value. The binary exponent comes from the float's bits (frexp for
 * subnormals) and floor((e2 - 1) log10 2) from (e2 - 1) * 78913 >> 18,
 * which equals it for |e2 - 1| <= 1650.
 */
size_t oip__fmt_float(float f, char *out)
{
    char *p = out;
    if (signbit(f))
        *p++ = '-';
    double d = fabs((double)f);
    if (d == 0) {
        *p++ = '0';
        return (size_t)(p - out);
    }
    int e2; /* d in [2^(e2-1), 2^e2) */
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    if (fb & 0x7f800000u)
        e2 = (int)((fb >> 23) & 0xffu) - 126;
    else
        (void)frexp(d, &e2);
    int k = ((e2 - 1) * 78913) >> 18;
    double s = scale10(d, 8 - k);
    if (s >= 999999999.5) {
        k++;
        s = scale10(d, 8 - k);
    }
    uint32_t n = (uint32_t)(s + 0.5); /* 9 digits: [1e8, 1e9) */
    uint64_t w = eight_digits(n % 100000000u);
    p = emit(p, (char)('0' + n / 100000000u), w, kept(w), k);
    return (size_t)(p - out);
}

static size_t fmt_floats_scalar(const float *f, size_t n, char *out)
{
    char *p = out;
    for (size_t i = 0; i < n; i++) {
        p += oip__fmt_float(f[i], p);
        *p++ = ',';
    }
    return (size_t)(p - out);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512dq,avx512cd,avx512vl,avx512bw")))

/* scale8: scale10 on eight lanes (the same multiply or divide, so the same
 * doubles). The powers come from two registers when all are below 10^16
 * (the common case: numbers of magnitude 1e-7 to 1e8), a gather otherwise
 * (slower: 6.0 against 6.5 ns a float on 1024 floats in [-2, 2]). AVX-512. */
AVX512 static __m512d scale8(__m512d d, __m256i e)
{
    __m256i ae = _mm256_abs_epi32(e);
    __m512d p;
    if (_mm256_cmpgt_epu32_mask(ae, _mm256_set1_epi32(15)) == 0)
        p = _mm512_permutex2var_pd(_mm512_loadu_pd(p10), _mm512_cvtepu32_epi64(ae),
                                   _mm512_loadu_pd(p10 + 8));
    else
        p = _mm512_i32gather_pd(ae, p10, 8);
    __mmask8 neg = _mm256_cmpgt_epi32_mask(_mm256_setzero_si256(), e);
    return _mm512_mask_div_pd(_mm512_mul_pd(d, p), neg, d, p);
}

/* lane: the l-th 128 bits of the two laid-out groups of four. */
#define LANE(src, l) _mm512_extracti32x4_epi32((src)[(l) >> 2], (l) & 3)

/* lanes: stores eight laid-out numbers (len bytes each in src's 128-bit
 * lanes), each after its sign and followed by ','; the lanes in expo are
 * laid out by emit from their digits instead. One 16-byte store a number,
 * as emit's. AVX-512. */
AVX512 static inline char *lanes(char *p, const __m512i src[2], const int32_t *len,
                                 __m256i bits, __mmask8 expo, const uint64_t *wv,
                                 const uint64_t *hv, const uint64_t *ndv,
                                 const int32_t *kv)
{
    uint32_t neg = _mm256_movemask_ps(_mm256_castsi256_ps(bits));
#define ONE(l)                                                                   \
    do {                                                                         \
        *p = '-';                                                                \
        p += (neg >> (l)) & 1;                                                   \
        if (expo >> (l) & 1) {                                                   \
            p = emit(p, (char)('0' + hv[l]), wv[l], (int)ndv[l], kv[l]);         \
        } else {                                                                 \
            _mm_storeu_si128((__m128i *)p, LANE(src, l));                        \
            p += len[l];                                                         \
        }                                                                        \
        *p++ = ',';                                                              \
    } while (0)
    ONE(0); ONE(1); ONE(2); ONE(3); ONE(4); ONE(5); ONE(6); ONE(7);
#undef ONE
    return p;
}

/*
 * fmt_floats_avx512: oip__fmt_float's arithmetic on eight floats at once,
 * then each laid out by one shuffle (fixed notation; a zero takes k 0 and
 * prints "0") or by emit (exponent form); a group with a subnormal goes to
 * the scalar printer. The steps and constants are the
 * scalar ones: n / 1e8 is (n * 1441151881) >> 57 and lo / 1e4 is
 * (lo * 109951163) >> 40 (exact for n < 1e9 and lo < 1e8), and the eight
 * low digits come from splitting lanes: two of four digits, then four of
 * two ((x * 10486) >> 20 is x / 100 for x < 10^4), then eight of one
 * ((x * 103) >> 10 is x / 10 for x < 100). AVX-512.
 */
AVX512 static size_t fmt_floats_avx512(const float *f, size_t n, char *out)
{
    char *p = out;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i bits = _mm256_loadu_si256((const __m256i *)(f + i));
        __m256i ef = _mm256_and_si256(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0xff));
        __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
        __mmask8 zero = _mm256_cmpeq_epi32_mask(mag, _mm256_setzero_si256());
        __mmask8 sub = _mm256_cmpeq_epi32_mask(ef, _mm256_setzero_si256()) & (__mmask8)~zero;
        if (sub) {
            p += fmt_floats_scalar(f + i, 8, p);
            continue;
        }
        __m512d d = _mm512_cvtps_pd(_mm256_castsi256_ps(mag));
        __m256i e2m1 = _mm256_sub_epi32(ef, _mm256_set1_epi32(127));
        __m256i k = _mm256_srai_epi32(_mm256_mullo_epi32(e2m1, _mm256_set1_epi32(78913)), 18);
        k = _mm256_mask_mov_epi32(k, zero, _mm256_setzero_si256()); /* "0" */
        __m512d s = scale8(d, _mm256_sub_epi32(_mm256_set1_epi32(8), k));
        __mmask8 up = _mm512_cmp_pd_mask(s, _mm512_set1_pd(999999999.5), _CMP_GE_OQ);
        if (up) {
            __m256i k1 = _mm256_mask_add_epi32(k, up, k, _mm256_set1_epi32(1));
            s = _mm512_mask_mov_pd(s, up, scale8(d, _mm256_sub_epi32(_mm256_set1_epi32(8), k1)));
            k = k1;
        }
        __m512i nn = _mm512_cvtepu32_epi64(_mm512_cvttpd_epu32(_mm512_add_pd(s, _mm512_set1_pd(0.5))));
        __m512i hi = _mm512_srli_epi64(_mm512_mul_epu32(nn, _mm512_set1_epi64(1441151881)), 57);
        __m512i lo = _mm512_sub_epi64(nn, _mm512_mul_epu32(hi, _mm512_set1_epi64(100000000)));
        __m512i a = _mm512_srli_epi64(_mm512_mul_epu32(lo, _mm512_set1_epi64(109951163)), 40);
        __m512i b = _mm512_sub_epi64(lo, _mm512_mul_epu32(a, _mm512_set1_epi64(10000)));
        __m512i w = _mm512_or_si512(a, _mm512_slli_epi64(b, 32));
        __m512i q = _mm512_and_si512(_mm512_srli_epi64(_mm512_mullo_epi64(w, _mm512_set1_epi64(10486)), 20),
                                     _mm512_set1_epi64(0x0000007F0000007FLL));
        w = _mm512_or_si512(q, _mm512_slli_epi64(_mm512_sub_epi64(w, _mm512_mullo_epi64(q, _mm512_set1_epi64(100))), 16));
        q = _mm512_and_si512(_mm512_srli_epi64(_mm512_mullo_epi64(w, _mm512_set1_epi64(103)), 10),
                             _mm512_set1_epi64(0x000F000F000F000FLL));
        w = _mm512_or_si512(q, _mm512_slli_epi64(_mm512_sub_epi64(w, _mm512_mullo_epi64(q, _mm512_set1_epi64(10))), 8));
        w = _mm512_add_epi64(w, _mm512_set1_epi64(0x3030303030303030LL));
        __m512i nd = _mm512_sub_epi64(_mm512_set1_epi64(9),
                                      _mm512_srli_epi64(_mm512_lzcnt_epi64(_mm512_xor_si512(w, _mm512_set1_epi64(0x3030303030303030LL))), 3));
        /* each lane's 16 source bytes: d0, the eight digits, '.', '0' */
        __m512i lo8 = _mm512_or_si512(_mm512_add_epi64(hi, _mm512_set1_epi64('0')),
                                      _mm512_slli_epi64(w, 8));
        __m512i hi8 = _mm512_or_si512(_mm512_srli_epi64(w, 56), _mm512_set1_epi64(0x302e00));
        __m512i src[2] = {
            _mm512_permutex2var_epi64(lo8, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), hi8),
            _mm512_permutex2var_epi64(lo8, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), hi8)};
        /* each lane's k in every byte of its 128 bits */
        __m512i kq = _mm512_cvtepi32_epi64(k);
        __m512i kb[2] = {
            _mm512_shuffle_epi8(_mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), kq),
                                _mm512_setzero_si512()),
            _mm512_shuffle_epi8(_mm512_permutexvar_epi64(_mm512_setr_epi64(4, 4, 5, 5, 6, 6, 7, 7), kq),
                                _mm512_setzero_si512())};
        /* the fixed notations' shuffles: output byte j is digit j before
         * the point (k >= 0) or '0' (k < 0); the point at k + 1 (k >= 0)
         * or 1; after it digit j - 1 (k >= 0) or j - (1 - k), '0' below 0 */
        const __m512i j = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                               10, 11, 12, 13, 14, 15));
        const __m512i one = _mm512_set1_epi8(1), ten = _mm512_set1_epi8(10);
        __m512i ctl[2];
        for (int h = 0; h < 2; h++) {
            __mmask64 pos = _mm512_cmpgt_epi8_mask(kb[h], _mm512_set1_epi8(-1));
            __m512i dot = _mm512_mask_add_epi8(one, pos, kb[h], one);
            __m512i sh = _mm512_mask_mov_epi8(_mm512_sub_epi8(one, kb[h]), pos, one);
            __m512i after = _mm512_min_epu8(_mm512_sub_epi8(j, sh), ten);
            __m512i c = _mm512_mask_mov_epi8(after, _mm512_cmplt_epi8_mask(j, dot),
                                             _mm512_mask_mov_epi8(ten, pos, j));
            ctl[h] = _mm512_mask_mov_epi8(c, _mm512_cmpeq_epi8_mask(j, dot), _mm512_set1_epi8(9));
            src[h] = _mm512_shuffle_epi8(src[h], ctl[h]);
        }
        /* lengths: 1 - k + nd (k < 0), nd + 1 when digits follow the
         * point, else k + 1 */
        __m256i ndd = _mm512_cvtepi64_epi32(nd), one32 = _mm256_set1_epi32(1);
        __m256i k1 = _mm256_add_epi32(k, one32);
        __m256i len = _mm256_mask_mov_epi32(k1, _mm256_cmpgt_epi32_mask(ndd, k1),
                                            _mm256_add_epi32(ndd, one32));
        len = _mm256_mask_sub_epi32(len, _mm256_cmpgt_epi32_mask(_mm256_setzero_si256(), k),
                                    _mm256_add_epi32(ndd, one32), k);
        __mmask8 expo = _mm256_cmpgt_epu32_mask(_mm256_add_epi32(k, _mm256_set1_epi32(5)),
                                               _mm256_set1_epi32(13));
        int32_t lv[8];
        _mm256_storeu_si256((__m256i *)lv, len);
        if (expo) { /* rare: a lane in exponent form, laid out by emit */
            uint64_t wv[8], hv[8], ndv[8];
            int32_t kv[8];
            _mm512_storeu_si512(wv, w);
            _mm512_storeu_si512(hv, hi);
            _mm512_storeu_si512(ndv, nd);
            _mm256_storeu_si256((__m256i *)kv, k);
            p = lanes(p, src, lv, bits, expo, wv, hv, ndv, kv);
        } else {
            p = lanes(p, src, lv, bits, 0, NULL, NULL, NULL, NULL);
        }
    }
    return (size_t)(p - out) + fmt_floats_scalar(f + i, n - i, p);
}

#endif

size_t oip__fmt_floats(const float *f, size_t n, char *out, int simd)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd && oip__fmt_floats_simd()) /* the test's question too */
        return fmt_floats_avx512(f, n, out);
#endif
    (void)simd;
    return fmt_floats_scalar(f, n, out);
}

size_t oip_json_floats(const float *f, size_t n, char *out)
{
    char *p = out;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && isfinite(f[j]))
            j++;
        p += oip__fmt_floats(f + i, j - i, p, 1);
        if (j < n) {
            memcpy(p, "null,", 5);
            p += 5;
            j++;
        }
        i = j;
    }
    return (size_t)(p - out);
}

int oip__fmt_floats_simd(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* __builtin_cpu_supports also checks the OS saves the wide registers */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

size_t oip__fmt_i64(int64_t v, char *out)
{
    char tmp[20];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    char *p = out;
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return (size_t)(p - out);
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Digits go into mant while it stays below 1e18 (so 19 digits always fit);
 * leading zeros leave mant at 0 and cost nothing. Past that, digits are
 * dropped and the number is marked inexact (digits = 20) for the slow path.
 */
#define MANT_ROOM 1000000000000000000ULL

static const uint64_t pow10_u64[9] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

static const char *lex_digits(const char *p, const char *end, oip__num *n,
                              int frac)
{
    uint64_t mant = n->mant;
    int exp10 = n->exp10, digits = n->digits;
    /* Eight bytes at a time while the digits surely fit (mant < 1e10, so
     * mant * 1e8 + 8 digits < 1e18 + 1e8, as the byte loop allows): the
     * leading run of digits (bytes whose value minus '0' is 0..9) is
     * shifted to the top of the word and converted by three multiplies. */
    while (end - p >= 8 && mant < 10000000000ULL) {
        uint64_t v, t, m, w, z;
        int k, lz;
        memcpy(&v, p, sizeof v);
        t = v - 0x3030303030303030ULL;
        m = ((t + 0x7676767676767676ULL) | t) & 0x8080808080808080ULL;
        k = m ? __builtin_ctzll(m) >> 3 : 8; /* borrows only reach past it */
        if (k == 0)
            break;
        w = v << (8 * (8 - k)); /* k digits, '\0' bytes as leading zeros */
        w = (w & 0x0F0F0F0F0F0F0F0FULL) * 2561 >> 8;
        w = (w & 0x00FF00FF00FF00FFULL) * 6553601 >> 16;
        w = (w & 0x0000FFFF0000FFFFULL) * 42949672960001ULL >> 32;
        if (mant) {
            digits += k;
        } else {
            z = v ^ 0x3030303030303030ULL; /* '0' bytes become 0 */
            lz = z ? __builtin_ctzll(z) >> 3 : 8;
            digits += lz < k ? k - lz : 0;
        }
        mant = mant * pow10_u64[k] + w;
        exp10 -= frac * k;
        p += k;
        if (k < 8) {
            n->mant = mant;
            n->exp10 = exp10;
            n->digits = digits;
            return p;
        }
    }
    while (p < end) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d > 9)
            break;
        if (mant < MANT_ROOM) {
            mant = mant * 10 + d;
            exp10 -= frac;
            if (mant)
                digits++;
        } else {
            digits = 20;
            exp10 += !frac;
        }
        p++;
    }
    n->mant = mant;
    n->exp10 = exp10;
    n->digits = digits > 20 ? 20 : digits;
    return p;
}

/*
 * lex_short: the common shape of tensor data, -?d.f with one integer digit
 * and one to seven fraction digits (e.g. -0.731272), read with one eight-
 * byte load. Fills n exactly as the general lexer would and returns the
 * end, or NULL when p has another shape (then nothing is decided).
 */
static const char *lex_short(const char *p, const char *end, oip__num *n)
{
    const char *q = p + (*p == '-');
    uint64_t v, t, m, w, z;
    unsigned d;
    int k, lz;
    if (end - q < 10 || q[1] != '.')
        return NULL;
    d = (unsigned)(unsigned char)q[0] - '0';
    if (d > 9)
        return NULL;
    memcpy(&v, q + 2, sizeof v);
    t = v - 0x3030303030303030ULL;
    m = ((t + 0x7676767676767676ULL) | t) & 0x8080808080808080ULL;
    if (!m)
        return NULL; /* eight or more fraction digits */
    k = __builtin_ctzll(m) >> 3;
    if (k == 0 || (q[2 + k] | 0x20) == 'e')
        return NULL; /* "d." alone, or an exponent follows */
    w = v << (8 * (8 - k));
    w = (w & 0x0F0F0F0F0F0F0F0FULL) * 2561 >> 8;
    w = (w & 0x00FF00FF00FF00FFULL) * 6553601 >> 16;
    w = (w & 0x0000FFFF0000FFFFULL) * 42949672960001ULL >> 32;
    n->start = p;
    n->neg = *p == '-';
    n->is_int = 0;
    n->mant = d * pow10_u64[k] + w;
    n->exp10 = -k;
    if (d) {
        n->digits = 1 + k;
    } else {
        z = v ^ 0x3030303030303030ULL;
        lz = z ? __builtin_ctzll(z) >> 3 : 8;
        n->digits = lz < k ? k - lz : 0;
    }
    n->end = q + 2 + k;
    return n->end;
}

const char *oip__short_float(const char *p, const char *end, float *out)
{
    oip__num n;
    if (!lex_short(p, end, &n) || n.mant == 0)
        return NULL;
    /* as oip__num_to_float: at most 8 digits and exp10 in [-7, -1], so
     * one correctly rounded division of exact operands */
    double d = (double)n.mant / p10[-n.exp10];
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    if (d < 0x1p-126 || (bits & 0x1fffffffu) == 0x10000000u)
        return NULL;
    float f = (float)d;
    *out = n.neg ? -f : f;
    return n.end;
}

/*
 * oip__lex_number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? exactly.
 * The exponent saturates at 100000 (any such number is 0 or inf anyway).
 */
const char *oip__lex_number(const char *p, const char *end, oip__num *n)
{
    const char *fast = p < end ? lex_short(p, end, n) : NULL;
    if (fast)
        return fast;
    n->start = p;
    n->mant = 0;
    n->exp10 = 0;
    n->digits = 0;
    n->neg = 0;
    n->is_int = 1;
    if (p < end && *p == '-') {
        n->neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p))
        return NULL;
    if (*p == '0')
        p++;
    else
        p = lex_digits(p, end, n, 0);
    if (p < end && *p == '.') {
        n->is_int = 0;
        p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        p = lex_digits(p, end, n, 1);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->is_int = 0;
        p++;
        int eneg = 0, e = 0;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p)) {
            if (e < 100000)
                e = e * 10 + (*p - '0');
            p++;
        }
        n->exp10 += eneg ? -e : e;
    }
    n->end = p;
    return p;
}

/* strtof on a terminated copy of the token. */
static float slow_float(const oip__num *n)
{
    char small[64];
    size_t len = (size_t)(n->end - n->start);
    char *s = len < sizeof small ? small : malloc(len + 1);
    if (!s) { /* out of memory: a rounded approximation beats failing */
        double d = (double)n->mant * pow(10.0, n->exp10);
        return (float)(n->neg ? -d : d);
    }
    memcpy(s, n->start, len);
    s[len] = 0;
    float f = strtof(s, NULL);
    if (s != small)
        free(s);
    return f;
}

float oip__num_to_float(const oip__num *n)
{
    if (n->mant == 0)
        return n->neg ? -0.0f : 0.0f;
    if (n->digits > 19 || n->exp10 < -64 || n->exp10 > 40)
        return slow_float(n);
    int exact = n->mant <= ((uint64_t)1 << 53) && n->exp10 >= -22 &&
                n->exp10 <= 22;
    double d = (double)n->mant;
    d = n->exp10 >= 0 ? d * p10[n->exp10] : d / p10[-n->exp10];
    if (d < 0x1p-126) /* float subnormal range: other bits get dropped */
        return slow_float(n);
    /* a normal float keeps the top 24 of the double's 53 bits: 29 dropped */
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int64_t off = (int64_t)(bits & 0x1fffffffu) - 0x10000000;
    /* exact: one rounding, so only an exact midpoint is ambiguous.
     * inexact: mant, the power and the product each round (<= 3 half-ulps
     * in all), so stay clear of midpoints by a margin. */
    if (exact ? off == 0 : (off >= -8 && off <= 8))
        return slow_float(n);
    float f = (float)d;
    return n->neg ? -f : f;
}

int oip__num_to_i64(const oip__num *n, int64_t *out)
{
    if (n->mant == 0) {
        *out = 0;
        return 0;
    }
    if (!n->is_int || n->digits > 19 || n->exp10 != 0)
        return -1;
    if (n->neg) {
        if (n->mant > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = (int64_t)(0 - n->mant);
    } else {
        if (n->mant > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)n->mant;
    }
    return 0;
}

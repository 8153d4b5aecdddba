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
 * Parsing: Clinger's fast path. When the significand has <= 19 digits,
 * fits in 2^53 and |exp10| <= 22, mant * 10^e (or / 10^-e) is one correctly
 * rounded double operation on exact operands. Rounding that double to float
 * equals rounding the exact value unless the double landed exactly on a
 * float midpoint (then we fall back to strtof). Everything else (long
 * significands, huge or tiny exponents) goes to strtof on a copy, which is
 * correctly rounded in glibc.
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
    1e55, 1e56};

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* d * 10^e for the e range the printer needs (-31 .. 56). */
static double scale10(double d, int e)
{
    return e >= 0 ? d * p10[e] : d / p10[-e];
}

/*
 * oip__fmt_float: see oip_internal.h. k is first estimated from the binary
 * exponent (floor(log10 d) or one less), then corrected once from the
 * scaled value.
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
    int e2;
    (void)frexp(d, &e2); /* d in [2^(e2-1), 2^e2) */
    int k = (int)floor((e2 - 1) * 0.30102999566398120);
    double s = scale10(d, 8 - k);
    if (s >= 999999999.5) {
        k++;
        s = scale10(d, 8 - k);
    }
    uint32_t n = (uint32_t)(s + 0.5); /* 9 digits: [1e8, 1e9) */

    /* digits, most significant first; drop trailing zeros */
    char dg[10];
    for (int i = 8; i > 0; i -= 2) {
        uint32_t r = n % 100;
        n /= 100;
        dg[i - 1] = digit_pairs[2 * r];
        dg[i] = digit_pairs[2 * r + 1];
    }
    dg[0] = (char)('0' + n);
    int nd = 9;
    while (nd > 1 && dg[nd - 1] == '0')
        nd--;

    if (k >= 0 && k <= 8) { /* ddd[.ddd] */
        for (int i = 0; i <= k; i++)
            *p++ = i < nd ? dg[i] : '0';
        if (nd > k + 1) {
            *p++ = '.';
            memcpy(p, dg + k + 1, (size_t)(nd - k - 1));
            p += nd - k - 1;
        }
    } else if (k < 0 && k >= -5) { /* 0.000ddd */
        *p++ = '0';
        *p++ = '.';
        for (int i = 0; i < -k - 1; i++)
            *p++ = '0';
        memcpy(p, dg, (size_t)nd);
        p += nd;
    } else { /* d.ddde-x */
        *p++ = dg[0];
        if (nd > 1) {
            *p++ = '.';
            memcpy(p, dg + 1, (size_t)(nd - 1));
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
    return (size_t)(p - out);
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

/* Adds one significant digit (or notes that precision ran out). */
static void add_digit(oip__num *n, char c, int frac)
{
    if (n->mant == 0 && c == '0') { /* leading zero: not significant */
        if (frac)
            n->exp10--;
        return;
    }
    if (n->digits < 19) {
        n->mant = n->mant * 10 + (uint64_t)(c - '0');
        n->digits++;
        if (frac)
            n->exp10--;
    } else {
        n->digits = 20; /* inexact: the slow path reads the text */
        if (!frac)
            n->exp10++;
    }
}

/*
 * oip__lex_number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? exactly.
 * The exponent saturates at 100000 (any such number is 0 or inf anyway).
 */
const char *oip__lex_number(const char *p, const char *end, oip__num *n)
{
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
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p))
            add_digit(n, *p++, 0);
    }
    if (p < end && *p == '.') {
        n->is_int = 0;
        p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            add_digit(n, *p++, 1);
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
    if (n->digits <= 19 && n->mant <= ((uint64_t)1 << 53) &&
        n->exp10 >= -22 && n->exp10 <= 22) {
        double d = (double)n->mant;
        d = n->exp10 >= 0 ? d * p10[n->exp10] : d / p10[-n->exp10];
        /* d is in [1e-22, 9.1e37]: a normal float; 29 bits get dropped */
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        if ((bits & 0x1fffffffu) != 0x10000000u) {
            float f = (float)d;
            return n->neg ? -f : f;
        }
    }
    return slow_float(n);
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

/* test_numfmt.c - proto/numfmt.c: float printing round-trips, the number
 * lexer and parser against glibc's strtof (correctly rounded). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "proto/oip_internal.h"
#include "bits.h"
#include "tests/check_main.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Parse text with our lexer and parser; fails the test on a lex error. */
static float our_parse(const char *s)
{
    oip__num n;
    const char *end = s + strlen(s);
    const char *e = oip__lex_number(s, end, &n);
    if (e != end)
        ck_abort_msg("lex %s", s);
    return oip__num_to_float(&n);
}

/* fmt(f) must parse back to f both with strtof and with our parser. */
static void check_round_trip(float f)
{
    char buf[OIP__FLOAT_CHARS + 1];
    size_t n = oip__fmt_float(f, buf);
    if (n > OIP__FLOAT_CHARS)
        ck_abort_msg("%a: %zu chars", (double)f, n);
    buf[n] = 0;
    float g = strtof(buf, NULL);
    if (fbits(g) != fbits(f))
        ck_abort_msg("%a printed as %s reads %a", (double)f, buf, (double)g);
    g = our_parse(buf);
    if (fbits(g) != fbits(f))
        ck_abort_msg("%a printed as %s parses %a", (double)f, buf, (double)g);
}

START_TEST(fmt_exact_strings)
{
    static const struct {
        float f;
        const char *s;
    } cases[] = {
        {0.0f, "0"},
        {-0.0f, "-0"},
        {1.0f, "1"},
        {-2.5f, "-2.5"},
        {0.5f, "0.5"},
        {0.1f, "0.100000001"},
        {100.0f, "100"},
        {123456789.0f, "123456792"},
        {1e10f, "1e10"},
        {FLT_MAX, "3.40282347e38"},
        {-FLT_MAX, "-3.40282347e38"},
        {FLT_MIN, "1.17549435e-38"},
        {0x1p-149f, "1.40129846e-45"},
        {0.25f, "0.25"},
        {0.001953125f, "0.001953125"},
        {16777216.0f, "16777216"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[OIP__FLOAT_CHARS + 1];
        buf[oip__fmt_float(cases[i].f, buf)] = 0;
        ck_assert_str_eq(buf, cases[i].s);
    }
}
END_TEST

START_TEST(fmt_round_trip_edges)
{
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
        0x00800000, 0x00800001, 0x7f7fffff, 0xff7fffff, 0x7f7ffffe,
        0x3f800000, 0x3f7fffff, 0x3f800001, 0x4b800000, 0x4b800001,
        0x33800000, 0x0000ffff, 0x00400000,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_round_trip(bitsf(edges[i]));
    /* every power of ten in range and its float neighbours */
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        float p = strtof(s, NULL);
        check_round_trip(p);
        check_round_trip(nextafterf(p, 0));
        check_round_trip(nextafterf(p, INFINITY));
        /* the largest float with 9 nines: 9.99999999e<e> region */
        check_round_trip(nextafterf(p * 10.0f, 0));
    }
}
END_TEST

START_TEST(fmt_round_trip_random)
{
    for (int i = 0; i < 1000000; i++) {
        float f = bitsf(next32() ^ (next32() << 16));
        if (!isfinite(f))
            continue;
        check_round_trip(f);
    }
    /* denormals specifically */
    for (int i = 0; i < 100000; i++)
        check_round_trip(bitsf(next32() & 0x807fffffu));
}
END_TEST

/* One group of floats through oip__fmt_floats (simd on and off): the text
 * must be oip__fmt_float's, each followed by ',', every number must read
 * back to its float with strtof, and nothing may be written past
 * n * (OIP__FLOAT_CHARS + 1) bytes. */
static void check_floats(const float *f, size_t n)
{
    size_t cap = n * (OIP__FLOAT_CHARS + 1);
    char *want = malloc(cap + 1), *got = malloc(cap + 32);
    size_t wl = 0;
    for (size_t i = 0; i < n; i++) {
        wl += oip__fmt_float(f[i], want + wl);
        want[wl++] = ',';
    }
    for (int simd = 0; simd < 2; simd++) {
        memset(got, 0x7e, cap + 32);
        size_t gl = oip__fmt_floats(f, n, got, simd);
        for (size_t i = cap; i < cap + 32; i++)
            if (got[i] != 0x7e)
                ck_abort_msg("simd %d, %zu floats: byte %zu of a %zu-byte room written",
                             simd, n, i, cap);
        if (gl != wl || memcmp(got, want, wl)) {
            size_t j = 0;
            while (j < gl && j < wl && got[j] == want[j])
                j++;
            ck_abort_msg("simd %d, %zu floats: text differs at byte %zu: '%.24s' want '%.24s'",
                         simd, n, j, got + j, want + j);
        }
        got[gl] = 0;
        char *p = got;
        for (size_t i = 0; i < n; i++) {
            char *end;
            float g = strtof(p, &end);
            if (*end != ',' || fbits(g) != fbits(f[i]))
                ck_abort_msg("simd %d: float %zu (%a) printed as '%.*s'", simd, i,
                             (double)f[i], (int)(end - p), p);
            p = end + 1;
        }
    }
    free(want);
    free(got);
}

START_TEST(fmt_floats_same_text)
{
    enum { N = 4096 };
    static float f[N];
    /* every notation: zeros, each fixed exponent and its neighbours, the
     * exponent forms, subnormals, extremes, exact ties */
    size_t n = 0;
    static const uint32_t edges[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff,
                                     0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f494000,
                                     0x4080d000, 0x3f800000, 0xbf7fffff};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        f[n++] = bitsf(edges[i]);
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "%se%d", e & 1 ? "-1" : "7.25", e);
        float p = strtof(s, NULL), near[3] = {p, nextafterf(p, 0), nextafterf(p, INFINITY)};
        for (int i = 0; i < 3; i++)
            if (isfinite(near[i]))
                f[n++] = near[i];
    }
    while (n < N) { /* random bit patterns, and outputs in [-2, 2] */
        float v = bitsf(next32() ^ (next32() << 16));
        if (n % 3 == 0)
            v = (float)next32() / 4294967296.0f * 4 - 2;
        if (isfinite(v))
            f[n++] = v;
    }
    check_floats(f, N);
    for (size_t len = 0; len <= 33; len++) /* the groups of eight and the tail */
        check_floats(f + 7 * len, len);
    /* the longest fixed text, "-0.0000123456791" (16 bytes), filling every
     * slot of a group, last in the room */
    char one[OIP__FLOAT_CHARS + 1];
    float worst = -1.23456789e-5f;
    ck_assert_uint_eq(oip__fmt_float(worst, one), 16);
    for (size_t i = 0; i < 16; i++)
        f[i] = worst;
    check_floats(f, 8);
    check_floats(f, 16);
    for (int rep = 0; rep < 200; rep++) { /* more random groups, one subnormal in some */
        for (size_t i = 0; i < 256; i++) {
            float v;
            do
                v = bitsf(next32() ^ (next32() << 16));
            while (!isfinite(v));
            f[i] = v;
        }
        if (rep & 1)
            f[next32() % 256] = bitsf(next32() & 0x807fffffu);
        check_floats(f, 256);
    }
}
END_TEST

/* The eight-at-a-time path is taken exactly when the CPU has the AVX-512
 * parts it needs and the OS saves their registers (so the comparison
 * above really covered it on such a CPU), read here from CPUID and XCR0
 * directly. */
START_TEST(fmt_floats_simd_when_cpu_has_it)
{
    int want = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d, lo, hi;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE)) {
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        /* XCR0: SSE, AVX, opmask, upper ZMM halves, ZMM16-31 */
        if ((lo & 0xe6) == 0xe6 && __get_cpuid_count(7, 0, &a, &b, &c, &d))
            want = (b & bit_AVX512F) && (b & bit_AVX512DQ) && (b & bit_AVX512CD) &&
                   (b & bit_AVX512VL) && (b & bit_AVX512BW);
    }
    (void)hi;
#endif
    ck_assert_int_eq(oip__fmt_floats_simd(), want);
}
END_TEST

/* oip_json_floats: runs of finite floats as oip__fmt_float prints them
 * (long enough for eight at a time), null for NaN and the infinities. */
START_TEST(json_floats_null)
{
    enum { N = 40 };
    float f[N];
    char want[N * OIP_JSON_FLOAT_MAX + 1], got[N * OIP_JSON_FLOAT_MAX + 32];
    size_t wl = 0;
    for (int i = 0; i < N; i++)
        f[i] = (float)next32() / 4294967296.0f * 4 - 2;
    f[3] = NAN;
    f[20] = INFINITY;
    f[39] = -INFINITY;
    for (int i = 0; i < N; i++) {
        if (isfinite(f[i])) {
            wl += oip__fmt_float(f[i], want + wl);
        } else {
            memcpy(want + wl, "null", 4);
            wl += 4;
        }
        want[wl++] = ',';
    }
    memset(got, 0x7e, sizeof got);
    size_t gl = oip_json_floats(f, N, got);
    ck_assert_uint_eq(gl, wl);
    ck_assert(memcmp(got, want, wl) == 0);
    for (size_t i = N * OIP_JSON_FLOAT_MAX; i < sizeof got; i++)
        ck_assert_int_eq(got[i], 0x7e);
}
END_TEST

/* Random decimal text: our parser must agree with strtof bit for bit. */
START_TEST(parse_matches_strtof)
{
    char s[80];
    for (int i = 0; i < 400000; i++) {
        int nd = 1 + (int)(next32() % 24);
        int pos = 0;
        if (next32() & 1)
            s[pos++] = '-';
        int point = (int)(next32() % (unsigned)(nd + 1));
        for (int d = 0; d < nd; d++) {
            char c = (char)('0' + next32() % 10);
            if (d == 0 && c == '0' && point != 1)
                c = '1'; /* no leading zeros in the integer part */
            s[pos++] = c;
            if (d + 1 == point && d + 1 < nd)
                s[pos++] = '.';
        }
        if (next32() % 3) {
            int e = (int)(next32() % 100) - 55;
            pos += snprintf(s + pos, sizeof s - (size_t)pos, "e%d", e);
        }
        s[pos] = 0;
        float want = strtof(s, NULL);
        float got = our_parse(s);
        if (fbits(got) != fbits(want))
            ck_abort_msg("%s: got %a want %a", s, (double)got, (double)want);
    }
}
END_TEST

/* Decimal texts close to float midpoints (15 to 19 digits, nudged by one
 * unit in the last place): where double rounding would go wrong. */
START_TEST(parse_near_midpoints)
{
    char s[64];
    for (int i = 0; i < 200000; i++) {
        float f = bitsf(next32() & 0x7f7fffffu);
        if (!isfinite(f) || f < FLT_MIN)
            continue;
        double m = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
        int prec = 14 + (int)(next32() % 5); /* 15..19 digits */
        snprintf(s, sizeof s, "%.*e", prec, m);
        /* nudge the last mantissa digit */
        char *e = strchr(s, 'e');
        int nudge = (int)(next32() % 3) - 1;
        char *dg = e - 1;
        if (nudge > 0 && *dg < '9')
            (*dg)++;
        else if (nudge < 0 && *dg > '0')
            (*dg)--;
        float want = strtof(s, NULL);
        float got = our_parse(s);
        if (fbits(got) != fbits(want))
            ck_abort_msg("%s: got %a want %a", s, (double)got, (double)want);
    }
}
END_TEST

/* What Python's json.dumps sends for float32 values: 17-digit reprs. */
START_TEST(parse_python_reprs)
{
    char s[64];
    for (int i = 0; i < 300000; i++) {
        float f = bitsf(next32() ^ (next32() << 16));
        if (!isfinite(f))
            continue;
        snprintf(s, sizeof s, "%.17g", (double)f);
        if (fbits(our_parse(s)) != fbits(f))
            ck_abort_msg("%s: got %a want %a", s, (double)our_parse(s),
                         (double)f);
    }
}
END_TEST

START_TEST(parse_midpoints_and_limits)
{
    static const char *cases[] = {
        "16777217", "16777219", "33554435", "-16777217",
        "1.000000059604644775390625", "1.0000000596046448", "0.0000001",
        "3.4028235e38", "3.40282356779733661637539395458142568447e38",
        "3.5e38", "1e39", "-1e39", "1e-46", "7e-46", "8e-46", "1e-45",
        "1.17549435e-38", "0", "-0", "0.0", "0e10", "123456789012345678901",
        "0.000000000000000000000000000000000000000001", "1e100000",
        "1E5", "1e+5", "2.5E-3",
        /* fast-path doubles that land exactly on a float midpoint */
        "4.136629058848484e-06", "5.972586250305176e+01",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float want = strtof(cases[i], NULL);
        float got = our_parse(cases[i]);
        ck_assert_msg(fbits(got) == fbits(want), "%s: got %a want %a",
                      cases[i], (double)got, (double)want);
    }
    ck_assert(our_parse("16777217") == 16777216.0f);
    ck_assert(isinf(our_parse("3.5e38")));
    ck_assert(fbits(our_parse("-0")) == 0x80000000u);
}
END_TEST

START_TEST(lex_grammar)
{
    static const struct {
        const char *s;
        int ok_len; /* -1: rejected */
    } cases[] = {
        {"0", 1},   {"-0", 2},    {"01", 1},  {"1.", -1}, {".5", -1},
        {"-", -1},  {"+1", -1},   {"1e", -1}, {"1e+", -1}, {"1.5e3", 5},
        {"1x", 1},  {"-a", -1},   {"0.5]", 3}, {"12,", 2}, {"1E-0", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oip__num n;
        const char *s = cases[i].s;
        const char *e = oip__lex_number(s, s + strlen(s), &n);
        if (cases[i].ok_len < 0)
            ck_assert_msg(e == NULL, "%s accepted", s);
        else
            ck_assert_msg(e && e - s == cases[i].ok_len, "%s", s);
    }
    /* the lexer never reads past end */
    oip__num n;
    const char *s = "123";
    ck_assert(oip__lex_number(s, s + 2, &n) == s + 2);
    ck_assert(oip__num_to_float(&n) == 12.0f);
}
END_TEST

START_TEST(integers)
{
    static const struct {
        const char *s;
        int ok;
        int64_t v;
    } cases[] = {
        {"0", 1, 0},
        {"-0", 1, 0},
        {"42", 1, 42},
        {"-2147483648", 1, INT32_MIN},
        {"9223372036854775807", 1, INT64_MAX},
        {"-9223372036854775808", 1, INT64_MIN},
        {"9223372036854775808", 0, 0},
        {"-9223372036854775809", 0, 0},
        {"123456789012345678901", 0, 0},
        {"1.5", 0, 0},
        {"1e2", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oip__num n;
        const char *s = cases[i].s;
        ck_assert(oip__lex_number(s, s + strlen(s), &n));
        int64_t v = 7;
        int rc = oip__num_to_i64(&n, &v);
        ck_assert_msg((rc == 0) == cases[i].ok, "%s", s);
        if (cases[i].ok)
            ck_assert_msg(v == cases[i].v, "%s", s);
    }
    char buf[24];
    buf[oip__fmt_i64(INT64_MIN, buf)] = 0;
    ck_assert_str_eq(buf, "-9223372036854775808");
    buf[oip__fmt_i64(0, buf)] = 0;
    ck_assert_str_eq(buf, "0");
    buf[oip__fmt_i64(-17, buf)] = 0;
    ck_assert_str_eq(buf, "-17");
}
END_TEST

static Suite *numfmt_suite(void)
{
    Suite *s = suite_create("numfmt");
    TCase *tc = tcase_create("numbers");
    tu_timeout(tc, 120);
    tcase_add_test(tc, fmt_exact_strings);
    tcase_add_test(tc, fmt_round_trip_edges);
    tcase_add_test(tc, fmt_round_trip_random);
    tcase_add_test(tc, fmt_floats_same_text);
    tcase_add_test(tc, json_floats_null);
    tcase_add_test(tc, fmt_floats_simd_when_cpu_has_it);
    tcase_add_test(tc, parse_matches_strtof);
    tcase_add_test(tc, parse_near_midpoints);
    tcase_add_test(tc, parse_python_reprs);
    tcase_add_test(tc, parse_midpoints_and_limits);
    tcase_add_test(tc, lex_grammar);
    tcase_add_test(tc, integers);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(numfmt_suite)

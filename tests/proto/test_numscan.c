/* test_numscan.c - proto/numscan.c: eight short numbers at a time against
 * glibc's strtof (correctly rounded), what it must decline, and JSON data
 * read through it (proto/jscan.c) against strtof token by token. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/oip_internal.h"
#include "tests/check_main.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t next32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* short_number: -?d.f with k (1..7) fraction digits at out, one in 50 of
 * them all zeros; its length. */
static int short_number(char *out, int neg, int k)
{
    int n = 0, zero = next32() % 50 == 0;
    if (neg)
        out[n++] = '-';
    out[n++] = zero ? '0' : (char)('0' + next32() % 10);
    out[n++] = '.';
    for (int i = 0; i < k; i++)
        out[n++] = zero ? '0' : (char)('0' + next32() % 10);
    return n;
}

/* A block: eight short numbers, each followed by ',' and sep (0 or one
 * space), then filler to 200 bytes. starts/ends: each number's bytes. */
typedef struct block {
    char text[256];
    int start[8], end[8], comma8;
} block;

static void make_block(block *b, int space)
{
    int n = 0;
    for (int i = 0; i < 8; i++) {
        b->start[i] = n;
        n += short_number(b->text + n, next32() & 1, 1 + (int)(next32() % 7));
        b->end[i] = n;
        if (i == 7)
            b->comma8 = n;
        b->text[n++] = ',';
        if (space)
            b->text[n++] = ' ';
    }
    for (; n < 200; n++)
        b->text[n] = n % 7 == 0 ? ',' : '1';
    b->text[n] = 0;
}

static float ref(const char *s, int a, int e)
{
    char tmp[32];
    memcpy(tmp, s + a, (size_t)(e - a));
    tmp[e - a] = 0;
    return strtof(tmp, NULL);
}

/* Every float of a valid block is strtof's, and the eighth comma comes
 * back; on a CPU without AVX-512 it declines everything. */
START_TEST(eight_match_strtof)
{
    int simd = oip__fmt_floats_simd();
    block b;
    float out[8];
    for (int rep = 0; rep < 200000; rep++) {
        make_block(&b, rep & 1);
        const char *e = oip__short_floats8(b.text, b.text + 200, out);
        if (!simd) {
            ck_assert_ptr_null(e);
            continue;
        }
        ck_assert_msg(e == b.text + b.comma8, "rep %d: %.120s", rep, b.text);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(bits(out[i]) == bits(ref(b.text, b.start[i], b.end[i])),
                          "rep %d number %d: %.*s gave %.9g", rep, i, b.end[i] - b.start[i],
                          b.text + b.start[i], (double)out[i]);
    }
}
END_TEST

/* Zeros and the extremes of the shape, signs included. */
START_TEST(eight_edges)
{
    static const char *const text[] = {
        "0.0,-0.0,0.0000000,-0.0000000,9.9999999,-9.9999999,0.0000001,-0.0000001,",
        "1.5, 2.25, -3.125, 4.0625, 0.5, -0.25, 7.7, 8.8888888, ",
        "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,",
    };
    float out[8];
    char buf[256];
    for (size_t t = 0; t < sizeof text / sizeof *text; t++) {
        memset(buf, '1', sizeof buf);
        memcpy(buf, text[t], strlen(text[t]));
        const char *e = oip__short_floats8(buf, buf + sizeof buf, out);
        if (!oip__fmt_floats_simd()) {
            ck_assert_ptr_null(e);
            continue;
        }
        ck_assert_msg(e != NULL, "%s", text[t]);
        ck_assert_int_eq(*e, ',');
        const char *p = buf;
        for (int i = 0; i < 8; i++) {
            char *end;
            float want = strtof(p, &end);
            ck_assert_msg(bits(out[i]) == bits(want), "%s: number %d %.9g != %.9g", text[t], i,
                          (double)out[i], (double)want);
            p = end + 1;
            p += *p == ' ';
        }
        ck_assert_ptr_eq(e, p - 1 - (p[-1] == ' '));
    }
}
END_TEST

/* Anything but eight numbers of the shape, each followed by ',' and at
 * most one space, declines. */
START_TEST(eight_decline)
{
    static const char *const bad[] = {
        "0.12345678,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",  /* 8 fraction digits */
        "1.,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",          /* none */
        "1.5e3,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",       /* exponent */
        "1.5,  1.5,1.5,1.5,1.5,1.5,1.5,1.5,",       /* two spaces */
        "1.5 ,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",        /* space before ',' */
        "00.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",        /* two integer digits */
        "12.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",
        "-.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",
        "+1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1D5,",          /* a letter for '.' */
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.D,",
        "1.5,1.5,1.5,-1.5,1.5,1.5,1.5,--1.5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1,",            /* an integer */
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5]",          /* seven and the end */
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5\t,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,null,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,\"1.5\",",
        "1.5,,1.5,1.5,1.5,1.5,1.5,1.5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1./,",          /* '/' is '0' - 1 */
        /* bytes near '.' for the '.' (make fuzz found '&' taken for one) */
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,-5&258741,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5/5,", "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5-5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5+5,", "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5*5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5(5,", "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5)5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5'5,", "1.5,1.5,1.5,1.5,1.5,1.5,1.5,505,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,575,", "1.5,1.5,1.5,1.5,1.5,1.5,1.5,5\x7f" "5,",
        "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.:,",          /* ':' is '9' + 1 */
    };
    float out[8];
    char buf[256];
    for (size_t t = 0; t < sizeof bad / sizeof *bad; t++) {
        memset(buf, ' ', sizeof buf); /* no further commas */
        memcpy(buf, bad[t], strlen(bad[t]));
        ck_assert_msg(oip__short_floats8(buf, buf + sizeof buf, out) == NULL, "%s", bad[t]);
    }
    /* long numbers: fewer than eight commas in 128 bytes */
    memset(buf, ' ', sizeof buf);
    for (int i = 0; i < 8; i++)
        memcpy(buf + 17 * i, "0.1234567,       ", 17);
    ck_assert_ptr_null(oip__short_floats8(buf, buf + sizeof buf, out));
    /* and a valid block with fewer than OIP__FLOATS8_ROOM bytes left */
    memset(buf, '1', sizeof buf);
    memcpy(buf, "1.5,1.5,1.5,1.5,1.5,1.5,1.5,1.5,", 32);
    ck_assert_ptr_null(oip__short_floats8(buf, buf + OIP__FLOATS8_ROOM - 1, out));
    if (oip__fmt_floats_simd())
        ck_assert_ptr_eq(oip__short_floats8(buf, buf + OIP__FLOATS8_ROOM, out), buf + 31);
}
END_TEST

/* The fact the one-rounding-then-another conversion rests on: no quotient
 * mant / 10^k (1 <= k <= 7, 1 <= mant < 10^(k+1)) rounded to double lies
 * exactly halfway between two floats, nor below FLT_MIN. */
START_TEST(no_quotient_is_a_float_midpoint)
{
    static const double p10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
    long found = 0;
    for (int k = 1; k <= 7; k++)
        for (uint32_t m = 1; m < (uint32_t)p10[k + 1]; m++) {
            double d = (double)m / p10[k];
            uint64_t u;
            memcpy(&u, &d, sizeof u);
            found += (u & 0x1fffffff) == 0x10000000 || d < 0x1p-126;
        }
    ck_assert_int_eq(found, 0);
}
END_TEST

/* JSON data through oip__read_data: floats equal to strtof's, token by
 * token, whatever mix of shapes, separators and nesting. */
static void check_data(const char *js, size_t count)
{
    float *got = calloc(count, sizeof *got);
    char err[OIP_ERRMAX];
    int rc = oip__read_data(js, strlen(js), OIP_FP32, got, count, "data", err);
    ck_assert_msg(rc == 0, "%s", err);
    const char *p = js;
    for (size_t i = 0; i < count; i++) {
        while (*p && *p != '-' && (*p < '0' || *p > '9'))
            p++;
        char *end;
        float want = strtof(p, &end);
        ck_assert_msg(bits(got[i]) == bits(want), "value %zu: %.*s gave %.9g", i,
                      (int)(end - p), p, (double)got[i]);
        p = end;
    }
    free(got);
}

START_TEST(read_data_any_mix)
{
    enum { N = 3000 };
    char *js = malloc(N * 40 + 16);
    for (int rep = 0; rep < 60; rep++) {
        int n = 0, rows = rep % 3 == 2 ? 30 : 1; /* flat, or nested rows */
        js[n++] = '[';
        for (int i = 0; i < N; i++) {
            if (rows > 1 && i % (N / rows) == 0)
                js[n++] = '[';
            int shape = (int)(next32() % 100);
            if (rep % 4 == 0 || shape < 80) /* mostly short; every 4th all short */
                n += short_number(js + n, next32() & 1, 1 + (int)(next32() % 7));
            else if (shape < 90) /* JavaScript's shortest repr: up to 9 digits */
                n += sprintf(js + n, "%.9g", (double)((float)next32() / 4294967296.0f - 0.5f));
            else if (shape < 95)
                n += sprintf(js + n, "%.3e", (double)next32() / 1e3);
            else
                n += sprintf(js + n, "%d", (int)(next32() % 1000) - 500);
            if (rows > 1 && i % (N / rows) == N / rows - 1) {
                js[n++] = ']';
            }
            if (i < N - 1) {
                js[n++] = ',';
                if (rep & 1)
                    js[n++] = ' ';
            }
        }
        js[n++] = ']';
        js[n] = 0;
        check_data(js, N);
    }
    free(js);
}
END_TEST

/* A bad number deep in a run of short ones is still found and named by
 * its index, and too many values are still counted. */
START_TEST(read_data_errors_inside_blocks)
{
    enum { N = 400 };
    char js[N * 12 + 32], err[OIP_ERRMAX];
    float got[N];
    int n = 0;
    js[n++] = '[';
    for (int i = 0; i < N; i++) {
        if (i == 203)
            n += sprintf(js + n, "1.5.3");
        else
            n += short_number(js + n, i & 1, 6);
        if (i < N - 1)
            js[n++] = ',', js[n++] = ' ';
    }
    js[n++] = ']';
    js[n] = 0;
    ck_assert_int_ne(oip__read_data(js, (size_t)n, OIP_FP32, got, N, "x", err), 0);
    ck_assert_msg(strstr(err, "expected ',' or ']'") || strstr(err, "[203]"), "%s", err);
    /* the same run valid, one value more than the shape holds */
    js[0] = '[';
    n = 1;
    for (int i = 0; i < N; i++) {
        n += short_number(js + n, i & 1, 6);
        if (i < N - 1)
            js[n++] = ',';
    }
    js[n++] = ']';
    js[n] = 0;
    ck_assert_int_ne(oip__read_data(js, (size_t)n, OIP_FP32, got, N - 1, "x", err), 0);
    ck_assert_str_eq(err, "x: expected 399 values, got 400");
    ck_assert_int_eq(oip__read_data(js, (size_t)n, OIP_FP32, got, N, "x", err), 0);
}
END_TEST

static Suite *numscan_suite(void)
{
    Suite *s = suite_create("numscan");
    TCase *tc = tcase_create("eight");
    tu_timeout(tc, 120);
    tcase_add_test(tc, eight_match_strtof);
    tcase_add_test(tc, eight_edges);
    tcase_add_test(tc, eight_decline);
    tcase_add_test(tc, no_quotient_is_a_float_midpoint);
    tcase_add_test(tc, read_data_any_mix);
    tcase_add_test(tc, read_data_errors_inside_blocks);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(numscan_suite)

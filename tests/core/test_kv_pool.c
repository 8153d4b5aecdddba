/*
 * test_kv_pool.c - the K/V page pool (core/kv.c; split from test_kv.c,
 * which runs decoder steps through the engine): its budget, reserve, trim
 * and free, and FP16/BF16 pages' round trip, subnormals and overflow edge.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kv.h"
#include "testutil.h"
#include "tests/check_main.h"

/* ---- the pool ---------------------------------------------------------- */

START_TEST(pool_budget_reserve_trim_free)
{
    attn_config c = {.d_model = 8, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 4, .v_head_dim = 2};
    attn_kv_pool *p;
    char err[ATTN_ERRMAX];
    /* 2 kv heads x (4 + 2) x 4 bytes = 48 bytes a token; pages of 4: 192 */
    ck_assert_uint_eq(attn_kv_token_bytes(&c, ATTN_KV_F32), 48);
    ck_assert_uint_eq(attn_kv_token_bytes(&c, ATTN_KV_BF16), 24);
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, 4, 3 * 192, err),
                     0);
    ck_assert_uint_eq(attn_kv_page_bytes(p), 192);
    attn_kv a, b;
    attn_kv_init(&a, p);
    attn_kv_init(&b, p);
    ck_assert_int_eq(attn_kv_reserve(&a, 5, err), 0); /* 2 pages */
    ck_assert_int_eq(a.n_pages, 2);
    ck_assert_uint_eq(attn_kv_pool_used(p), 384);
    /* b needs 2 pages, one is left: full, and nothing changes */
    ck_assert_int_eq(attn_kv_reserve(&b, 5, err), ATTN_EFULL);
    ck_assert_msg(strstr(err, "kv-bytes"), "%s", err);
    ck_assert_int_eq(b.n_pages, 0);
    ck_assert_uint_eq(attn_kv_pool_used(p), 384);
    attn_kv_advance(&a, 5);
    ck_assert_int_eq(attn_kv_reserve(&a, 3, err), 0); /* 8 fit in 2 pages */
    ck_assert_int_eq(a.n_pages, 2);
    ck_assert_int_eq(attn_kv_reserve(&a, 4, err), 0); /* 9 need 3 */
    ck_assert_int_eq(a.n_pages, 3);
    attn_kv_trim(&a); /* the step failed: back to the pages of 5 tokens */
    ck_assert_int_eq(a.n_pages, 2);
    ck_assert_int_eq(a.len, 5);
    ck_assert_uint_eq(attn_kv_bytes(&a), 384);
    attn_kv_free(&a);
    ck_assert_int_eq(a.len, 0);
    ck_assert_uint_eq(attn_kv_pool_used(p), 0);
    ck_assert_int_eq(attn_kv_reserve(&b, 12, err), 0); /* reuses free pages */
    ck_assert_uint_eq(attn_kv_pool_used(p), 576);
    attn_kv_free(&b);
    ck_assert_uint_eq(attn_kv_pool_used(p), 0);
    attn_kv_pool_destroy(p);
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, (attn_kv_dtype)7, 0, 1, err),
                     ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, -1, 1, err),
                     ATTN_EINVAL);
    attn_kv_dtype d;
    ck_assert_int_eq(attn_kv_dtype_parse("bf16", &d), 0);
    ck_assert_int_eq(d, ATTN_KV_BF16);
    ck_assert_int_eq(attn_kv_dtype_parse("f64", &d), ATTN_EINVAL);
}
END_TEST

/* attn_kv_pool_shed frees the kept pages no reservation took since the
 * shed before, and keeps those one did take (a sequence ending and another
 * starting reuse them). */
START_TEST(pool_shed_keeps_reused)
{
    attn_config c = {.d_model = 8, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 4, .v_head_dim = 2};
    attn_kv_pool *p;
    char err[ATTN_ERRMAX];
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, 4, 8 * 192, err),
                     0);
    attn_kv a, b;
    attn_kv_init(&a, p);
    attn_kv_init(&b, p);
    ck_assert_int_eq(attn_kv_reserve(&a, 8, err), 0); /* 2 pages */
    attn_kv_free(&a);                                 /* kept: 2 */
    /* freed after the first shed: a page is kept a whole interval */
    ck_assert_uint_eq(attn_kv_pool_shed(p), 0);
    ck_assert_uint_eq(attn_kv_pool_shed(p), 2 * 192);
    ck_assert_uint_eq(attn_kv_pool_shed(p), 0);
    ck_assert_int_eq(attn_kv_reserve(&a, 12, err), 0); /* 3 new pages */
    attn_kv_free(&a);
    ck_assert_uint_eq(attn_kv_pool_shed(p), 0);
    ck_assert_int_eq(attn_kv_reserve(&b, 4, err), 0); /* takes one kept */
    ck_assert_uint_eq(attn_kv_pool_shed(p), 2 * 192); /* the two left */
    attn_kv_free(&b);
    ck_assert_uint_eq(attn_kv_pool_used(p), 0);
    /* b's page, given back, is kept through the next interval */
    ck_assert_uint_eq(attn_kv_pool_shed(p), 0);
    ck_assert_int_eq(attn_kv_reserve(&b, 4, err), 0);
    ck_assert_uint_eq(attn_kv_pool_used(p), 192);
    attn_kv_free(&b);
    attn_kv_pool_destroy(p); /* frees the kept page (ASan: no leak) */
}
END_TEST

/* attn_kv_pool_held counts the pages kept for reuse with those sequences
 * hold (malloc cannot give either back), falls only when pages are really
 * freed (past FREE_KEEP, or shed), and its peak sees a rise and fall
 * between two calls. */
START_TEST(pool_held_counts_kept)
{
    attn_config c = {.d_model = 8, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 4, .v_head_dim = 2};
    attn_kv_pool *p;
    char err[ATTN_ERRMAX];
    size_t peak;
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, 4, 400 * 192, err),
                     0);
    attn_kv a, b;
    attn_kv_init(&a, p);
    attn_kv_init(&b, p);
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 0);
    ck_assert_uint_eq(peak, 0);
    ck_assert_int_eq(attn_kv_reserve(&a, 12, err), 0); /* 3 pages */
    attn_kv_free(&a);                                  /* kept: 3 */
    ck_assert_uint_eq(attn_kv_pool_used(p), 0);
    ck_assert_uint_eq(attn_kv_pool_kept(p), 3 * 192);
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 3 * 192);
    ck_assert_uint_eq(peak, 3 * 192);
    ck_assert_int_eq(attn_kv_reserve(&a, 8, err), 0); /* reuses 2 kept */
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 3 * 192);
    ck_assert_uint_eq(peak, 3 * 192);
    attn_kv_free(&a);
    /* 300 pages, then all freed: 256 kept, 44 freed; the peak saw 300 */
    ck_assert_int_eq(attn_kv_reserve(&b, 1200, err), 0);
    attn_kv_free(&b);
    ck_assert_uint_eq(attn_kv_pool_kept(p), 256 * 192);
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 256 * 192);
    ck_assert_uint_eq(peak, 300 * 192);
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 256 * 192);
    ck_assert_uint_eq(peak, 256 * 192); /* since the call before */
    ck_assert_uint_eq(attn_kv_pool_shed(p), 0);
    ck_assert_uint_eq(attn_kv_pool_shed(p), 256 * 192);
    ck_assert_uint_eq(attn_kv_pool_kept(p), 0);
    ck_assert_uint_eq(attn_kv_pool_held(p, &peak), 0);
    ck_assert_uint_eq(peak, 256 * 192);
    attn_kv_pool_destroy(p);
}
END_TEST

/* Stored halves read back as the IEEE values (independent of the code:
 * known bit patterns), rounding to nearest even. */
START_TEST(pool_half_roundtrip)
{
    attn_config c = {.d_model = 4, .n_heads = 1, .n_kv_heads = 1,
                     .head_dim = 8, .v_head_dim = 8};
    /* value, as FP16, as BF16 (both exactly representable after rounding).
     * Ties round to even (IEEE 754; Python's struct 'e' agrees for FP16):
     * FP16 keeps 10 fraction bits (ulp 2^-10 at 1), BF16 7 (ulp 2^-7). */
    const float in[8] = {1.0f + 3.0f / 256, /* bf16 tie: 1+2^-7 odd -> 1+2^-6 */
                         -2.5f, 65504.0f, 1e-8f,
                         1.0f + 1.0f / 2048, /* f16 tie: 1 even -> 1 */
                         3.14159265f, 70000.0f,
                         -(1.0f + 3.0f / 2048)}; /* f16 tie: -> -(1 + 2^-9) */
    const float f16[8] = {1.01171875f, -2.5f, 65504.0f, 0.0f, 1.0f,
                          3.140625f, INFINITY, -1.001953125f};
    const float bf16[8] = {1.015625f, -2.5f, 65536.0f, 1.0011717e-08f, 1.0f,
                           3.140625f, 70144.0f, -1.0f};
    for (int k = 0; k < 2; k++) {
        attn_kv_pool *p;
        char err[ATTN_ERRMAX];
        ck_assert_int_eq(attn_kv_pool_create(&p, &c,
                                             k ? ATTN_KV_BF16 : ATTN_KV_F16, 2,
                                             1 << 20, err),
                         0);
        attn_kv kv;
        attn_kv_init(&kv, p);
        ck_assert_int_eq(attn_kv_reserve(&kv, 1, err), 0);
        /* the engine writes rows through a pass; here a one-row layer whose
         * K = x W_k with W_k = I stores in exactly */
        float wi[64] = {0}, z[64] = {0}, y[4];
        for (int i = 0; i < 8; i++)
            wi[i * 8 + i] = 1.0f;
        attn_config c8 = c;
        c8.d_model = 8;
        attn_weights w = {wi, wi, wi, z, NULL, NULL, NULL, NULL, ATTN_ROWS};
        float y8[8];
        attn_seq s = {.t = 1, .s = 1, .t_valid = 1, .s_valid = 1,
                      .x = in, .y = y8, .kv = &kv};
        (void)y;
        ck_assert_msg(attn_forward(&c8, &w, &s, 1, NULL, err) == 0 ||
                          k == 0, /* f16 overflow of 70000 -> Inf: ERANGE */
                      "%s", err);
        float kr[8], vr[8];
        attn_kv_read(&kv, 0, 0, 1, kr, vr);
        const float *want = k ? bf16 : f16;
        for (int i = 0; i < 8; i++) {
            ck_assert_msg(kr[i] == want[i] || (i == 3 && k == 1 &&
                                               fabsf(kr[i] - want[i]) < 1e-12f),
                          "%s k[%d] = %.9g, want %.9g", k ? "bf16" : "f16", i,
                          (double)kr[i], (double)want[i]);
            ck_assert(memcmp(&kr[i], &vr[i], 4) == 0);
        }
        attn_kv_free(&kv);
        attn_kv_pool_destroy(p);
    }
}
END_TEST

/* FP16's overflow starts at 65520, not past 65504: a key of 65519.99
 * rounds to 65504 and the step is answered; 65520 is Inf and refused
 * (ERANGE), as README and the 400's text say. */
START_TEST(pool_f16_overflow_edge)
{
    attn_config c = {.d_model = 8, .n_heads = 1, .n_kv_heads = 1,
                     .head_dim = 8, .v_head_dim = 8};
    float wi[64] = {0}, z[64] = {0}, y[8];
    for (int i = 0; i < 8; i++)
        wi[i * 8 + i] = 1.0f;
    attn_weights w = {wi, wi, wi, z, NULL, NULL, NULL, NULL, ATTN_ROWS};
    const float top = nextafterf(65520.0f, 0.0f);
    for (int k = 0; k < 2; k++) {
        attn_kv_pool *p;
        char err[ATTN_ERRMAX];
        ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F16, 2, 1 << 20,
                                             err), 0);
        attn_kv kv;
        attn_kv_init(&kv, p);
        ck_assert_int_eq(attn_kv_reserve(&kv, 1, err), 0);
        float x[8] = {k ? 65520.0f : top, 0, 0, 0, 0, 0, 0, 0};
        attn_seq s = {.t = 1, .s = 1, .t_valid = 1, .s_valid = 1,
                      .x = x, .y = y, .kv = &kv};
        int rc = attn_forward(&c, &w, &s, 1, NULL, err);
        if (k) {
            ck_assert_int_eq(rc, ATTN_ERANGE);
            ck_assert_msg(strstr(err, "65520 or more"), "%s", err);
        } else {
            ck_assert_msg(rc == 0, "%s", err);
            float kr[8], vr[8];
            attn_kv_read(&kv, 0, 0, 1, kr, vr);
            ck_assert(kr[0] == 65504.0f && vr[0] == 65504.0f);
        }
        attn_kv_free(&kv);
        attn_kv_pool_destroy(p);
    }
}
END_TEST

/* FP16 pages keep what FP16 holds below 2^-14 (6.1e-5): its subnormals,
 * multiples of 2^-24, rounded to nearest even (x 2^24 rounded by rint in
 * double, which is exact here). The conversion once shifted by 14 bits too
 * many: every value from 2^-25 to 2^-14 (3e-8 to 6.1e-5) was stored as 0,
 * and under 2^-18 by a shift past 31 bits (undefined behaviour). Every
 * float32 exponent of the range, with a few significands each, both
 * signs. */
START_TEST(pool_f16_subnormals)
{
    enum { N = 64 };
    attn_config c = {.d_model = N, .n_heads = 1, .n_kv_heads = 1,
                     .head_dim = N, .v_head_dim = N};
    attn_kv_pool *p;
    char err[ATTN_ERRMAX];
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F16, 2, 1 << 22,
                                         err), 0);
    float *wi = calloc((size_t)N * N, sizeof(float));
    float *z = calloc((size_t)N * N, sizeof(float));
    for (int i = 0; i < N; i++)
        wi[i * N + i] = 1.0f;
    attn_weights w = {wi, wi, wi, z, NULL, NULL, NULL, NULL, ATTN_ROWS};
    const float frac[4] = {1.0f, 1.5f, 1.2345678f, 1.9999999f};
    for (int e = -27; e <= -14; e++) {
        float in[N], y[N], kr[N], vr[N];
        for (int i = 0; i < N; i++)
            in[i] = ldexpf(frac[i % 4], e) * (i % 8 < 4 ? 1.0f : -1.0f) *
                    (1.0f + (float)(i / 8) / 64.0f);
        attn_kv kv;
        attn_kv_init(&kv, p);
        ck_assert_int_eq(attn_kv_reserve(&kv, 1, err), 0);
        attn_seq s = {.t = 1, .s = 1, .t_valid = 1, .s_valid = 1,
                      .x = in, .y = y, .kv = &kv};
        ck_assert_msg(attn_forward(&c, &w, &s, 1, NULL, err) == 0, "%s", err);
        attn_kv_read(&kv, 0, 0, 1, kr, vr);
        for (int i = 0; i < N; i++) {
            /* up to 2^-13 (normal halves of exponent -14: 10 bits) */
            double want = rint((double)in[i] * 0x1p24) * 0x1p-24;
            ck_assert_msg((double)kr[i] == want && kr[i] == vr[i],
                          "f16 of %.9g read back %.9g, want %.9g",
                          (double)in[i], (double)kr[i], want);
        }
        attn_kv_free(&kv);
    }
    free(wi), free(z);
    attn_kv_pool_destroy(p);
}
END_TEST

static Suite *kv_pool_suite(void)
{
    Suite *s = suite_create("kv_pool");
    TCase *tc = tcase_create("kv_pool");
    tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown);
    tcase_add_test(tc, pool_budget_reserve_trim_free);
    tcase_add_test(tc, pool_shed_keeps_reused);
    tcase_add_test(tc, pool_held_counts_kept);
    tcase_add_test(tc, pool_half_roundtrip);
    tcase_add_test(tc, pool_f16_subnormals);
    tcase_add_test(tc, pool_f16_overflow_edge);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(kv_pool_suite)

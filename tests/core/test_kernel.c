/*
 * test_kernel.c - core/kernel.c: RoPE against hand-computed rotations and
 * HF Llama's tables (tests/core/gen_rope_vectors.py), and the per-head
 * kernels on block edges (row blocks past ATTN__BQ, key
 * blocks past ATTN__BK, t != s) against a naive double-precision softmax.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel.h"
#include "testutil.h"
#include "tests/check_main.h"

START_TEST(rope_known_rotation)
{
    /* theta 10000, rot 4: freq_0 = 1, freq_1 = 10000^(-1/2) = 0.01.
     * Pairs (0, 2) and (1, 3); dims past rot untouched. */
    float cs[3 * 4];
    attn__rope_rows_table(cs, 0, 3, 4, 10000.0f);
    ck_assert(fabsf(cs[0] - 1) < 1e-7f && fabsf(cs[2]) < 1e-7f); /* pos 0 */
    ck_assert(fabsf(cs[4 + 0] - cosf(1.0f)) < 1e-6f);
    ck_assert(fabsf(cs[4 + 1] - cosf(0.01f)) < 1e-6f);
    ck_assert(fabsf(cs[4 + 2] - sinf(1.0f)) < 1e-6f);
    ck_assert(fabsf(cs[8 + 3] - sinf(0.02f)) < 1e-6f);
    /* 3 rows x 2 heads x d_k 6 */
    float x[3 * 12];
    for (int i = 0; i < 36; i++)
        x[i] = (float)(i % 6 + 1);
    attn__rope_rows(x, 12, 0, 3, 2, 6, 4, cs, NULL);
    /* row 0 unchanged */
    for (int i = 0; i < 12; i++)
        ck_assert(x[i] == (float)(i % 6 + 1));
    /* row 1, head 1: [1,2,3,4,5,6] -> pair (x0, x2) by angle 1, (x1, x3)
     * by angle 0.01 */
    const float *r = x + 12 + 6;
    ck_assert(fabsf(r[0] - (1 * cosf(1) - 3 * sinf(1))) < 1e-6f);
    ck_assert(fabsf(r[2] - (3 * cosf(1) + 1 * sinf(1))) < 1e-6f);
    ck_assert(fabsf(r[1] - (2 * cosf(0.01f) - 4 * sinf(0.01f))) < 1e-6f);
    ck_assert(fabsf(r[3] - (4 * cosf(0.01f) + 2 * sinf(0.01f))) < 1e-6f);
    ck_assert(r[4] == 5 && r[5] == 6);
    /* rotations keep each pair's norm */
    const float *r2 = x + 24;
    ck_assert(fabsf(r2[0] * r2[0] + r2[2] * r2[2] - 10) < 1e-5f);
}
END_TEST

/* The table rows of HF Llama's LlamaRotaryEmbedding (float32 inv_freq and
 * angles) at positions up to 16777217, one position at a time: within
 * 1 ulp of its cos and sin (theirs are torch's, ours the float angle's
 * exact ones rounded). Angles in double were 3.4e-3 from them at position
 * 131072 (rot 128, theta 10000). */
START_TEST(rope_table_hf)
{
    const char *dir = getenv("ATTN_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/core/vectors/rope_hf.bin",
             dir ? dir : "tests");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (set ATTN_TEST_DATA)", path);
    int32_t n_cases;
    ck_assert(fread(&n_cases, 4, 1, f) == 1 && n_cases == 4);
    for (int c = 0; c < n_cases; c++) {
        int32_t hdr[2];
        float theta;
        ck_assert(fread(hdr, 4, 2, f) == 2 && fread(&theta, 4, 1, f) == 1);
        int rot = hdr[0], n = hdr[1];
        ck_assert(rot > 0 && rot <= 128 && n > 0 && n <= 64);
        int32_t pos[64];
        float want[128], got[128];
        ck_assert(fread(pos, 4, (size_t)n, f) == (size_t)n);
        for (int r = 0; r < n; r++) {
            ck_assert(fread(want, 4, (size_t)rot, f) == (size_t)rot);
            attn__rope_rows_table(got, pos[r], pos[r] + 1, rot, theta);
            for (int i = 0; i < rot; i++)
                ck_assert_msg(fabsf(got[i] - want[i]) <=
                                  0x1p-24f + 0x1p-23f * fabsf(want[i]),
                              "rot %d theta %g position %d: %s[%d] = %.9g, "
                              "HF %.9g",
                              rot, (double)theta, pos[r],
                              i < rot / 2 ? "cos" : "sin", i % (rot / 2),
                              (double)got[i], (double)want[i]);
        }
    }
    fclose(f);
}
END_TEST

/* Naive reference of one head in double (q is the kernel's, scaled). */
static void naive(const attn__head *h, double *o, double *a)
{
    for (int i = 0; i < h->t; i++) {
        double mx = -INFINITY, sum = 0;
        double *ar = a + (size_t)i * h->s;
        for (int j = 0; j < h->s; j++) {
            int vis = i < h->t_valid && j < h->s_valid &&
                      (!h->causal || j <= i) &&
                      (!h->mask || h->mask[(size_t)i * h->s + j]);
            double d = 0;
            for (int c = 0; c < h->dk; c++)
                d += (double)h->q[i * h->ldq + c] * h->k[j * h->ldk + c];
            ar[j] = vis ? d : -INFINITY;
            if (ar[j] > mx)
                mx = ar[j];
        }
        for (int j = 0; j < h->s; j++) {
            ar[j] = mx == -INFINITY ? 0 : exp(ar[j] - mx);
            sum += ar[j];
        }
        for (int c = 0; c < h->dv; c++) {
            double acc = 0;
            for (int j = 0; j < h->s; j++)
                acc += ar[j] * h->v[j * h->ldv + c];
            o[(size_t)i * h->dv + c] = sum > 0 ? acc / sum : 0;
        }
        for (int j = 0; j < h->s; j++)
            ar[j] = sum > 0 ? ar[j] / sum : 0;
    }
}

START_TEST(kernel_block_edges)
{
    /* loop: t, s straddle ATTN__BQ / ATTN__BK; strided (ld > width) rows */
    static const int ts[][2] = {
        {1, 1}, {65, 129}, {130, 64}, {64, 257}, {200, 200}};
    int t = ts[_i][0], s = ts[_i][1], dk = 5, dv = 3;
    tu_rng g = {1000u + (unsigned)_i};
    float *q = tu_randn(&g, (size_t)t * 7, 0.8f); /* 2, scaled by 0.4 */
    float *k = tu_randn(&g, (size_t)s * 9, 2.0f);
    float *v = tu_randn(&g, (size_t)s * 4, 1.0f);
    float *o = tu_fill((size_t)t * 6, NAN), *a = tu_fill((size_t)t * s, NAN);
    uint8_t *m = malloc((size_t)t * s);
    for (size_t i = 0; i < (size_t)t * s; i++)
        m[i] = tu_uniform(&g) > -0.6f;
    double *ro = malloc(sizeof(double) * (size_t)t * dv);
    double *ra = malloc(sizeof(double) * (size_t)t * s);
    for (int variant = 0; variant < 4; variant++) {
        attn__head h = {.t = t,
                        .s = s,
                        .t_valid = t - (variant & 1) * t / 3,
                        .s_valid = s - (variant & 1) * s / 4,
                        .causal = variant >= 2,
                        .dk = dk,
                        .dv = dv,
                        .mask = variant == 3 ? m : NULL,
                        .q = q,
                        .k = k,
                        .v = v,
                        .o = o,
                        .ldq = 7,
                        .ldk = 9,
                        .ldv = 4,
                        .ldo = 6};
        naive(&h, ro, ra);
        for (int maps = 0; maps < 2; maps++) {
            h.att = maps ? a : NULL;
            /* two calls that split the rows unevenly */
            attn__head_block(&h, 0, t / 3);
            attn__head_block(&h, t / 3, t);
            for (int i = 0; i < t; i++)
                for (int c = 0; c < dv; c++) {
                    double want = ro[(size_t)i * dv + c];
                    float got = o[(size_t)i * 6 + c];
                    ck_assert_msg(fabs(got - want) < 1e-5 + 1e-4 * fabs(want),
                                  "t %d s %d var %d maps %d o[%d][%d] %g "
                                  "want %g",
                                  t, s, variant, maps, i, c, got, want);
                }
            for (size_t i = 0; maps && i < (size_t)t * s; i++)
                ck_assert(fabs(a[i] - ra[i]) < 1e-6 &&
                          (ra[i] != 0 || a[i] == 0.0f));
        }
    }
    free(q), free(k), free(v), free(o), free(a), free(m), free(ro), free(ra);
}
END_TEST

START_TEST(skinny_gemm_matches_double)
{
    /* loop: rows at and around the micro-kernel's 12 and the limits, one
     * row (480 columns: the 256, 128, 64 and 32-column blocks), strided A,
     * B and C (ld > width), k not a multiple of anything, down to 16 */
    static const int shape[][3] = {/* m, n, k */
                                   {2, 32, 128},  {3, 64, 131},
                                   {12, 32, 200}, {13, 96, 128},
                                   {25, 64, 257}, {32, 256, 300},
                                   {48, 32, 129}, {1, 480, 130},
                                   {1, 256, 16},  {1, 32, 17},
                                   {16, 64, 64}};
    int m = shape[_i][0], n = shape[_i][1], k = shape[_i][2];
    int lda = k + 3, ldb = n + 40, ldc = n + 7;
    tu_rng g = {77u + (unsigned)_i};
    float *a = tu_randn(&g, (size_t)m * lda, 1.0f);
    float *b = tu_randn(&g, (size_t)k * ldb, 1.0f);
    float *c = tu_fill((size_t)m * ldc, NAN);
    int took = attn__skinny_gemm(m, n, k, a, lda, b, ldb, c, ldc);
    ck_assert_int_eq(took, tu_cpu_avx512());
    for (int i = 0; took && i < m; i++) {
        for (int j = 0; j < n; j++) {
            double want = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double t = (double)a[(size_t)i * lda + p] *
                           (double)b[(size_t)p * ldb + j];
                want += t;
                mag += fabs(t);
            }
            float got = c[(size_t)i * ldc + j];
            /* k roundings of at most half an ulp of the running sum */
            ck_assert_msg(fabs(got - want) <= 1e-7 * k * mag + 1e-30,
                          "m %d n %d k %d c[%d][%d] %.9g want %.9g", m, n, k,
                          i, j, got, want);
        }
        for (int j = n; j < ldc; j++) /* the gap between rows untouched */
            ck_assert(isnan(c[(size_t)i * ldc + j]));
    }
    free(a), free(b), free(c);
}
END_TEST

START_TEST(skinny_gemm_row_alone_same_bits)
{
    /* a decoder step's projection alone (one row) equals, bit for bit,
     * the same row inside a batch of m rows */
    static const int shape[][3] = {/* m, n, k */
                                   {2, 480, 130}, {13, 256, 64},
                                   {32, 96, 2048}, {48, 64, 16}};
    int m = shape[_i][0], n = shape[_i][1], k = shape[_i][2];
    tu_rng g = {31u + (unsigned)_i};
    float *a = tu_randn(&g, (size_t)m * k, 1.0f);
    float *b = tu_randn(&g, (size_t)k * n, 1.0f);
    float *c = tu_fill((size_t)m * n, NAN), *c1 = tu_fill((size_t)n, NAN);
    if (!tu_cpu_avx512()) {
        free(a), free(b), free(c), free(c1);
        return;
    }
    ck_assert_int_eq(attn__skinny_gemm(m, n, k, a, k, b, n, c, n), 1);
    for (int i = 0; i < m; i++) {
        ck_assert_int_eq(attn__skinny_gemm(1, n, k, a + (size_t)i * k, k, b, n, c1, n), 1);
        ck_assert_msg(memcmp(c1, c + (size_t)i * n, (size_t)n * sizeof *c1) == 0,
                      "m %d n %d k %d: row %d alone differs from the batch's", m, n,
                      k, i);
    }
    free(a), free(b), free(c), free(c1);
}
END_TEST

START_TEST(skinny_rows_any_rows_same_bits)
{
    /* batch invariance (attn.c's put_grid): the rows of small requests
     * merged past SKINNY_MAX_ROWS go through attn__skinny_rows; each of
     * its rows has the bits of that row computed alone and of the same
     * row in a block of other rows at another place (a request's rows
     * beside another batch's) */
    static const int shape[][4] = {/* m, n, k, other block's first row */
                                   {49, 64, 512, 7},
                                   {130, 96, 64, 1},
                                   {256, 256, 100, 200}};
    int m = shape[_i][0], n = shape[_i][1], k = shape[_i][2];
    int r0 = shape[_i][3], m2 = m - r0;
    tu_rng g = {57u + (unsigned)_i};
    float *a = tu_randn(&g, (size_t)m * k, 1.0f);
    float *b = tu_randn(&g, (size_t)k * n, 1.0f);
    float *c = tu_fill((size_t)m * n, NAN), *c2 = tu_fill((size_t)m * n, NAN);
    float *c1 = tu_fill((size_t)n, NAN);
    ck_assert_int_eq(attn__skinny_rows(m, n, k, a, k, b, n, c, n), tu_cpu_avx512());
    if (!tu_cpu_avx512()) {
        free(a), free(b), free(c), free(c1), free(c2);
        return;
    }
    ck_assert_int_eq(attn__skinny_gemm(m, n, k, a, k, b, n, c2, n), 0);
    ck_assert_int_eq(attn__skinny_rows(m2, n, k, a + (size_t)r0 * k, k, b, n,
                                       c2, n),
                     1);
    for (int i = 0; i < m; i++) {
        ck_assert_int_eq(attn__skinny_rows(1, n, k, a + (size_t)i * k, k, b,
                                           n, c1, n),
                         1);
        ck_assert_msg(memcmp(c1, c + (size_t)i * n, (size_t)n * sizeof *c1) == 0,
                      "m %d n %d k %d: row %d alone differs", m, n, k, i);
        if (i >= r0)
            ck_assert_msg(memcmp(c2 + (size_t)(i - r0) * n, c + (size_t)i * n,
                                 (size_t)n * sizeof *c1) == 0,
                          "m %d n %d k %d: row %d of %d rows differs", m, n, k,
                          i, m2);
    }
    free(a), free(b), free(c), free(c1), free(c2);
}
END_TEST

START_TEST(skinny_gemm_declines)
{
    /* shapes it leaves to cblas_sgemm: C stays as it was */
    static const int shape[][3] = {
        {1, 48, 256}, {49, 64, 256}, {8, 48, 256}, {8, 16, 256}, {8, 64, 15}};
    int m = shape[_i][0], n = shape[_i][1], k = shape[_i][2];
    tu_rng g = {5u};
    float *a = tu_randn(&g, (size_t)m * k, 1.0f);
    float *b = tu_randn(&g, (size_t)k * n, 1.0f);
    float *c = tu_fill((size_t)m * n, NAN);
    ck_assert_int_eq(attn__skinny_gemm(m, n, k, a, k, b, n, c, n), 0);
    for (size_t i = 0; i < (size_t)m * n; i++)
        ck_assert(isnan(c[i]));
    free(a), free(b), free(c);
}
END_TEST

START_TEST(small_attn_matches_double)
{
    /* loop: rows 1 to SMALL_ROWS, keys around the 16-key blocks, d_k and
     * d_v around the 64-column blocks; rows strided (ld > width) */
    static const int shape[][4] = {/* n, kn, dk, dv */
                                   {1, 64, 64, 64},  {4, 64, 64, 64},
                                   {2, 23, 32, 32},  {3, 17, 16, 80},
                                   {5, 1, 128, 48},  {8, 100, 80, 128},
                                   {7, 15, 48, 16},  {4, 256, 64, 64}};
    int n = shape[_i][0], kn = shape[_i][1], dk = shape[_i][2], dv = shape[_i][3];
    size_t ldq = (size_t)dk + 5, ldk = (size_t)dk + 3, ldv = (size_t)dv + 9;
    size_t lds = (size_t)kn + 2, ldo = (size_t)dv + 7;
    tu_rng g = {91u + (unsigned)_i};
    float *q = tu_randn(&g, (size_t)n * ldq, 1.0f);
    float *k = tu_randn(&g, (size_t)kn * ldk, 1.0f);
    float *v = tu_randn(&g, (size_t)kn * ldv, 1.0f);
    float *sc = tu_fill((size_t)n * lds, NAN);
    float *o = tu_randn(&g, (size_t)n * ldo, 1.0f);
    float *o0 = tu_fill((size_t)n * ldo, 0.0f);
    memcpy(o0, o, (size_t)n * ldo * sizeof(float));
    for (size_t i = 0; i < (size_t)n * ldo; i++)
        if (i % ldo >= (size_t)dv)
            o[i] = o0[i] = NAN; /* the gaps must stay as they are */
    int took = attn__small_scores(n, kn, dk, 0.3f, q, ldq, k, ldk, sc, lds);
    ck_assert_int_eq(took, tu_cpu_avx512());
    ck_assert_int_eq(attn__small_pv(n, kn, dv, sc, lds, v, ldv, o, ldo), took);
    for (int r = 0; took && r < n; r++) {
        for (int j = 0; j < kn; j++) {
            double want = 0, mag = 0;
            for (int d = 0; d < dk; d++) {
                double t = (double)q[r * ldq + d] * (double)k[j * ldk + d];
                want += t;
                mag += fabs(t);
            }
            want *= 0.3;
            float got = sc[r * lds + j];
            ck_assert_msg(fabs(got - want) <= 1e-7 * dk * 0.3 * mag + 1e-30,
                          "n %d kn %d dk %d s[%d][%d] %.9g want %.9g", n, kn,
                          dk, r, j, got, want);
        }
        ck_assert(isnan(sc[r * lds + kn]));
        for (int c = 0; c < dv; c++) {
            double want = o0[r * ldo + c], mag = fabs(want);
            for (int j = 0; j < kn; j++) {
                double t = (double)sc[r * lds + j] * (double)v[j * ldv + c];
                want += t;
                mag += fabs(t);
            }
            float got = o[r * ldo + c];
            ck_assert_msg(fabs(got - want) <= 1e-7 * (kn + 1) * mag + 1e-30,
                          "n %d kn %d dv %d o[%d][%d] %.9g want %.9g", n, kn,
                          dv, r, c, got, want);
        }
        for (size_t c = (size_t)dv; c < ldo; c++)
            ck_assert(isnan(o[r * ldo + c]));
    }
    free(q), free(k), free(v), free(sc), free(o), free(o0);
}
END_TEST

START_TEST(small_attn_declines)
{
    /* shapes left to cblas_sgemm: out and o stay as they were */
    static const int shape[][3] = {/* n, kn, d */
                                   {9, 64, 64}, {0, 64, 64}, {4, 0, 64},
                                   {4, 64, 8},  {4, 64, 24}};
    int n = shape[_i][0], kn = shape[_i][1], d = shape[_i][2];
    size_t rows = n > 0 ? (size_t)n : 1, keys = kn > 0 ? (size_t)kn : 1;
    tu_rng g = {6u};
    float *q = tu_randn(&g, rows * (size_t)d, 1.0f);
    float *k = tu_randn(&g, keys * (size_t)d, 1.0f);
    float *out = tu_fill(rows * keys, NAN);
    float *o = tu_fill(rows * (size_t)d, NAN);
    ck_assert_int_eq(attn__small_scores(n, kn, d, 1.0f, q, d, k, d, out, keys), 0);
    ck_assert_int_eq(attn__small_pv(n, kn, d, out, keys, k, d, o, d), 0);
    for (size_t i = 0; i < rows * keys; i++)
        ck_assert(isnan(out[i]));
    for (size_t i = 0; i < rows * (size_t)d; i++)
        ck_assert(isnan(o[i]));
    free(q), free(k), free(out), free(o);
}
END_TEST

static Suite *kernel_suite(void)
{
    Suite *s = suite_create("kernel");
    TCase *tc = tcase_create("kernel");
    tcase_add_test(tc, rope_known_rotation);
    tcase_add_test(tc, rope_table_hf);
    tcase_add_loop_test(tc, kernel_block_edges, 0, 5);
    tcase_add_loop_test(tc, skinny_gemm_matches_double, 0, 11);
    tcase_add_loop_test(tc, skinny_gemm_row_alone_same_bits, 0, 4);
    tcase_add_loop_test(tc, skinny_gemm_declines, 0, 5);
    tcase_add_loop_test(tc, skinny_rows_any_rows_same_bits, 0, 3);
    tcase_add_loop_test(tc, small_attn_matches_double, 0, 8);
    tcase_add_loop_test(tc, small_attn_declines, 0, 5);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(kernel_suite)

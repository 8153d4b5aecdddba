/*
 * test_rows_fma.c - core/rows_fma.c: attn__rows_fma, the row-invariant
 * GEMM, against a naive loop of fmaf() (each element one chain over k in
 * order, from 0.0f) on odd shapes, bit for bit, through its AVX2+FMA path
 * and its plain C one; and against the AVX-512 skinny kernel
 * (attn__skinny_rows) on the shapes both take, bit for bit (a fused
 * multiply-add is correctly rounded, whatever the vector width). And the
 * test hook that hides AVX-512 (attn__avx512_off).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel.h"
#include "testutil.h"
#include "tests/check_main.h"

/* The reference: c[i][j] = fma(a[i][k-1], b[k-1][j], ... fma(a[i][0],
 * b[0][j], 0.0f)), one element at a time. */
static void naive(int m, int n, int k, const float *a, int lda, const float *b,
                  int ldb, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++)
                acc = fmaf(a[(size_t)i * lda + p], b[(size_t)p * ldb + j], acc);
            c[(size_t)i * ldc + j] = acc;
        }
}

/* The first of n elements whose bits differ between x and y, or n (one
 * assertion per array: Check reports each passing one to its parent). */
static size_t first_diff(const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof *x) != 0)
            return i;
    return n;
}

/* loop: _i / 3 picks (n, k), _i % 3 the path: AVX2 (0: every m from 1 to
 * 50, blocks of 6 rows and their remainders, one row's wide blocks,
 * columns in 16s, 8s and the scalar rest, k past the 256-row passes),
 * plain C (1: a row at a time, m 1, 5 and 50), both with AVX-512 hidden;
 * or as this CPU has it (2: every m; with AVX-512 the skinny kernel
 * takes the first n - n % 32 columns when k >= 16, the rest as 0). A, B
 * and C strided (ld > width), the gaps untouched. */
START_TEST(rows_fma_equals_naive_fmaf)
{
    static const int nk[][2] = {/* n, k */
                                {1, 1},    {7, 3},    {33, 64},   {240, 2048},
                                {1, 2048}, {7, 64},   {33, 1},    {240, 3},
                                {1, 64},   {7, 2048}, {33, 3},    {240, 1},
                                {1, 3},    {7, 1},    {33, 2048}, {240, 64}};
    enum { M = 50 };
    int n = nk[_i / 3][0], k = nk[_i / 3][1], path = _i % 3;
    int lda = k + 3, ldb = n + 5, ldc = n + 2;
    tu_rng g = {4242u + (unsigned)_i};
    float *a = tu_randn(&g, (size_t)M * lda, 1.0f);
    float *b = tu_randn(&g, (size_t)k * ldb, 1.0f);
    float *want = tu_fill((size_t)M * ldc, NAN);
    float *c = tu_fill((size_t)M * ldc, NAN),
          *exp = tu_fill((size_t)M * ldc, NAN);
    naive(M, n, k, a, lda, b, ldb, want, ldc);
    attn__avx512_off(path < 2);
    attn__avx2_off(path == 1);
    static const int few[] = {1, 5, M};
    int nm = path == 1 ? 3 : M;
    for (int t = 0; t < nm; t++) {
        int m = path == 1 ? few[t] : t + 1;
        /* the last m rows: row i of the call is row M - m + i; the rest of
         * C and the gaps between its rows stay NaN */
        size_t r0 = (size_t)(M - m), all = (size_t)M * ldc;
        for (size_t e = 0; e < all; e++) {
            c[e] = NAN;
            exp[e] = e >= r0 * ldc && (int)(e % ldc) < n ? want[e] : NAN;
        }
        attn__rows_fma(m, n, k, a + r0 * lda, lda, b, ldb, c + r0 * ldc, ldc);
        size_t d = first_diff(c, exp, all);
        ck_assert_msg(
            d == all, "m %d n %d k %d path %d: c[%zu][%zu] %.9g, fmaf's %.9g",
            m, n, k, path, d / ldc, d % ldc, (double)c[d], (double)exp[d]);
    }
    attn__avx2_off(0);
    attn__avx512_off(0);
    free(a), free(b), free(want), free(c), free(exp);
}
END_TEST

/* loop: shapes the skinny kernel takes (n a multiple of 32, k >= 16):
 * attn__skinny_rows's bits (AVX-512, 16 lanes, 12-row blocks, one row's
 * 256-column blocks) are attn__rows_fma's with AVX-512 hidden, through
 * AVX2 (8 lanes, 6-row blocks, 256-row passes) and through plain C. */
START_TEST(rows_fma_equals_skinny)
{
    static const int shape[][3] = {
        /* m, n, k */
        {1, 32, 16},    {1, 480, 130}, {1, 2048, 256}, {2, 64, 17},
        {5, 96, 2048},  {12, 32, 200}, {13, 256, 129}, {16, 256, 2048},
        {48, 224, 300}, {49, 64, 512}, {130, 96, 64},  {256, 256, 100}};
    int m = shape[_i][0], n = shape[_i][1], k = shape[_i][2];
    int lda = k + 1, ldb = n + 16, ldc = n + 3;
    tu_rng g = {99u + (unsigned)_i};
    float *a = tu_randn(&g, (size_t)m * lda, 1.0f);
    float *b = tu_randn(&g, (size_t)k * ldb, 1.0f);
    float *c512 = tu_fill((size_t)m * ldc, NAN);
    float *c = tu_fill((size_t)m * ldc, NAN);
    if (!tu_cpu_avx512()) {
        free(a), free(b), free(c512), free(c);
        return;
    }
    ck_assert_int_eq(attn__skinny_rows(m, n, k, a, lda, b, ldb, c512, ldc), 1);
    attn__avx512_off(1);
    for (int portable = 0; portable < 2; portable++) {
        for (size_t e = 0; e < (size_t)m * ldc; e++)
            c[e] = NAN;
        attn__avx2_off(portable);
        attn__rows_fma(m, n, k, a, lda, b, ldb, c, ldc);
        for (int i = 0; i < m; i++)
            ck_assert_msg(memcmp(c + (size_t)i * ldc, c512 + (size_t)i * ldc,
                                 (size_t)n * sizeof *c) == 0,
                          "m %d n %d k %d portable %d: row %d differs from "
                          "the skinny kernel's",
                          m, n, k, portable, i);
    }
    attn__avx2_off(0);
    attn__avx512_off(0);
    free(a), free(b), free(c512), free(c);
}
END_TEST

/* One fused multiply-add per element (k 2: a row's first column is 1, so
 * c[i][j] = fma(alpha_i, beta_j, gamma_j)) on operands chosen to trap a
 * plain double a b + c rounded to float: sums that round in double onto a
 * midpoint between two floats, and products and sums from float
 * subnormals to overflow. Plain C (fma_double on x86-64) and AVX2 against
 * fmaf(), bit for bit, and one case by hand. */
START_TEST(rows_fma_rounds_once)
{
    enum { M = 64, N = 64 };
    float *a = tu_fill(M * 2, 1.0f), *b = tu_fill(2 * N, 0.0f);
    float *want = tu_fill(M * N, NAN), *c = tu_fill(M * N, NAN);
    tu_rng g = {2024u};
    for (int i = 0; i < M; i++) /* alpha_i: 1 + i ulp, then any size */
        a[i * 2 + 1] = i < M / 2
                           ? 1.0f + (float)i * 0x1p-23f
                           : ldexpf(tu_uniform(&g), (int)(tu_uniform(&g) * 80));
    for (int j = 0; j < N; j++) {
        /* gamma_j (row 0 of B) and beta_j (row 1): alpha beta within 2^-46
         * of half an ulp of gamma, either side; then any size, from float
         * subnormals up */
        if (j < N / 2) {
            b[j] = 1.0f + (float)(j % 7) * 0x1p-23f;
            b[N + j] = (j % 2 ? -1.0f : 1.0f) * 0x1p-24f *
                       (1.0f - (float)(j / 2) * 0x1p-23f);
        } else {
            b[j] = ldexpf(tu_uniform(&g), (int)(tu_uniform(&g) * 130) - 10);
            b[N + j] = ldexpf(tu_uniform(&g), (int)(tu_uniform(&g) * 80));
        }
    }
    /* row 31 x column 31: the same below FLT_MIN, where a float drops
     * more bits: alpha beta = -2^-150 (1 - 2^-46), gamma 2^-127 + 2^-149
     * (a subnormal, odd): the exact sum is above the midpoint 2^-127 +
     * 2^-150 it rounds to in double, so gamma, not 2^-127 */
    a[31 * 2 + 1] = -0x1.000002p-75f;
    b[31] = 0x1.000004p-127f;
    b[N + 31] = 0x1.fffffcp-76f;
    naive(M, N, 2, a, 2, b, N, want, N);
    ck_assert(want[31 * N + 31] == 0x1.000004p-127f);
    /* alpha 1 + 2^-23, beta -2^-24 (1 - 2^-23), gamma 1 + 3 2^-23: the
     * exact 1 + 5 2^-24 + 2^-70 is above the midpoint 1 + 5 2^-24 it
     * rounds to in double, so 1 + 3 2^-23 (not the midpoint's even
     * neighbour 1 + 2^-22) */
    ck_assert(a[1 * 2 + 1] == 1.0f + 0x1p-23f && b[3] == 1.0f + 0x3p-23f &&
              b[N + 3] == -0x1p-24f * (1.0f - 0x1p-23f));
    ck_assert(want[1 * N + 3] == 1.0f + 0x3p-23f);
    attn__avx512_off(1);
    for (int portable = 0; portable < 2; portable++) {
        attn__avx2_off(portable);
        for (int e = 0; e < M * N; e++)
            c[e] = NAN;
        attn__rows_fma(M, N, 2, a, 2, b, N, c, N);
        size_t e = first_diff(c, want, M * N);
        ck_assert_msg(e == M * N,
                      "portable %d: c[%zu][%zu] = fma(%a, %a, %a) %a, "
                      "fmaf's %a",
                      portable, e / N, e % N, (double)a[e / N * 2 + 1],
                      (double)b[N + e % N], (double)b[e % N], (double)c[e],
                      (double)want[e]);
    }
    attn__avx2_off(0);
    attn__avx512_off(0);
    free(a), free(b), free(want), free(c);
}
END_TEST

START_TEST(avx512_off_hides_it)
{
    /* hidden, the AVX-512 kernels decline as on a CPU without it; shown
     * again, they take their shapes (on this CPU) */
    tu_rng g = {7u};
    float *a = tu_randn(&g, 4 * 64, 1.0f), *b = tu_randn(&g, 64 * 32, 1.0f);
    float *c = tu_fill(4 * 32, NAN);
    attn__avx512_off(1);
    ck_assert_int_eq(attn__have_avx512(), 0);
    ck_assert_int_eq(attn__skinny_fits(32, 64), 0);
    ck_assert_int_eq(attn__skinny_rows(4, 32, 64, a, 64, b, 32, c, 32), 0);
    ck_assert_int_eq(attn__small_scores(4, 32, 16, 1.0f, a, 64, b, 32, c, 32),
                     0);
    for (int i = 0; i < 4 * 32; i++)
        ck_assert(isnan(c[i]));
    attn__avx512_off(0);
    ck_assert_int_eq(attn__have_avx512(), tu_cpu_avx512());
    ck_assert_int_eq(attn__skinny_rows(4, 32, 64, a, 64, b, 32, c, 32),
                     tu_cpu_avx512());
    free(a), free(b), free(c);
}
END_TEST

static Suite *rows_fma_suite(void)
{
    Suite *s = suite_create("rows_fma");
    TCase *tc = tcase_create("rows_fma");
    tcase_add_loop_test(tc, rows_fma_equals_naive_fmaf, 0, 48);
    tcase_add_loop_test(tc, rows_fma_equals_skinny, 0, 12);
    tcase_add_test(tc, rows_fma_rounds_once);
    tcase_add_test(tc, avx512_off_hides_it);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(rows_fma_suite)

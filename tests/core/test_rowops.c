/*
 * test_rowops.c - core/rowops.c: the softmax row operations, on both the
 * AVX2 path (when the CPU has it) and the portable one, against double
 * precision: max, exp of 0 is 1, -inf gives exactly 0, tails of every
 * length, relative error of exp under 1e-6.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "core/kernel.h"
#include "testutil.h"
#include "tests/check_main.h"

START_TEST(max_and_expsum)
{
    attn__avx2_off(_i);
    tu_rng g = {5};
    for (int n = 0; n <= 37; n++) {
        float x[40], y[40];
        double want_sum = 0;
        for (int j = 0; j < n; j++)
            x[j] = 30.0f * tu_uniform(&g);
        if (n > 3)
            x[2] = -INFINITY;
        float mx = attn__row_max(x, n);
        float ref = -INFINITY;
        for (int j = 0; j < n; j++)
            ref = x[j] > ref ? x[j] : ref;
        ck_assert(mx == ref);
        if (n == 0)
            continue;
        for (int j = 0; j < n; j++)
            y[j] = x[j];
        float s = attn__row_expsum(y, n, mx);
        for (int j = 0; j < n; j++) {
            double e = exp((double)(x[j] - mx)); /* float difference */
            want_sum += e;
            if (x[j] == -INFINITY)
                ck_assert(y[j] == 0.0f);
            else if (x[j] == mx)
                ck_assert(fabsf(y[j] - 1.0f) < 1e-7f);
            else if (e > 1e-30)
                ck_assert_msg(fabs(y[j] - e) <= 1e-6 * e, "exp(%g) = %g",
                              x[j] - mx, y[j]);
        }
        ck_assert(fabs(s - want_sum) <= 1e-6 * want_sum);
    }
    /* far below the max: 0 or tiny, never negative or NaN */
    float z[9] = {-1000, -200, -100, -88, -87, -50, 0, -INFINITY, -90};
    attn__row_expsum(z, 9, 0.0f);
    for (int j = 0; j < 9; j++)
        ck_assert(z[j] >= 0.0f && z[j] <= 1.0f);
    ck_assert(z[6] == 1.0f && z[7] == 0.0f && z[0] == 0.0f);
    attn__avx2_off(0);
}
END_TEST

static Suite *rowops_suite(void)
{
    Suite *s = suite_create("rowops");
    TCase *tc = tcase_create("rowops");
    tcase_add_loop_test(tc, max_and_expsum, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(rowops_suite)

/*
 * testutil.h - small helpers shared by the tests/core Check suites
 * (header-only: each suite is its own binary).
 */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"

/* The executor of the suites that test the threaded path: 2 threads,
 * made before each test and destroyed after it, in the test's own process
 * (tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown)). */
static attn_exec *tu_ex __attribute__((unused));

static inline void tu_exec_setup(void)
{
    ck_assert_int_eq(attn_exec_create(&tu_ex, 2), 0);
}

static inline void tu_exec_teardown(void)
{
    attn_exec_destroy(tu_ex);
    tu_ex = NULL;
}

/* A CPU with AVX-512F, asked of the CPU itself (attn__have_avx512 says 0
 * while a test hides it, attn__avx512_off): the skinny GEMM and
 * small_attn.c run only there, and decline elsewhere. */
static inline int tu_cpu_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
#else
    return 0;
#endif
}

/* Deterministic xorshift generator; uniform floats in [-1, 1). */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;

static inline float tu_uniform(tu_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return (float)((r->s >> 40) / (double)(1u << 24)) * 2.0f - 1.0f;
}

static inline float *tu_randn(tu_rng *r, size_t n, float amp)
{
    float *p = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = amp * tu_uniform(r);
    return p;
}

static inline float *tu_fill(size_t n, float v)
{
    float *p = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

/* |a - b| <= atol or <= rtol * |b|, element by element; names the first
 * failing index. */
#define tu_assert_close(what, a, b, n, atol, rtol)                             \
    do {                                                                       \
        const float *a_ = (a), *b_ = (b);                                      \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                          \
            float d_ = fabsf(a_[i_] - b_[i_]);                                 \
            if (!(d_ <= (atol) || d_ <= (rtol)*fabsf(b_[i_])))                 \
                ck_abort_msg("%s[%zu] = %.7g, expected %.7g (diff %.3g)",      \
                             (what), i_, (double)a_[i_], (double)b_[i_],       \
                             (double)d_);                                      \
        }                                                                      \
    } while (0)

/* Equal to the value printed with `digits` decimals (rounding). */
#define tu_assert_printed(what, got, printed, digits)                          \
    do {                                                                       \
        double g_ = (got), p_ = (printed);                                     \
        double h_ = 0.5 * pow(10.0, -(digits)) + 1e-9;                         \
        if (!(fabs(g_ - p_) <= h_))                                            \
            ck_abort_msg("%s = %.7f does not print as %.*f", (what), g_,       \
                         (int)(digits), p_);                                   \
    } while (0)

/* A full layer with random weights. */
typedef struct layer {
    attn_config c;
    attn_weights w;
    float *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
} layer;

static inline void layer_init(layer *L, tu_rng *g, int dm, int H, int Hk, int dk,
                       int dv)
{
    L->c = (attn_config){.d_model = dm,
                         .n_heads = H,
                         .n_kv_heads = Hk,
                         .head_dim = dk,
                         .v_head_dim = dv};
    float a = 1.0f / sqrtf((float)dm);
    L->wq = tu_randn(g, (size_t)dm * H * dk, a);
    L->wk = tu_randn(g, (size_t)dm * Hk * dk, a);
    L->wv = tu_randn(g, (size_t)dm * Hk * dv, a);
    L->wo = tu_randn(g, (size_t)H * dv * dm, a);
    L->bq = tu_randn(g, (size_t)H * dk, 0.1f);
    L->bk = tu_randn(g, (size_t)Hk * dk, 0.1f);
    L->bv = tu_randn(g, (size_t)Hk * dv, 0.1f);
    L->bo = tu_randn(g, (size_t)dm, 0.1f);
    L->w =
        (attn_weights){L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv, L->bo,
                       ATTN_ROWS};
}

static inline void layer_free(layer *L)
{
    free(L->wq), free(L->wk), free(L->wv), free(L->wo);
    free(L->bq), free(L->bk), free(L->bv), free(L->bo);
}

#endif

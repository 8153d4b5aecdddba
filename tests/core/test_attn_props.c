/*
 * test_attn_props.c - properties of the engine (core/attn.c) on random
 * inputs and the plan API. (The seeds and the PyTorch vectors are in
 * test_attn.c; both files test attn.c, split to stay small. Bad arguments:
 * test_check.c.)
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kernel.h"
#include "testutil.h"
#include "tests/check_main.h"

/* A random raw problem: H heads, t x s, with causal and a random mask
 * (about a quarter of the keys hidden). */
typedef struct rawp {
    attn_config c;
    attn_raw r;
    float *q, *k, *v, *y, *a, *sc;
    uint8_t *mask;
} rawp;

static void rawp_init(rawp *p, tu_rng *g, int H, int t, int s, int dk, int dv,
                      int causal, int masked, float amp)
{
    memset(p, 0, sizeof *p);
    p->c = (attn_config){.n_heads = H, .head_dim = dk, .v_head_dim = dv};
    size_t ht = (size_t)H * t, hs = (size_t)H * s;
    p->q = tu_randn(g, ht * dk, amp);
    p->k = tu_randn(g, hs * dk, amp);
    p->v = tu_randn(g, hs * dv, 1.0f);
    p->y = tu_fill(ht * dv, NAN);
    p->a = tu_fill(ht * s, NAN);
    p->sc = tu_fill(ht * s, NAN);
    if (masked) {
        p->mask = malloc((size_t)t * s);
        for (size_t i = 0; i < (size_t)t * s; i++)
            p->mask[i] = tu_uniform(g) > -0.5f;
        /* one fully masked row */
        memset(p->mask + (size_t)(t / 2) * s, 0, (size_t)s);
    }
    p->r = (attn_raw){.t = t,
                      .s = s,
                      .causal = causal,
                      .q = p->q,
                      .k = p->k,
                      .v = p->v,
                      .mask = p->mask,
                      .y = p->y,
                      .attention = p->a,
                      .scores = p->sc};
}

static void rawp_free(rawp *p)
{
    free(p->q), free(p->k), free(p->v), free(p->y), free(p->a), free(p->sc);
    free(p->mask);
}

static int visible(const rawp *p, int i, int j)
{
    if (p->r.causal && j > i)
        return 0;
    return !p->mask || p->mask[(size_t)i * p->r.s + j];
}

/* Rows sum to 1 over visible keys, masked weights are exactly 0, fully
 * masked rows are all 0 with zero output, each output is a convex
 * combination of the visible value rows. */
START_TEST(prop_softmax_rows_and_convexity)
{
    tu_rng g = {0x1234u + (unsigned)_i};
    rawp p;
    int t = 70 + _i * 40, s = 90 + _i * 77;
    rawp_init(&p, &g, 3, t, s, 16, 8, _i & 1, 1, 1.0f);
    char err[ATTN_ERRMAX];
    ck_assert_msg(attn_forward_raw(&p.c, &p.r, 1, tu_ex, err) == 0, "%s", err);
    for (int h = 0; h < 3; h++)
        for (int i = 0; i < t; i++) {
            const float *a = p.a + ((size_t)h * t + i) * s;
            const float *y = p.y + ((size_t)h * t + i) * 8;
            double sum = 0;
            int nvis = 0;
            for (int j = 0; j < s; j++) {
                if (!visible(&p, i, j))
                    ck_assert_msg(a[j] == 0.0f, "masked weight %g", a[j]);
                else
                    nvis++;
                ck_assert(a[j] >= 0.0f);
                sum += a[j];
            }
            if (nvis == 0) {
                ck_assert(sum == 0.0);
                for (int d = 0; d < 8; d++)
                    ck_assert(y[d] == 0.0f);
                continue;
            }
            ck_assert_msg(fabs(sum - 1.0) < 1e-5, "row sum %g", sum);
            for (int d = 0; d < 8; d++) {
                float lo = INFINITY, hi = -INFINITY;
                for (int j = 0; j < s; j++)
                    if (visible(&p, i, j)) {
                        float vv = p.v[((size_t)h * s + j) * 8 + d];
                        lo = fminf(lo, vv), hi = fmaxf(hi, vv);
                    }
                ck_assert(y[d] >= lo - 1e-5f && y[d] <= hi + 1e-5f);
            }
        }
    rawp_free(&p);
}
END_TEST

/* The fused kernel (no maps) gives the materialised numbers; also with
 * scores ~ +-1e4, where everything must stay finite. */
START_TEST(prop_fused_equals_maps)
{
    tu_rng g = {0x9876u + (unsigned)_i};
    float amp = _i >= 2 ? 25.0f : 1.0f;
    if (_i == 3)
        amp = 100.0f; /* scores around +-1e4 */
    rawp p;
    int t = 200, s = 300;
    rawp_init(&p, &g, 2, t, s, 16, 12, _i & 1, _i != 0, amp);
    char err[ATTN_ERRMAX];
    ck_assert(attn_forward_raw(&p.c, &p.r, 1, NULL, err) == 0);
    float maxsc = 0;
    for (size_t i = 0; i < (size_t)2 * t * s; i++)
        maxsc = fmaxf(maxsc, fabsf(p.sc[i]));
    if (_i == 3)
        ck_assert_msg(maxsc > 5e3f, "max |score| %g", maxsc);
    float *y2 = tu_fill((size_t)2 * t * 12, NAN);
    attn_raw r2 = p.r;
    r2.attention = r2.scores = NULL;
    r2.y = y2;
    ck_assert(attn_forward_raw(&p.c, &r2, 1, tu_ex, err) == 0);
    for (size_t i = 0; i < (size_t)2 * t * 12; i++) {
        ck_assert(isfinite(p.y[i]) && isfinite(y2[i]));
        ck_assert_msg(fabsf(y2[i] - p.y[i]) <= 1e-5f + 1e-4f * fabsf(p.y[i]),
                      "fused %g maps %g at %zu", y2[i], p.y[i], i);
    }
    free(y2);
    rawp_free(&p);
}
END_TEST

/* Without RoPE or masks, permuting the tokens permutes the outputs. */
START_TEST(prop_permutation_equivariance)
{
    tu_rng g = {77};
    layer L;
    layer_init(&L, &g, 24, 4, 2, 8, 6);
    int t = 37;
    float *x = tu_randn(&g, (size_t)t * 24, 1.0f);
    float *xp = tu_fill((size_t)t * 24, 0), *y = tu_fill((size_t)t * 24, 0),
          *yp = tu_fill((size_t)t * 24, 0);
    int perm[37];
    for (int i = 0; i < t; i++)
        perm[i] = (i * 11 + 5) % t; /* 11 is coprime with 37 */
    for (int i = 0; i < t; i++)
        memcpy(xp + (size_t)i * 24, x + (size_t)perm[i] * 24,
               24 * sizeof(float));
    attn_seq s1 = {.t = t, .s = t, .t_valid = t, .s_valid = t, .x = x, .y = y};
    attn_seq s2 = s1;
    s2.x = xp, s2.y = yp;
    char err[ATTN_ERRMAX];
    ck_assert(attn_forward(&L.c, &L.w, &s1, 1, tu_ex, err) == 0);
    ck_assert(attn_forward(&L.c, &L.w, &s2, 1, NULL, err) == 0);
    for (int i = 0; i < t; i++)
        tu_assert_close("permuted y", yp + (size_t)i * 24,
                        y + (size_t)perm[i] * 24, 24, 1e-5f, 1e-4f);
    free(x), free(xp), free(y), free(yp);
    layer_free(&L);
}
END_TEST

/* Padded query rows and fully masked rows: y, attention and q rows of
 * padding are zero (y is 0, not b_o); a sequence batched with others gives
 * the same numbers as alone. */
START_TEST(prop_padding_and_batching)
{
    tu_rng g = {4242};
    layer L;
    layer_init(&L, &g, 16, 2, 1, 8, 8);
    L.c.rope_theta = 10000.0f;
    int t = 20;
    float *x = tu_randn(&g, (size_t)3 * t * 16, 1.0f);
    float *y = tu_fill((size_t)3 * t * 16, NAN);
    float *a = tu_fill((size_t)3 * 2 * t * t, NAN);
    float *y1 = tu_fill((size_t)t * 16, NAN);
    uint8_t mask[20 * 20];
    memset(mask, 1, sizeof mask);
    memset(mask + 3 * t, 0, (size_t)t); /* row 3 sees nothing */
    attn_seq s[3];
    for (int b = 0; b < 3; b++)
        s[b] = (attn_seq){.t = t,
                          .s = t,
                          .t_valid = t - 5 * b,
                          .s_valid = t - 3 * b,
                          .causal = b == 1,
                          .mask = b == 2 ? mask : NULL,
                          .x = x + (size_t)b * t * 16,
                          .y = y + (size_t)b * t * 16,
                          .attention = a + (size_t)b * 2 * t * t};
    char err[ATTN_ERRMAX];
    ck_assert(attn_forward(&L.c, &L.w, s, 3, tu_ex, err) == 0);
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < t; i++) {
            int dead = i >= s[b].t_valid || (b == 2 && i == 3);
            const float *yr = y + ((size_t)b * t + i) * 16;
            for (int d = 0; d < 16; d++)
                if (dead)
                    ck_assert_msg(yr[d] == 0.0f, "b %d row %d y %g", b, i,
                                  yr[d]);
                else
                    ck_assert(isfinite(yr[d]));
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < t; j++) {
                    float w = a[(((size_t)b * 2 + h) * t + i) * t + j];
                    if (dead || j >= s[b].s_valid)
                        ck_assert(w == 0.0f);
                }
        }
        /* alone == batched */
        attn_seq one = s[b];
        one.y = y1;
        one.attention = NULL;
        ck_assert(attn_forward(&L.c, &L.w, &one, 1, NULL, err) == 0);
        tu_assert_close("alone vs batched", y1, s[b].y, (size_t)t * 16, 1e-6f,
                        1e-5f);
    }
    free(x), free(y), free(a), free(y1);
    layer_free(&L);
}
END_TEST

/* Inputs that overflow float32 in the projections or the scores flag their
 * own item (attn_plan_nonfinite) and make attn_forward return ATTN_ERANGE,
 * on both paths; a finite neighbour in the same batch is unaffected. */
START_TEST(prop_overflow_is_flagged_per_item)
{
    tu_rng g = {77};
    layer L;
    layer_init(&L, &g, 16, 2, 1, 8, 8);
    int t = 6;
    float *x = tu_randn(&g, (size_t)2 * t * 16, 1.0f);
    float *y = tu_fill((size_t)2 * t * 16, NAN);
    float *a = tu_fill((size_t)2 * 2 * t * t, NAN);
    float *y1 = tu_fill((size_t)t * 16, NAN);
    for (size_t i = 0; i < (size_t)t * 16; i++)
        x[(size_t)t * 16 + i] = 3e38f; /* item 1 overflows in W_q */
    char err[ATTN_ERRMAX];
    for (int maps = 0; maps < 2; maps++) {
        attn_seq s[2];
        for (int b = 0; b < 2; b++)
            s[b] = (attn_seq){.t = t, .s = t, .t_valid = t, .s_valid = t,
                              .x = x + (size_t)b * t * 16,
                              .y = y + (size_t)b * t * 16,
                              .attention = maps ? a + (size_t)b * 2 * t * t
                                                : NULL};
        attn_plan *p;
        ck_assert_int_eq(attn_plan_create(&p, &L.c, &L.w, s, 2, err), 0);
        attn_plan_run(p, tu_ex);
        ck_assert_int_eq(attn_plan_nonfinite(p, 0), 0);
        ck_assert_int_eq(attn_plan_nonfinite(p, 1), 1);
        attn_plan_destroy(p);
        ck_assert_int_eq(attn_forward(&L.c, &L.w, s, 2, NULL, err),
                         ATTN_ERANGE);
        ck_assert_ptr_nonnull(strstr(err, "item 1"));
        attn_seq one = s[0];
        one.y = y1;
        one.attention = NULL;
        ck_assert_int_eq(attn_forward(&L.c, &L.w, &one, 1, NULL, err), 0);
        tu_assert_close("finite neighbour", y1, y, (size_t)t * 16, 1e-6f,
                        1e-5f);
    }
    /* Raw SDPA: finite q and k whose scores overflow to -Inf on every key
     * (once mistaken for a fully masked row), on both paths. */
    for (int maps = 0; maps < 2; maps++) {
        rawp r;
        rawp_init(&r, &g, 1, 2, 3, 2, 2, 0, 0, 1.0f);
        for (int i = 0; i < 2 * 2; i++)
            r.q[i] = 1e30f;
        for (int i = 0; i < 3 * 2; i++)
            r.k[i] = -1e30f;
        if (!maps)
            r.r.attention = NULL, r.r.scores = NULL;
        ck_assert_int_eq(attn_forward_raw(&r.c, &r.r, 1, NULL, err),
                         ATTN_ERANGE);
        rawp_free(&r);
    }
    free(x), free(y), free(a), free(y1);
    layer_free(&L);
}
END_TEST

/* A score that overflows at a key no query sees (causal, t < s; the same
 * holds for padded keys): the fused path never needs it, but a scores
 * output asked for holds it, so the item is flagged there as on the
 * materialised path, not answered with an Inf inside ("scores ... always
 * finite"). Without scores or weights nothing computed holds it: y is
 * v's first row, as PyTorch gives it. */
START_TEST(prop_overflow_in_scores_output_is_flagged)
{
    tu_rng g = {78};
    char err[ATTN_ERRMAX];
    for (int want = 0; want < 3; want++) { /* scores; scores + weights; y */
        rawp r;
        rawp_init(&r, &g, 1, 1, 2, 2, 1, 1, 0, 1.0f);
        r.q[0] = r.q[1] = 1e30f;
        r.k[0] = r.k[1] = 1.0f;     /* key 0: the one query 0 sees */
        r.k[2] = r.k[3] = 1e30f;    /* key 1: hidden by causal, q.k = 2e60 */
        if (want != 1)
            r.r.attention = NULL;
        if (want == 2)
            r.r.scores = NULL;
        ck_assert_int_eq(attn_forward_raw(&r.c, &r.r, 1, NULL, err),
                         want == 2 ? 0 : ATTN_ERANGE);
        if (want == 2)
            ck_assert(r.y[0] == r.v[0]);
        rawp_free(&r);
    }
}
END_TEST

/* Values near FLT_MAX: each output is a convex combination of them and
 * fits float32, as PyTorch's softmax(s) @ V gives it. The fused path once
 * summed exp(s - m) v over the keys before dividing by the sum of the
 * weights, overflowed to Inf (2 keys of 3e38 make 6e38) and refused the
 * request as "not finite"; it must give the materialised numbers, over
 * several spans of keys (s > ATTN__BK), causal and masked, and a row whose
 * keys were all masked stays 0. */
START_TEST(prop_fused_values_near_flt_max)
{
    tu_rng g = {0x5151u + (unsigned)_i};
    int t = 5, s = _i ? ATTN__BK + 44 : 2, dv = 3;
    rawp p;
    rawp_init(&p, &g, 2, t, s, 4, dv, _i, _i, 1.0f);
    for (size_t i = 0; i < (size_t)2 * s * dv; i++)
        p.v[i] = (i % 3 == 2 ? -3.0e38f : 3.0e38f) * (1.0f - 0.01f * (i % 7));
    char err[ATTN_ERRMAX];
    ck_assert_msg(attn_forward_raw(&p.c, &p.r, 1, NULL, err) == 0, "%s", err);
    float *y2 = tu_fill((size_t)2 * t * dv, NAN);
    attn_raw r2 = p.r;
    r2.attention = r2.scores = NULL;
    r2.y = y2;
    ck_assert_msg(attn_forward_raw(&p.c, &r2, 1, tu_ex, err) == 0, "%s", err);
    for (size_t i = 0; i < (size_t)2 * t * dv; i++) {
        ck_assert(isfinite(p.y[i]));
        ck_assert_msg(fabsf(y2[i] - p.y[i]) <= 1e-5f * fabsf(p.y[i]),
                      "fused %g maps %g at %zu", y2[i], p.y[i], i);
    }
    if (_i)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < dv; d++)
                ck_assert(y2[((size_t)h * t + t / 2) * dv + d] == 0.0f);
    free(y2);
    rawp_free(&p);
}
END_TEST

/* The plan API: tiles of a stage may run in any order; the fused path's
 * scratch grows linearly with T (no T x S buffer). */
START_TEST(plan_tiles_any_order_and_linear_memory)
{
    tu_rng g = {99};
    layer L;
    layer_init(&L, &g, 32, 4, 4, 8, 8);
    int t = 150;
    float *x = tu_randn(&g, (size_t)t * 32, 1.0f);
    float *y1 = tu_fill((size_t)t * 32, NAN), *y2 = tu_fill((size_t)t * 32, 0);
    attn_seq s = {.t = t,
                  .s = t,
                  .t_valid = t,
                  .s_valid = t,
                  .causal = 1,
                  .x = x,
                  .y = y1};
    char err[ATTN_ERRMAX];
    ck_assert(attn_forward(&L.c, &L.w, &s, 1, NULL, err) == 0);
    s.y = y2;
    attn_plan *p;
    ck_assert(attn_plan_create(&p, &L.c, &L.w, &s, 1, err) == 0);
    ck_assert_int_eq(attn_plan_n_stages(p), 3);
    /* heads x query blocks */
    ck_assert_uint_eq(attn_plan_n_tiles(p, 1),
                      4 * ((150 + ATTN__BQ - 1) / ATTN__BQ));
    ck_assert_uint_eq(attn_plan_n_tiles(p, 3), 0);
    for (int st = 0; st < attn_plan_n_stages(p); st++)
        for (size_t i = attn_plan_n_tiles(p, st); i-- > 0;)
            attn_plan_run_tile(p, st, i);
    size_t b150 = attn_plan_scratch_bytes(p);
    attn_plan_destroy(p);
    tu_assert_close("reverse order", y2, y1, (size_t)t * 32, 0.0f, 0.0f);
    /* scratch for T = 4096 vs 2048: twice, not four times */
    attn_seq big = {.t = 4096,
                    .s = 4096,
                    .t_valid = 4096,
                    .s_valid = 4096,
                    .x = x,
                    .y = y1};
    ck_assert(attn_plan_create(&p, &L.c, &L.w, &big, 1, err) == 0);
    size_t b4k = attn_plan_scratch_bytes(p);
    attn_plan_destroy(p);
    big.t = big.s = big.t_valid = big.s_valid = 2048;
    ck_assert(attn_plan_create(&p, &L.c, &L.w, &big, 1, err) == 0);
    size_t b2k = attn_plan_scratch_bytes(p);
    attn_plan_destroy(p);
    ck_assert(b150 > 0 && b2k > b150);
    ck_assert_msg(b4k <= 2 * b2k + 1024, "scratch %zu vs %zu", b4k, b2k);
    ck_assert(b4k < (size_t)4096 * 4096 * sizeof(float));
    free(x), free(y1), free(y2);
    layer_free(&L);
}
END_TEST

/* attn_plan_item_bytes bounds what a plan holds per sequence or raw item
 * beside the batch's scratch: a raw plan's whole scratch (its items' q
 * times scale) and every tile of either plan but the projection and
 * output grids (7 ints each). */
START_TEST(plan_item_bytes_bound_the_plan)
{
    tu_rng g = {5};
    layer L;
    layer_init(&L, &g, 32, 4, 4, 8, 8);
    enum { N = 5, T = 300 };
    float *x = tu_randn(&g, (size_t)N * T * 32, 1.0f);
    float *y = tu_fill((size_t)N * T * 32, 0);
    attn_seq s[N];
    attn_raw r[N];
    attn_config rc = {.n_heads = 2, .n_kv_heads = 2, .head_dim = 7,
                      .v_head_dim = 5, .d_model = 7, .d_model_ctx = 7};
    char err[ATTN_ERRMAX];
    attn_plan *p;
    memset(s, 0, sizeof s);
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        int t = i == 0 ? 1 : T - i; /* one a carve rounds up */
        s[i] = (attn_seq){.t = t, .s = t, .t_valid = t, .s_valid = t,
                          .x = x + (size_t)i * T * 32, .y = y + (size_t)i * T * 32};
        r[i] = (attn_raw){.t = t, .s = t, .q = x, .k = x, .v = x, .y = y};
    }
    size_t per = 0;
    for (int i = 0; i < N; i++)
        per += attn_plan_item_bytes(&rc, r[i].t, r[i].s, 1);
    ck_assert(attn_plan_create_raw(&p, &rc, r, N, err) == 0);
    ck_assert_uint_le(attn_plan_scratch_bytes(p) +
                          attn_plan_n_tiles(p, 0) * 7 * sizeof(int) +
                          N * (sizeof(int) + sizeof(float *)),
                      per);
    attn_plan_destroy(p);
    per = 0;
    for (int i = 0; i < N; i++)
        per += attn_plan_item_bytes(&L.c, s[i].t, s[i].s, 0);
    ck_assert(attn_plan_create(&p, &L.c, &L.w, s, N, err) == 0);
    /* stage 0 gathers, stage 2 attends (1 and 3: the grids) */
    ck_assert_int_eq(attn_plan_n_stages(p), 4);
    ck_assert_uint_le((attn_plan_n_tiles(p, 0) + attn_plan_n_tiles(p, 2)) *
                              7 * sizeof(int) + N * sizeof(int),
                      per);
    attn_plan_destroy(p);
    ck_assert_uint_eq(attn_plan_item_bytes(&rc, -1, 1, 1), SIZE_MAX);
    ck_assert_uint_eq(attn_plan_item_bytes(NULL, 1, 1, 0), SIZE_MAX);
    ck_assert_uint_lt(attn_plan_item_bytes(&rc, 1 << 30, 1 << 30, 1), SIZE_MAX);
    free(x), free(y);
    layer_free(&L);
}
END_TEST

/* A layer big enough to go through the executor gives bit-identical
 * results on it and inline (tiles are deterministic, whoever runs them). */
START_TEST(executor_matches_inline)
{
    tu_rng g = {31337};
    layer L;
    layer_init(&L, &g, 64, 4, 2, 16, 16);
    L.c.rope_theta = 10000.0f;
    int t = 300;
    float *x = tu_randn(&g, (size_t)2 * t * 64, 1.0f);
    float *y1 = tu_fill((size_t)2 * t * 64, NAN);
    float *y2 = tu_fill((size_t)2 * t * 64, NAN);
    attn_seq s[2];
    for (int b = 0; b < 2; b++)
        s[b] = (attn_seq){.t = t,
                          .s = t,
                          .t_valid = t - 7 * b,
                          .s_valid = t,
                          .causal = b,
                          .x = x + (size_t)b * t * 64,
                          .y = y1 + (size_t)b * t * 64};
    char err[ATTN_ERRMAX];
    attn_plan *p;
    ck_assert(attn_plan_create(&p, &L.c, &L.w, s, 2, err) == 0);
    ck_assert(attn_plan_flops(p) > 1e7);
    attn_plan_run(p, tu_ex);
    attn_plan_destroy(p);
    for (int b = 0; b < 2; b++)
        s[b].y = y2 + (size_t)b * t * 64;
    ck_assert(attn_forward(&L.c, &L.w, s, 2, NULL, err) == 0);
    ck_assert(memcmp(y1, y2, sizeof(float) * 2 * t * 64) == 0);
    free(x), free(y1), free(y2);
    layer_free(&L);
}
END_TEST

static Suite *attn_props_suite(void)
{
    Suite *s = suite_create("attn_props");
    TCase *tc = tcase_create("properties");
    tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown);
    tcase_add_loop_test(tc, prop_softmax_rows_and_convexity, 0, 4);
    tcase_add_loop_test(tc, prop_fused_equals_maps, 0, 4);
    tcase_add_test(tc, prop_permutation_equivariance);
    tcase_add_test(tc, prop_padding_and_batching);
    tcase_add_test(tc, prop_overflow_is_flagged_per_item);
    tcase_add_test(tc, prop_overflow_in_scores_output_is_flagged);
    tcase_add_loop_test(tc, prop_fused_values_near_flt_max, 0, 2);
    tcase_add_test(tc, plan_tiles_any_order_and_linear_memory);
    tcase_add_test(tc, plan_item_bytes_bound_the_plan);
    tcase_add_test(tc, executor_matches_inline);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(attn_props_suite)

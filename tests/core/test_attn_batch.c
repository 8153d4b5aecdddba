/*
 * test_attn_batch.c - batch invariance of the engine (core/attn.c's
 * put_grid, tiles.c): every output of a sequence (y, attention, scores,
 * q, k, v) has the same bits whether it runs alone or in a batch with
 * any other sequences, stateless or decoder steps. (test_attn.c and
 * test_attn_props.c test the rest of attn.c, split to stay small; the
 * kernel's row property is in test_kernel.c.)
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/kernel.h"
#include "core/kv.h"
#include "testutil.h"
#include "tests/check_main.h"

#define MAXB 8
/* d_model: at 512 OpenBLAS's SkylakeX/Cooperlake kernels give a row of
 * a call of 31 rows or more other bits than the row alone, its Haswell
 * ones from 4 rows (at 256 the former did not differ on these cases) */
#define DM 512

/* One sequence of a case: t query rows (0 ends the list), past tokens of
 * a K/V cache before the step (-1: stateless), causal, masked, t_valid
 * short by pad rows. */
typedef struct req {
    int t, past, causal, masked, pad;
} req;

/* Cases: identical requests (the report's 8 x 16 tokens); lengths around
 * SKINNY_MAX_ROWS (48) and PROJ_ROWS (256: 300 = 256 + 44, the second
 * block skinny alone too); decoder steps (one token, the kv-head group
 * tiles; 20 tokens) beside stateless requests. */
static const req cases[][MAXB] = {
    {{16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {16, -1, 1, 0, 0}},
    {{1, -1, 0, 0, 0},
     {16, -1, 1, 0, 0},
     {47, -1, 0, 1, 0},
     {49, -1, 1, 0, 3},
     {300, -1, 1, 0, 0},
     {5, -1, 0, 0, 0},
     {1, -1, 1, 0, 0}},
    {{1, 10, 1, 0, 0},
     {16, -1, 1, 0, 0},
     {20, 30, 1, 0, 0},
     {49, -1, 0, 0, 0},
     {1, 3, 1, 0, 0},
     {2, -1, 0, 0, 0}},
};

/* A sequence's outputs (NaN until written) and its cache. */
typedef struct outs {
    float *y, *att, *sc, *q, *k, *v;
    uint8_t *mask;
    attn_kv kv;
} outs;

static void outs_init(outs *o, const attn_config *c, const req *r,
                      attn_kv_pool *pool)
{
    int s = r->past >= 0 ? r->past + r->t : r->t;
    size_t t = (size_t)r->t, H = (size_t)c->n_heads, Hk = (size_t)c->n_kv_heads;
    o->y = tu_fill(t * (size_t)c->d_model, NAN);
    o->att = tu_fill(H * t * (size_t)s, NAN);
    o->sc = tu_fill(H * t * (size_t)s, NAN);
    o->q = tu_fill(H * t * (size_t)c->head_dim, NAN);
    o->k = tu_fill(Hk * (size_t)s * (size_t)c->head_dim, NAN);
    o->v = tu_fill(Hk * (size_t)s * (size_t)c->v_head_dim, NAN);
    o->mask = NULL;
    if (r->masked) {
        o->mask = malloc(t * (size_t)s);
        ck_assert_ptr_nonnull(o->mask);
        for (size_t i = 0; i < t * (size_t)s; i++)
            o->mask[i] = (uint8_t)((i * 7 + 3) % 5 != 0);
    }
    attn_kv_init(&o->kv, pool);
}

static void outs_free(outs *o)
{
    free(o->y), free(o->att), free(o->sc), free(o->q), free(o->k);
    free(o->v), free(o->mask);
    attn_kv_free(&o->kv);
}

/* The attn_seq of request r with input x and outputs o; a decoder step's
 * cache gets its past tokens first (a pass alone, the same in both
 * caches) and room for the step. */
static attn_seq seq_of(const layer *L, const req *r, const float *x,
                       const float *prefix, outs *o)
{
    char err[ATTN_ERRMAX];
    int kvs = r->past >= 0, s = kvs ? r->past + r->t : r->t;
    if (kvs && r->past > 0) {
        float *yp = tu_fill((size_t)r->past * (size_t)L->c.d_model, NAN);
        ck_assert_int_eq(attn_kv_reserve(&o->kv, r->past, err), 0);
        attn_seq p = {.t = r->past,
                      .s = r->past,
                      .t_valid = r->past,
                      .s_valid = r->past,
                      .causal = 1,
                      .x = prefix,
                      .y = yp,
                      .kv = &o->kv};
        ck_assert_msg(attn_forward(&L->c, &L->w, &p, 1, NULL, err) == 0, "%s",
                      err);
        attn_kv_advance(&o->kv, r->past);
        free(yp);
    }
    if (kvs)
        ck_assert_int_eq(attn_kv_reserve(&o->kv, r->t, err), 0);
    return (attn_seq){.t = r->t,
                      .s = s,
                      .t_valid = r->t - r->pad,
                      .s_valid = s - (kvs ? 0 : r->pad),
                      .causal = r->causal,
                      .x = x,
                      .mask = o->mask,
                      .y = o->y,
                      .attention = o->att,
                      .scores = o->sc,
                      .q = o->q,
                      .k = kvs ? NULL : o->k,
                      .v = kvs ? NULL : o->v,
                      .kv = kvs ? &o->kv : NULL};
}

static void same_bits(const char *what, int b, const float *x, const float *y,
                      size_t n)
{
    ck_assert_msg(memcmp(x, y, n * sizeof(float)) == 0,
                  "request %d: %s alone and batched differ", b, what);
}

/* Case i / 2 alone and batched, weights as rows (i even) or column
 * panels (i odd): the same bits. */
static void same_bits_case(int i)
{
    const req *rq = cases[i / 2];
    tu_rng g = {9000u + (unsigned)i};
    layer L;
    layer_init(&L, &g, DM, 4, 2, 64, 64);
    L.c.rope_theta = 10000.0f;
    char err[ATTN_ERRMAX];
    if (i % 2) {
        float *m[4] = {L.wq, L.wk, L.wv, L.wo};
        ck_assert_int_eq(attn_weights_to_panels(&L.c, m, err), 0);
        L.w.layout = ATTN_PANELS;
    }
    attn_kv_pool *pool;
    ck_assert_int_eq(
        attn_kv_pool_create(&pool, &L.c, ATTN_KV_F32, 0, 1 << 26, err), 0);
    int n = 0;
    while (n < MAXB && rq[n].t)
        n++;
    outs one[MAXB], all[MAXB];
    attn_seq s1[MAXB], sb[MAXB];
    float *x[MAXB], *pre[MAXB];
    for (int b = 0; b < n; b++) {
        /* case 0: the same x in every request */
        tu_rng gx = {i / 2 == 0 ? 1u : 100u + (unsigned)b};
        x[b] = tu_randn(&gx, (size_t)rq[b].t * DM, 1.0f);
        pre[b] =
            tu_randn(&gx, (size_t)(rq[b].past > 0 ? rq[b].past : 1) * DM, 1.0f);
        outs_init(&one[b], &L.c, &rq[b], pool);
        outs_init(&all[b], &L.c, &rq[b], pool);
        s1[b] = seq_of(&L, &rq[b], x[b], pre[b], &one[b]);
        sb[b] = seq_of(&L, &rq[b], x[b], pre[b], &all[b]);
    }
    for (int b = 0; b < n; b++)
        ck_assert_msg(attn_forward(&L.c, &L.w, &s1[b], 1, NULL, err) == 0, "%s",
                      err);
    ck_assert_msg(attn_forward(&L.c, &L.w, sb, n, tu_ex, err) == 0, "%s", err);
    for (int b = 0; b < n; b++) {
        size_t t = (size_t)rq[b].t, s = (size_t)s1[b].s;
        same_bits("q", b, one[b].q, all[b].q, 4 * t * 64);
        if (rq[b].past < 0) {
            same_bits("k", b, one[b].k, all[b].k, 2 * s * 64);
            same_bits("v", b, one[b].v, all[b].v, 2 * s * 64);
        }
        same_bits("scores", b, one[b].sc, all[b].sc, 4 * t * s);
        same_bits("attention", b, one[b].att, all[b].att, 4 * t * s);
        same_bits("y", b, one[b].y, all[b].y, t * DM);
    }
    for (int b = 0; b < n; b++) {
        outs_free(&one[b]), outs_free(&all[b]);
        free(x[b]), free(pre[b]);
    }
    attn_kv_pool_destroy(pool);
    layer_free(&L);
}

/* loop: case _i / 2, weights as rows (even) or column panels (odd) */
START_TEST(batched_same_bits_as_alone)
{
    same_bits_case(_i);
}
END_TEST

/* the same on this CPU made to look like one without AVX-512: the small
 * requests' blocks go through attn__rows_fma's AVX2 path instead of the
 * skinny kernel (and small_attn.c's kernels decline too) */
START_TEST(batched_same_bits_without_avx512)
{
    attn__avx512_off(1);
    same_bits_case(_i);
    attn__avx512_off(0);
}
END_TEST

#define WD 480 /* the case below: d_model */

/* A shape the skinny kernel does not take (d_model 480, 6 heads of 80:
 * panels of 240 columns, not a multiple of 32), with AVX-512 (loop 0) and
 * without (1): every request past SKINNY_MAX_ROWS rows has GEMMs of its
 * own, as alone; the runs of small ones between them share blocks that
 * go through attn__rows_fma (AVX2 here) whatever their rows: the same
 * bits for all. Before attn__rows_fma those blocks were OpenBLAS calls
 * over each run, and the requests of 16 and 20 rows (in a run of 81)
 * differed with its Haswell and Cooperlake kernels. With all of them in
 * one set of blocks (invariance off) the 300-row request differs with
 * OpenBLAS's Cooperlake kernels, every large one with its Haswell ones. */
START_TEST(batched_same_bits_without_skinny)
{
    attn__avx512_off(_i);
    tu_rng g = {31337};
    layer L;
    layer_init(&L, &g, WD, 6, 2, 80, 80);
    char err[ATTN_ERRMAX];
    enum { N = 8 };
    int ts[N] = {1, 60, 16, 20, 5, 40, 70, 300};
    float *x[N], *y1[N], *yb[N];
    attn_seq s1[N], sb[N];
    for (int b = 0; b < N; b++) {
        x[b] = tu_randn(&g, (size_t)ts[b] * WD, 1.0f);
        y1[b] = tu_fill((size_t)ts[b] * WD, NAN);
        yb[b] = tu_fill((size_t)ts[b] * WD, NAN);
        s1[b] = (attn_seq){.t = ts[b],
                           .s = ts[b],
                           .t_valid = ts[b],
                           .s_valid = ts[b],
                           .causal = 1,
                           .x = x[b],
                           .y = y1[b]};
        sb[b] = s1[b];
        sb[b].y = yb[b];
        ck_assert(attn_forward(&L.c, &L.w, &s1[b], 1, NULL, err) == 0);
    }
    ck_assert(attn_forward(&L.c, &L.w, sb, N, tu_ex, err) == 0);
    for (int b = 0; b < N; b++) {
        same_bits("y", b, y1[b], yb[b], (size_t)ts[b] * WD);
        free(x[b]), free(y1[b]), free(yb[b]);
    }
    layer_free(&L);
    attn__avx512_off(0);
}
END_TEST

/* every case with attn_batch_invariant on (the engine's default is off) */
static void invariant_on(void)
{
    attn_batch_invariant(1);
}

static void invariant_off(void)
{
    attn_batch_invariant(0);
}

static Suite *attn_batch_suite(void)
{
    Suite *s = suite_create("attn_batch");
    TCase *tc = tcase_create("invariance");
    tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown);
    tcase_add_checked_fixture(tc, invariant_on, invariant_off);
    tcase_add_loop_test(tc, batched_same_bits_as_alone, 0,
                        2 * (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, batched_same_bits_without_avx512, 0,
                        2 * (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, batched_same_bits_without_skinny, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(attn_batch_suite)

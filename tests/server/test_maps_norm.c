/* test_maps_norm.c - what=norm's value norms (server/maps_norm.c): worked
 * by hand on a 2-head layer, the same from a row-major W_o and from its
 * column panels (d_model 300: panels of 256 and 44), kept in the store
 * (counted in its bytes) and weighed into the cells (one head, the
 * heads' mean). Expected values are worked by hand in the comments,
 * never produced by the code under test. The Gram matrices an instance
 * keeps (maps_grams) give maps_vo_norms' norms bit for bit, are made
 * once (by one of several threads at once), each instance its own, and
 * when they cannot be allocated the norms are still made. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps.h"
#include "server/maps_norm.h"
#include "tests/check_main.h"
#include "tests/fail_alloc.h"

/* d_model 2, 2 heads of d_v 1, one kv head: W_o's rows are head 0's
 * (3, 4) and head 1's (0, 2); v = (1), (-2) for keys 0 and 1. Head 0:
 * |1 * (3, 4)| = 5, |-2 * (3, 4)| = 10; head 1: |1 * (0, 2)| = 2,
 * |-2 * (0, 2)| = 4. A second item with s_valid 1: key 1 is 0. */
START_TEST(test_by_hand)
{
    attn_config c = {.d_model = 2, .n_heads = 2, .n_kv_heads = 1,
                     .head_dim = 1, .v_head_dim = 1};
    const float wo[4] = {3, 4, 0, 2};
    attn_weights w = {.w_o = wo};
    const float v[4] = {1, -2, 1, -2};
    const int32_t sv[2] = {2, 1};
    const float want[8] = {5, 10, 2, 4, 5, 0, 2, 0};
    float out[8];
    int k;

    ck_assert_int_eq(maps_vo_norms(&c, &w, v, 2, 2, sv, out), 0);
    for (k = 0; k < 8; k++)
        ck_assert_float_eq(out[k], want[k]);
    /* sdpa: |(3, 4)| = 5, |(0, -1)| = 1 */
    const float rows[4] = {3, 4, 0, -1};
    maps_v_norms(rows, 2, 2, out);
    ck_assert_float_eq(out[0], 5.0f);
    ck_assert_float_eq(out[1], 1.0f);
}
END_TEST

/* The same norms whether W_o is row-major or in attn.h's panels, with
 * GQA (4 query heads on 2 kv heads), and each one |v W_O^h| summed here
 * in the plain way (v W_O^h, then its length; maps_vo_norms goes through
 * the Gram matrix: the last bits may differ, 1e-6 relative). */
START_TEST(test_panels)
{
    attn_config c = {.d_model = 300, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 3, .v_head_dim = 5};
    size_t nq = 300 * 12, nk = 300 * 10, no = 20 * 300;
    float *m[4] = {calloc(nq, 4), calloc(nk, 4), calloc(nk, 4),
                   malloc(no * 4)};
    float *ref = malloc(no * 4), v[2 * 3 * 5], a[4 * 3], b[4 * 3];
    char err[ATTN_ERRMAX];
    size_t k;
    int h, j, q, d;

    ck_assert_int_eq(attn_config_check(&c, err), 0);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_O), 256);
    for (k = 0; k < no; k++)
        m[3][k] = ref[k] = (float)((int)(k * 7919 % 201) - 100) / 100.0f;
    for (k = 0; k < sizeof(v) / sizeof(*v); k++)
        v[k] = (float)((int)(k * 31 % 17) - 8) / 8.0f;
    attn_weights w = {.w_q = m[0], .w_k = m[1], .w_v = m[2], .w_o = m[3]};
    ck_assert_int_eq(maps_vo_norms(&c, &w, v, 1, 3, NULL, a), 0);
    ck_assert_int_eq(attn_weights_to_panels(&c, m, err), 0);
    w.layout = ATTN_PANELS;
    ck_assert(memcmp(m[3], ref, no * 4) != 0); /* W_o did change layout */
    ck_assert_int_eq(maps_vo_norms(&c, &w, v, 1, 3, NULL, b), 0);
    for (h = 0; h < 4; h++)
        for (j = 0; j < 3; j++) {
            double sum = 0;
            for (q = 0; q < 300; q++) {
                double x = 0;
                for (d = 0; d < 5; d++)
                    x += (double)v[((h / 2) * 3 + j) * 5 + d] *
                         ref[(size_t)(h * 5 + d) * 300 + (size_t)q];
                sum += x * x;
            }
            ck_assert_float_eq(a[h * 3 + j], b[h * 3 + j]);
            ck_assert_double_eq_tol(a[h * 3 + j], sqrt(sum), 1e-6 * sqrt(sum));
            ck_assert(sum > 1.0); /* no key's norm is near 0 here */
        }
    for (k = 0; k < 4; k++)
        free(m[k]);
    free(ref);
}
END_TEST

/* A map keeps its norms (1 item x 2 heads x 2 keys x 4 bytes = 16 more
 * bytes) and weighs its cells: weights (0.25,
 * 0.75) and (1, 0) by norms (4, 2) and (1, 3): head 0 (1, 1.5), head 1
 * (1, 0), their mean (1, 0.75). */
START_TEST(test_store_and_cells)
{
    maps_store *st;
    char id[MAPS_ID_MAX], id2[MAPS_ID_MAX], err[ATTN_ERRMAX];
    const float att[4] = {0.25f, 0.75f, 1.0f, 0.0f}, vn[4] = {4, 2, 1, 3};
    maps_put_args a = {.model = "m", .b = 1, .h = 2, .t = 1, .s = 2,
                       .attention = att};
    maps_info i0, i1;
    float *out;
    int rows, cols;

    ck_assert_int_eq(maps_store_create(&st, 1 << 20), 0);
    ck_assert_int_eq(maps_put(st, &a, id, err), 0);
    ck_assert_int_eq(maps_slice_of(st, id, MAPS_NORM, 0, 0, 0, &out, &rows,
                                   &cols, NULL, NULL, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "keeps no value norms"));
    a.vnorm = vn;
    a.norm_of = 7;
    ck_assert_int_eq(maps_put(st, &a, id2, err), ATTN_EINVAL);
    a.norm_of = MAPS_NORM_VO;
    ck_assert_int_eq(maps_put(st, &a, id2, err), 0);
    ck_assert_int_eq(maps_info_get(st, id, &i0), 0);
    ck_assert_int_eq(maps_info_get(st, id2, &i1), 0);
    ck_assert_uint_eq(i1.bytes, i0.bytes + 16);
    ck_assert_int_eq(i0.norm_of, MAPS_NORM_NONE);
    ck_assert_int_eq(i1.norm_of, MAPS_NORM_VO);
    ck_assert_int_eq(maps_slice_of(st, id2, MAPS_NORM, 0, 0, 0, &out, &rows,
                                   &cols, NULL, NULL, err), 0);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 1.5f);
    free(out);
    ck_assert_int_eq(maps_slice_of(st, id2, MAPS_NORM, 0, -1, 0, &out, &rows,
                                   &cols, NULL, NULL, err), 0);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 0.75f);
    free(out);
    maps_store_destroy(st);
}
END_TEST

/* ---- the Gram matrices an instance keeps (maps_grams) ------------------ */

/* A layer of d_model 300, 4 query heads on 2 kv heads of d_v 5 (W_o
 * 20 x 300); its W_o's values from seed (the others 0, unused). */
enum { DM = 300, NH = 4, DV = 5, NO = NH * DV * DM };
static const attn_config gc = {.d_model = DM, .n_heads = NH, .n_kv_heads = 2,
                               .head_dim = 3, .v_head_dim = DV};

typedef struct layer {
    float *m[4];
    attn_weights w;
} layer;

/* layer_make: a layer of c (gc unless the test says) */
static void layer_make(layer *l, const attn_config *c, unsigned seed,
                       int panels)
{
    size_t dm = (size_t)c->d_model, kv = (size_t)c->n_kv_heads;
    size_t no = (size_t)c->n_heads * (size_t)c->v_head_dim * dm, k;
    char err[ATTN_ERRMAX];

    l->m[0] = calloc(dm * (size_t)c->n_heads * (size_t)c->head_dim, 4);
    l->m[1] = calloc(dm * kv * (size_t)c->head_dim, 4);
    l->m[2] = calloc(dm * kv * (size_t)c->v_head_dim, 4);
    l->m[3] = malloc(no * 4);
    ck_assert(l->m[0] && l->m[1] && l->m[2] && l->m[3]);
    for (k = 0; k < no; k++)
        l->m[3][k] = (float)((int)(k * seed % 201) - 100) / 100.0f;
    if (panels)
        ck_assert_int_eq(attn_weights_to_panels(c, l->m, err), 0);
    memset(&l->w, 0, sizeof l->w);
    l->w.w_q = l->m[0], l->w.w_k = l->m[1], l->w.w_v = l->m[2];
    l->w.w_o = l->m[3];
    l->w.layout = panels ? ATTN_PANELS : ATTN_ROWS;
}

static void layer_free(layer *l)
{
    for (int k = 0; k < 4; k++)
        free(l->m[k]);
}

/* 2 items x 2 kv heads x 3 keys x d_v 5 values from seed; the second
 * item's third key is past its length */
enum { NV = 2 * 2 * 3 * DV, NOUT = 2 * NH * 3 };
static const int32_t gsv[2] = {3, 2};

static void values(float *v, unsigned seed)
{
    for (int k = 0; k < NV; k++)
        v[k] = (float)((int)((unsigned)k * seed % 17) - 8) / 8.0f;
}

/* Two instances (one row-major, one in panels) with different W_o, each
 * its own cache: each gives maps_vo_norms' norms of its own weights bit
 * for bit, for one set of values and then another, its matrices made
 * once (4 heads x 5 x 5 doubles: 800 bytes, none before). They are kept:
 * once the first one's W_o is changed in place, maps_vo_norms gives other
 * norms, its cache still those of the W_o it was made from. */
START_TEST(test_grams_kept_apart)
{
    layer l1, l2;
    maps_grams *g1, *g2;
    float v[NV], ref1[NOUT], ref2[NOUT], a1[NOUT], a2[NOUT];
    size_t k;

    layer_make(&l1, &gc, 7919, 0);
    layer_make(&l2, &gc, 104729, 1);
    ck_assert_int_eq(maps_grams_create(&g1, &gc, &l1.w), 0);
    ck_assert_int_eq(maps_grams_create(&g2, &gc, &l2.w), 0);
    ck_assert_uint_eq(maps_grams_bytes(&gc), 800);
    ck_assert_uint_eq(maps_grams_held(g1), 0);
    ck_assert_uint_eq(maps_grams_held(NULL), 0);
    ck_assert_int_eq(maps__grams_made(g1), 0);
    for (unsigned seed = 31; seed <= 37; seed += 6) {
        values(v, seed);
        ck_assert_int_eq(maps_vo_norms(&gc, &l1.w, v, 2, 3, gsv, ref1), 0);
        ck_assert_int_eq(maps_vo_norms(&gc, &l2.w, v, 2, 3, gsv, ref2), 0);
        ck_assert_int_eq(maps_grams_norms(g1, v, 2, 3, gsv, a1), 0);
        ck_assert_int_eq(maps_grams_norms(g2, v, 2, 3, gsv, a2), 0);
        ck_assert(memcmp(a1, ref1, sizeof a1) == 0);
        ck_assert(memcmp(a2, ref2, sizeof a2) == 0);
        ck_assert(memcmp(ref1, ref2, sizeof ref1) != 0);
        ck_assert_float_eq(a1[NH * 3 + 2], 0.0f); /* past item 1's length */
        ck_assert(a1[0] > 0.0f);
    }
    ck_assert_int_eq(maps__grams_made(g1), 1);
    ck_assert_int_eq(maps__grams_made(g2), 1);
    ck_assert_uint_eq(maps_grams_held(g1), 800);
    ck_assert_uint_eq(maps_grams_held(g2), 800);

    for (k = 0; k < NO; k++) /* another W_o under the same pointer */
        l1.m[3][k] = (float)((int)(k * 3 % 101) - 50) / 50.0f;
    ck_assert_int_eq(maps_vo_norms(&gc, &l1.w, v, 2, 3, gsv, ref2), 0);
    ck_assert(memcmp(ref2, ref1, sizeof ref1) != 0);
    ck_assert_int_eq(maps_grams_norms(g1, v, 2, 3, gsv, a1), 0);
    ck_assert(memcmp(a1, ref1, sizeof a1) == 0);
    ck_assert_int_eq(maps__grams_made(g1), 1);
    maps_grams_destroy(g1);
    maps_grams_destroy(g2);
    maps_grams_destroy(NULL);
    layer_free(&l1);
    layer_free(&l2);
}
END_TEST

enum { NT = 4 };
typedef struct racer {
    maps_grams *g;
    pthread_barrier_t *go;
    const float *v;
    float out[NOUT];
    int rc;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->rc = maps_grams_norms(r->g, r->v, 2, 3, gsv, r->out);
    return NULL;
}

/* NT threads ask a new cache at once (pool threads retaining on one
 * instance): the matrices are made once, every thread gets maps_vo_norms'
 * norms bit for bit (under TSan: no data race). Its layer, d_model 1024
 * with 4 heads of 32 on 2 kv heads (2M multiply-adds to make them), keeps
 * the first thread making them while the others come (its 4 heads give
 * NOUT norms, as gc's). */
static const attn_config gc_big = {.d_model = 1024, .n_heads = 4,
                                   .n_kv_heads = 2, .head_dim = 32,
                                   .v_head_dim = 32};
enum { NVB = 2 * 2 * 3 * 32 };
START_TEST(test_grams_threads)
{
    layer l;
    maps_grams *g;
    pthread_barrier_t go;
    pthread_t th[NT];
    racer r[NT];
    float v[NVB], ref[NOUT];
    int i;

    layer_make(&l, &gc_big, 7919, 1);
    for (i = 0; i < NVB; i++)
        v[i] = (float)((i * 31 % 17) - 8) / 8.0f;
    ck_assert_int_eq(maps_vo_norms(&gc_big, &l.w, v, 2, 3, gsv, ref), 0);
    ck_assert_int_eq(maps_grams_create(&g, &gc_big, &l.w), 0);
    ck_assert_int_eq(pthread_barrier_init(&go, NULL, NT), 0);
    for (i = 0; i < NT; i++) {
        r[i] = (racer){.g = g, .go = &go, .v = v, .rc = -1};
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(r[i].rc, 0);
        ck_assert(memcmp(r[i].out, ref, sizeof ref) == 0);
    }
    ck_assert_int_eq(maps__grams_made(g), 1);
    pthread_barrier_destroy(&go);
    maps_grams_destroy(g);
    layer_free(&l);
}
END_TEST

/* Out of memory (tests/fail_alloc.h; the sanitizer builds only run it
 * through): a cache that cannot be made is none; one whose matrices
 * cannot be allocated (the call's first allocation) still gives the
 * norms, bit for bit, made for the call (no block left), keeps none, and
 * the next call makes them. */
START_TEST(test_grams_nomem)
{
    layer l;
    maps_grams *g = (maps_grams *)&g;
    float v[NV], ref[NOUT], out[NOUT];
    long before;

    layer_make(&l, &gc, 7919, 0);
    values(v, 31);
    ck_assert_int_eq(maps_vo_norms(&gc, &l.w, v, 2, 3, gsv, ref), 0);
    calls = 0;
    fail_at = 1;
    ck_assert_int_eq(maps_grams_create(&g, &gc, &l.w), FAILING ? ATTN_ENOMEM : 0);
    fail_at = 0;
    if (FAILING)
        ck_assert_ptr_null(g);
    maps_grams_destroy(g);
    ck_assert_int_eq(maps_grams_create(&g, &gc, &l.w), 0);
    before = held;
    calls = 0;
    fail_at = 1;
    memset(out, 0xff, sizeof out);
    ck_assert_int_eq(maps_grams_norms(g, v, 2, 3, gsv, out), 0);
    fail_at = 0;
    ck_assert(memcmp(out, ref, sizeof ref) == 0);
    ck_assert_int_eq(held, before);
    ck_assert_int_eq(maps__grams_made(g), FAILING ? 0 : 1);
    ck_assert_uint_eq(maps_grams_held(g), FAILING ? 0 : 800);
    memset(out, 0xff, sizeof out);
    ck_assert_int_eq(maps_grams_norms(g, v, 2, 3, gsv, out), 0);
    ck_assert(memcmp(out, ref, sizeof ref) == 0);
    ck_assert_int_eq(maps__grams_made(g), 1);
    ck_assert_uint_eq(maps_grams_held(g), 800);
    maps_grams_destroy(g);
    layer_free(&l);
}
END_TEST

static Suite *maps_norm_suite(void)
{
    Suite *s = suite_create("maps_norm");
    TCase *tc = tcase_create("norm");

    tcase_add_test(tc, test_by_hand);
    tcase_add_test(tc, test_panels);
    tcase_add_test(tc, test_store_and_cells);
    tcase_add_test(tc, test_grams_kept_apart);
    tcase_add_test(tc, test_grams_threads);
    tcase_add_test(tc, test_grams_nomem);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(maps_norm_suite)

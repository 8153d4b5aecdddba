/* test_maps_norm.c - what=norm's value norms (server/maps_norm.c): worked
 * by hand on a 2-head layer, the same from a row-major W_o and from its
 * column panels (d_model 300: panels of 256 and 44), kept in the store
 * (counted in its bytes) and weighed into the cells (one head, the
 * heads' mean). Expected values are worked by hand in the comments,
 * never produced by the code under test. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "server/maps.h"
#include "server/maps_norm.h"
#include "tests/check_main.h"

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

static Suite *maps_norm_suite(void)
{
    Suite *s = suite_create("maps_norm");
    TCase *tc = tcase_create("norm");

    tcase_add_test(tc, test_by_hand);
    tcase_add_test(tc, test_panels);
    tcase_add_test(tc, test_store_and_cells);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(maps_norm_suite)

/*
 * test_check.c - core/check.c through the public API: bad configurations,
 * sequences and raw items (H_kv not dividing H, zero sizes, size products
 * that overflow, NULL buffers) return the right code with a message naming
 * the field, never crash, and leave *out NULL.
 */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/check_main.h"

#define EXPECT_ERR(call, code, word)                                           \
    do {                                                                       \
        char e_[ATTN_ERRMAX] = "";                                             \
        int rc_ = (call);                                                      \
        ck_assert_msg(rc_ == (code), "%s: got %d (%s)", #call, rc_, e_);       \
        ck_assert_msg(strstr(e_, (word)) != NULL,                              \
                      "message \"%s\" does not name %s", e_, (word));          \
    } while (0)

START_TEST(bad_config)
{
    attn_config ok = {.d_model = 8,
                      .n_heads = 4,
                      .n_kv_heads = 2,
                      .head_dim = 2,
                      .v_head_dim = 2};
    char err[ATTN_ERRMAX];
    ck_assert_int_eq(attn_config_check(&ok, err), 0);
    attn_config c = ok;
    c.n_kv_heads = 3;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "n_kv_heads");
    c = ok, c.d_model = 0;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "d_model");
    c = ok, c.n_heads = 0;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "n_heads");
    c = ok, c.head_dim = 0;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "head_dim");
    c = ok, c.v_head_dim = -1;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "v_head_dim");
    c = ok, c.rope_theta = 10000, c.rope_dims = 3;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "rope_dims");
    /* RoPE's highest frequency (1e-45: 4e43) or that times a position up
     * to 2^31 (1e-38: 6.5e36 x 2^31) overflows float32: NaN angles */
    c = ok, c.head_dim = 64, c.rope_theta = 1e-45f;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "rope_theta");
    c = ok, c.head_dim = 64, c.rope_theta = 1e-38f;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "overflow float32");
    c = ok, c.head_dim = 64, c.rope_theta = 1e-30f; /* 1.2e29 x 2^31 fits */
    ck_assert_int_eq(attn_config_check(&c, err), 0);
    c = ok, c.head_dim = 64, c.rope_theta = 1e-45f, c.rope_dims = 2;
    ck_assert_int_eq(attn_config_check(&c, err), 0); /* freq_0 = 1 only */
    c = ok, c.scale = NAN;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EINVAL, "scale");
    c = ok, c.n_heads = 65536, c.n_kv_heads = 1, c.head_dim = 65536;
    EXPECT_ERR(attn_config_check(&c, e_), ATTN_EOVERFLOW, "head_dim");
    EXPECT_ERR(attn_config_check(NULL, e_), ATTN_EINVAL, "config");
    ck_assert_int_eq(attn_config_check(&c, NULL), ATTN_EOVERFLOW);
}
END_TEST

START_TEST(bad_plan_arguments)
{
    float buf[64] = {0}, y[64];
    attn_config c = {.d_model = 4,
                     .n_heads = 2,
                     .n_kv_heads = 2,
                     .head_dim = 2,
                     .v_head_dim = 2};
    attn_weights w = {buf, buf, buf, buf, NULL, NULL, NULL, NULL, ATTN_ROWS};
    attn_seq ok = {
        .t = 2, .s = 2, .t_valid = 2, .s_valid = 2, .x = buf, .y = y};
    attn_plan *p = (attn_plan *)&c; /* must be reset to NULL on failure */
    attn_seq s = ok;
    s.t = 0;
    EXPECT_ERR(attn_plan_create(&p, &c, &w, &s, 1, e_), ATTN_EINVAL,
               "seqs[0].t");
    ck_assert_ptr_null(p);
    s = ok, s.s = 3;
    EXPECT_ERR(attn_forward(&c, &w, &s, 1, NULL, e_), ATTN_EINVAL, "seqs[0].s");
    s = ok, s.t_valid = 3;
    EXPECT_ERR(attn_forward(&c, &w, &s, 1, NULL, e_), ATTN_EINVAL, "t_valid");
    s = ok, s.s_valid = -1;
    EXPECT_ERR(attn_forward(&c, &w, &s, 1, NULL, e_), ATTN_EINVAL, "s_valid");
    s = ok, s.x = NULL;
    EXPECT_ERR(attn_forward(&c, &w, &s, 1, NULL, e_), ATTN_EINVAL, "seqs[0].x");
    attn_seq two[2] = {ok, ok};
    two[1].y = NULL;
    EXPECT_ERR(attn_forward(&c, &w, two, 2, NULL, e_), ATTN_EINVAL,
               "seqs[1].y");
    EXPECT_ERR(attn_forward(&c, &w, NULL, 1, NULL, e_), ATTN_EINVAL,
               "sequence");
    EXPECT_ERR(attn_forward(&c, &w, &ok, 0, NULL, e_), ATTN_EINVAL, "n_seqs");
    attn_weights w2 = w;
    w2.w_v = NULL;
    EXPECT_ERR(attn_forward(&c, &w2, &ok, 1, NULL, e_), ATTN_EINVAL, "w_v");
    EXPECT_ERR(attn_forward(&c, NULL, &ok, 1, NULL, e_), ATTN_EINVAL,
               "weights");
    attn_config c2 = c;
    c2.d_model_ctx = 6;
    EXPECT_ERR(attn_forward(&c2, &w, &ok, 1, NULL, e_), ATTN_EINVAL,
               "d_model_ctx");
    /* H * t * s overflows size_t: nothing may be allocated or touched */
    attn_config big = c;
    big.n_heads = big.n_kv_heads = 1 << 20;
    s = ok, s.t = s.s = s.t_valid = s.s_valid = INT_MAX;
    EXPECT_ERR(attn_forward(&big, &w, &s, 1, NULL, e_), ATTN_EOVERFLOW,
               "seqs[0]");
    /* raw */
    attn_raw r = {.t = 2, .s = 2, .q = buf, .k = buf, .v = buf, .y = y};
    attn_config rc = {.n_heads = 1, .head_dim = 2, .v_head_dim = 2};
    attn_raw rb = r;
    rb.k = NULL;
    EXPECT_ERR(attn_forward_raw(&rc, &rb, 1, NULL, e_), ATTN_EINVAL,
               "items[0].k");
    rb = r, rb.s = 0;
    EXPECT_ERR(attn_forward_raw(&rc, &rb, 1, NULL, e_), ATTN_EINVAL,
               "items[0].s");
    rb = r, rb.t = rb.s = INT_MAX;
    attn_config rbig = rc;
    rbig.n_heads = 1 << 30;
    EXPECT_ERR(attn_forward_raw(&rbig, &rb, 1, NULL, e_), ATTN_EOVERFLOW,
               "items[0]");
    attn_config rc0 = rc;
    rc0.head_dim = 0;
    EXPECT_ERR(attn_forward_raw(&rc0, &r, 1, NULL, e_), ATTN_EINVAL,
               "head_dim");
    EXPECT_ERR(attn_plan_create_raw(NULL, &rc, &r, 1, e_), ATTN_EINVAL, "out");
    /* the NULL plan is inert */
    ck_assert_int_eq(attn_plan_n_stages(NULL), 0);
    ck_assert_uint_eq(attn_plan_n_tiles(NULL, 0), 0);
    attn_plan_run_tile(NULL, 0, 0);
    attn_plan_destroy(NULL);
    ck_assert_str_eq(attn_strerror(ATTN_EOVERFLOW), "size overflow");
}
END_TEST

static Suite *check_suite(void)
{
    Suite *s = suite_create("check");
    TCase *bad = tcase_create("bad_arguments");
    tcase_add_test(bad, bad_config);
    tcase_add_test(bad, bad_plan_arguments);
    suite_add_tcase(s, bad);
    return s;
}

TU_MAIN(check_suite)

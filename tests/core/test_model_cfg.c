/*
 * test_model_cfg.c - a model's config against its weights (split from
 * test_model.c, which holds the layouts' fixtures against PyTorch):
 *   - projections whose widths do not match the heads (W_k not whole
 *     heads, W_v not a multiple of the kv heads, a v_head_dim W_v does
 *     not have) are refused naming the matrix and the numbers;
 *   - a scale or rope theta that is 0 or past float's range as a float,
 *     and a rope theta whose angles overflow float32, are refused naming
 *     the field.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/model.h"
#include "tests/check_main.h"
#include "tests/core/st_build.h"

/* st_f32: a safetensors file of the four canonical matrices (st_build),
 * shapes (in, out) from dims[r] (W_q, W_k, W_v, W_o). */
static unsigned char *st_f32(const int dims[4][2], size_t *len)
{
    spec t[MAX_T] = {{"W_q", dims[0][0], dims[0][1]},
                     {"W_k", dims[1][0], dims[1][1]},
                     {"W_v", dims[2][0], dims[2][1]},
                     {"W_o", dims[3][0], dims[3][1]}};
    return st_build(t, len);
}

/* what model.c adds to an error of weights that disagree with each other */
#define CANON_T                                                              \
    "; the canonical names hold (in, out) weights (Q = X W_q): a PyTorch "   \
    "Linear's weight, (out, in), is W_q transposed (name it q_proj.weight, " \
    "or export with tools/export_torch.py)"

/* The projections' widths against the heads, as an upload can get them
 * wrong: W_k not whole heads, W_v not a multiple of the kv heads, a
 * config's v_head_dim that W_v does not have. Each is refused naming the
 * matrix and the numbers (the engine would read past a head otherwise);
 * a v_head_dim that does match loads with it. */
START_TEST(test_head_widths)
{
    static const struct {
        int dims[4][2];
        const char *cfg, *want;
    } bad[] = {
        {{{8, 8}, {8, 6}, {8, 8}, {8, 8}}, "{\"n_heads\": 2}",
         "up/model.safetensors: W_k (from 'W_k' [8, 6]) has 6 outputs, not a "
         "multiple of head_dim 4" CANON_T},
        {{{8, 8}, {8, 8}, {8, 5}, {8, 8}}, "{\"n_heads\": 2}",
         "up/model.safetensors: W_v (from 'W_v' [8, 5]) has 5 outputs, not a "
         "multiple of n_kv_heads 2" CANON_T},
        {{{8, 8}, {8, 8}, {8, 8}, {8, 8}}, "{\"n_heads\": 2, \"v_head_dim\": 3}",
         "up/model.safetensors: v_head_dim is 3 in the config but W_v (from "
         "'W_v' [8, 8]) has 8 outputs / n_kv_heads 2 = 4"},
    };
    char err[ATTN_ERRMAX];
    size_t len;
    model *m;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *st = st_f32(bad[i].dims, &len);
        int rc = model_load_mem(&m, "up", bad[i].cfg, strlen(bad[i].cfg), st,
                                len, err);
        ck_assert_msg(rc == ATTN_EFORMAT, "case %zu: rc %d (%s)", i, rc,
                      rc ? err : "loaded");
        ck_assert_str_eq(err, bad[i].want);
        free(st);
    }
    /* 2 heads whose values are 6 wide: W_v (8, 12), W_o (12, 8) */
    const int ok[4][2] = {{8, 8}, {8, 8}, {8, 12}, {12, 8}};
    const char *cfg = "{\"n_heads\": 2, \"v_head_dim\": 6}";
    unsigned char *st = st_f32(ok, &len);
    ck_assert_msg(model_load_mem(&m, "up", cfg, strlen(cfg), st, len, err) == 0,
                  "%s", err);
    ck_assert_int_eq(model_config(m)->v_head_dim, 6);
    ck_assert_int_eq(model_config(m)->head_dim, 4);
    model_destroy(m);
    free(st);
}
END_TEST

/* A scale or a rope theta that is positive as written but 0 as a float
 * (below 1.4e-45) was taken, and 0 means "the default" (1/sqrt(head_dim))
 * and "no RoPE": the model served other numbers than its config asked
 * for, silently. Refused, as is one past float's range. */
START_TEST(test_float_range)
{
    static const char *const bad[] = {
        "{\"n_heads\": 2, \"scale\": 1e-50}",
        "{\"n_heads\": 2, \"scale\": 1e39}",
        "{\"n_heads\": 2, \"rope\": {\"theta\": 1e-50}}",
    };
    const int dims[4][2] = {{8, 8}, {8, 8}, {8, 8}, {8, 8}};
    char err[ATTN_ERRMAX];
    size_t len;
    model *m;
    unsigned char *st = st_f32(dims, &len);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = model_load_mem(&m, "up", bad[i], strlen(bad[i]), st, len, err);
        ck_assert_msg(rc == ATTN_EFORMAT, "%s: rc %d (%s)", bad[i], rc,
                      rc ? err : "loaded");
        ck_assert_msg(strstr(err, "a float holds"), "%s: %s", bad[i], err);
    }
    free(st);
}
END_TEST

/* A rope theta so small that RoPE's highest frequency, 1/theta^((rot-2)/rot)
 * in float32, or that frequency times a position up to 2^31, overflows:
 * the angles' cos and sin are NaN, so the model was loaded and every
 * request (theta 1e-45) or every one past some position (1e-40) answered
 * 400 "the inputs overflow float32; scale them down", which no input
 * could help (PyTorch's HF Llama rotary gives NaN). Refused at load,
 * naming rope.theta; one whose angles all fit (1e-20, 10000) loads. */
START_TEST(test_rope_theta_overflow)
{
    static const struct {
        const char *cfg;
        int ok;
    } thetas[] = {
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 1e-45}}", 0},
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 1e-40}}", 0},
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 1e-40, \"dims\": 2}}", 1},
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 1e-20}}", 1},
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 10000}}", 1},
        {"{\"n_heads\": 1, \"rope\": {\"theta\": 3.4e38}}", 1},
    };
    const int dims[4][2] = {{8, 8}, {8, 8}, {8, 8}, {8, 8}}; /* head_dim 8 */
    char err[ATTN_ERRMAX];
    size_t len;
    model *m;
    unsigned char *st = st_f32(dims, &len);
    for (size_t i = 0; i < sizeof thetas / sizeof thetas[0]; i++) {
        const char *c = thetas[i].cfg;
        int rc = model_load_mem(&m, "up", c, strlen(c), st, len, err);
        if (thetas[i].ok) {
            ck_assert_msg(rc == 0, "%s: rc %d (%s)", c, rc, err);
            model_destroy(m);
            continue;
        }
        ck_assert_msg(rc == ATTN_EFORMAT, "%s: rc %d (%s)", c, rc,
                      rc ? err : "loaded");
        ck_assert_msg(strstr(err, "rope.theta") &&
                          strstr(err, "overflow float32") &&
                          strstr(err, "over 8 rotated dims"),
                      "%s: %s", c, err);
    }
    free(st);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_cfg");
    TCase *tc = tcase_create("model_cfg");
    tcase_add_test(tc, test_head_widths);
    tcase_add_test(tc, test_float_range);
    tcase_add_test(tc, test_rope_theta_overflow);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

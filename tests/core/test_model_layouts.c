/*
 * test_model_layouts.c - core/model.c's tensor names (split from
 * test_model.c, which holds the layouts' fixtures against PyTorch):
 *   - two tensors of one layout for the same role (the packed
 *     in_proj_weight beside q/k/v_proj_weight; o_proj.* beside
 *     out_proj.*) are refused naming both, under a prefix too: before,
 *     one was served and the other silently ignored;
 *   - each name alone, and the two names for different roles, still load.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/model.h"
#include "tests/check_main.h"
#include "tests/core/st_build.h"

#define QP4(p)                                                                 \
    {p "q_proj.weight", 8, 8}, {p "k_proj.weight", 8, 8},                      \
        {p "v_proj.weight", 8, 8}

static const struct {
    spec t[MAX_T];
    const char *want;
} both[] = {
    {{{"in_proj_weight", 24, 8}, {"q_proj_weight", 8, 8},
      {"out_proj.weight", 8, 8}},
     "up/model.safetensors: both 'in_proj_weight' and 'q_proj_weight' given "
     "for W_q; keep one layout: the packed in_proj_weight, or q_proj_weight, "
     "k_proj_weight and v_proj_weight"},
    {{{"in_proj_weight", 24, 8}, {"k_proj_weight", 8, 8},
      {"out_proj.weight", 8, 8}},
     "up/model.safetensors: both 'in_proj_weight' and 'k_proj_weight' given "
     "for W_k; keep one layout: the packed in_proj_weight, or q_proj_weight, "
     "k_proj_weight and v_proj_weight"},
    {{{"in_proj_weight", 24, 8}, {"q_proj_weight", 8, 8},
      {"k_proj_weight", 8, 8}, {"v_proj_weight", 8, 8},
      {"out_proj.weight", 8, 8}},
     "up/model.safetensors: both 'in_proj_weight' and 'q_proj_weight' given "
     "for W_q; keep one layout: the packed in_proj_weight, or q_proj_weight, "
     "k_proj_weight and v_proj_weight"},
    {{{"out_proj.weight", 8, 8}, {"in_proj_weight", 24, 8},
      {"v_proj_weight", 8, 8}},
     "up/model.safetensors: both 'in_proj_weight' and 'v_proj_weight' given "
     "for W_v; keep one layout: the packed in_proj_weight, or q_proj_weight, "
     "k_proj_weight and v_proj_weight"},
    {{QP4(""), {"o_proj.weight", 8, 8}, {"out_proj.weight", 8, 8}},
     "up/model.safetensors: both 'o_proj.weight' and 'out_proj.weight' given "
     "for W_o; keep one name: o_proj.weight or out_proj.weight"},
    {{QP4(""), {"o_proj.weight", 8, 8}, {"o_proj.bias", 8, 0},
      {"out_proj.bias", 8, 0}},
     "up/model.safetensors: both 'o_proj.bias' and 'out_proj.bias' given for "
     "b_o; keep one name: o_proj.bias or out_proj.bias"},
    /* found under its prefix on its own; the message names the tensors */
    {{{"attn.in_proj_weight", 24, 8}, {"attn.q_proj_weight", 8, 8},
      {"attn.out_proj.weight", 8, 8}},
     "up/model.safetensors: both 'attn.in_proj_weight' and "
     "'attn.q_proj_weight' given for W_q; keep one layout: the packed "
     "in_proj_weight, or q_proj_weight, k_proj_weight and v_proj_weight"},
    {{QP4("l.3."), {"l.3.out_proj.weight", 8, 8},
      {"l.3.o_proj.weight", 8, 8}},
     "up/model.safetensors: both 'l.3.o_proj.weight' and "
     "'l.3.out_proj.weight' given for W_o; keep one name: o_proj.weight or "
     "out_proj.weight"},
    /* HF names beside the packed one: two layouts, refused as before */
    {{{"in_proj_weight", 24, 8}, QP4(""), {"o_proj.weight", 8, 8}},
     "up/model.safetensors: tensors of more than one naming layout "
     "(in_proj_weight... q_proj.weight...); a weight set uses one"},
    /* one of nn.MultiheadAttention's two biases, the other lost: a zero
     * bias in its place served a wrong answer */
    {{{"in_proj_weight", 24, 8}, {"in_proj_bias", 24, 0},
      {"out_proj.weight", 8, 8}},
     "up/model.safetensors: 'in_proj_bias' without 'out_proj.bias': an "
     "nn.MultiheadAttention has both biases (bias=True) or neither; save its "
     "whole state_dict(), or, for a layer with some biases only, use the "
     "q_proj.weight... names"},
    {{{"attn.q_proj_weight", 8, 8}, {"attn.k_proj_weight", 8, 6},
      {"attn.v_proj_weight", 8, 6}, {"attn.out_proj.weight", 8, 8},
      {"attn.out_proj.bias", 8, 0}},
     "up/model.safetensors: 'attn.out_proj.bias' without 'attn.in_proj_bias': "
     "an nn.MultiheadAttention has both biases (bias=True) or neither; save "
     "its whole state_dict(), or, for a layer with some biases only, use the "
     "q_proj.weight... names"},
};
#define N_BOTH (int)(sizeof both / sizeof both[0])

/* Two tensors for one role, or one of a pair alone: refused, naming them;
 * nothing loaded. */
START_TEST(test_both_names)
{
    static const char cfg[] = "{\"n_heads\": 2}";
    char err[ATTN_ERRMAX];
    size_t len;
    model *m = (model *)1;
    unsigned char *st = st_build(both[_i].t, &len);
    int rc = model_load_mem(&m, "up", cfg, strlen(cfg), st, len, err);
    ck_assert_msg(rc == ATTN_EFORMAT, "case %d: rc %d (%s)", _i, rc,
                  rc ? err : "loaded");
    ck_assert_ptr_null(m);
    ck_assert_str_eq(err, both[_i].want);
    free(st);
}
END_TEST

static const struct {
    spec t[MAX_T];
    const char *layout;
} one[] = {
    {{{"in_proj_weight", 24, 8}, {"in_proj_bias", 24, 0},
      {"out_proj.weight", 8, 8}, {"out_proj.bias", 8, 0}},
     "nn.MultiheadAttention"},
    {{{"q_proj_weight", 8, 8}, {"k_proj_weight", 8, 8},
      {"v_proj_weight", 8, 8}, {"out_proj.weight", 8, 8}},
     "nn.MultiheadAttention"},
    {{QP4(""), {"o_proj.weight", 8, 8}, {"o_proj.bias", 8, 0}}, "q_proj"},
    {{QP4(""), {"out_proj.weight", 8, 8}, {"out_proj.bias", 8, 0}}, "q_proj"},
    /* one name for W_o, the other for b_o: each role has one source */
    {{QP4(""), {"o_proj.weight", 8, 8}, {"out_proj.bias", 8, 0}}, "q_proj"},
};
#define N_ONE (int)(sizeof one / sizeof one[0])

/* Each name alone still loads, in its layout. */
START_TEST(test_one_name)
{
    static const char cfg[] = "{\"n_heads\": 2}";
    char err[ATTN_ERRMAX];
    size_t len;
    model *m;
    unsigned char *st = st_build(one[_i].t, &len);
    int rc = model_load_mem(&m, "up", cfg, strlen(cfg), st, len, err);
    ck_assert_msg(rc == 0, "case %d: %s", _i, err);
    ck_assert_str_eq(model_layout(m), one[_i].layout);
    ck_assert_int_eq(model_config(m)->d_model, 8);
    model_destroy(m);
    free(st);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_layouts");
    TCase *tc = tcase_create("model_layouts");
    tcase_add_loop_test(tc, test_both_names, 0, N_BOTH);
    tcase_add_loop_test(tc, test_one_name, 0, N_ONE);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

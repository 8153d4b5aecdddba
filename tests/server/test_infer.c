/* test_infer.c - srv_infer_prepare (server/infer.c) at the edges of its
 * size arithmetic: shapes whose dimensions do not fit the engine's int
 * are refused with 400 before anything is laid out, never cast. The
 * requests are built by hand (a decoded request whose data is a few
 * bytes: prepare reads no input's data but lengths'), so a shape of 2^31
 * rows costs nothing here. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "server/infer.h"
#include "tests/check_main.h"

/* A cross-attention model: x rows of 4, context rows of 2. */
static const attn_config cross = {.d_model = 4, .d_model_ctx = 2,
                                  .n_heads = 1, .n_kv_heads = 1,
                                  .head_dim = 2, .v_head_dim = 2};

static void input(oip_tensor *t, const char *name, int64_t a, int64_t b,
                  int64_t c, void *data)
{
    memset(t, 0, sizeof *t);
    strcpy(t->name, name);
    t->wire_dtype = OIP_FP32;
    t->rank = 3;
    t->shape[0] = a, t->shape[1] = b, t->shape[2] = c;
    t->count = (size_t)(a * b * c);
    t->data = data;
}

/* prepare: x [1, 1, 4] and context [1, s, 2] on the model above. */
static int prepare(int64_t s, char *err)
{
    static float x[4], ctx[4];
    oip_tensor in[2];
    oip_request req;
    srv_prep p;
    srv_infer_limits lim = {(size_t)1 << 40, 1 << 20, NULL};
    int rc;
    memset(&req, 0, sizeof req);
    memset(&p, 0, sizeof p);
    input(&in[0], "x", 1, 1, 4, x);
    input(&in[1], "context", 1, s, 2, ctx);
    req.inputs = in;
    req.n_inputs = 2;
    req.params.causal = -1;
    rc = srv_infer_prepare(&p, &req, "cross", &cross, 0, 0, &lim, err);
    srv_prep_free(&p);
    return rc;
}

START_TEST(context_rows_past_int_are_refused)
{
    char err[OIP_ERRMAX] = "";
    ck_assert_int_eq(prepare(2, err), 0);
    /* 2^31 rows was cast to int: S -2^31, the engine's keys negative */
    ck_assert_int_eq(prepare((int64_t)1 << 31, err), 400);
    ck_assert_msg(strstr(err, "inputs[context].shape"), "%s", err);
    ck_assert_int_eq(prepare(((int64_t)1 << 32) + 2, err), 400);
    ck_assert_int_eq(prepare(((int64_t)1 << 30) + 1, err), 400);
}
END_TEST

/* prepare_sdpa: the built-in sdpa's q [1, 1, 2], k and v [1, s, 2]. */
static int prepare_sdpa(int64_t s, char *err)
{
    static float q[2], kv[4];
    oip_tensor in[3];
    oip_request req;
    srv_prep p;
    srv_infer_limits lim = {(size_t)1 << 40, 1 << 20, NULL};
    int rc;
    memset(&req, 0, sizeof req);
    memset(&p, 0, sizeof p);
    input(&in[0], "q", 1, 1, 2, q);
    input(&in[1], "k", 1, s, 2, kv);
    input(&in[2], "v", 1, s, 2, kv);
    req.inputs = in;
    req.n_inputs = 3;
    req.params.causal = -1;
    rc = srv_infer_prepare(&p, &req, "sdpa", NULL, 0, 1, &lim, err);
    srv_prep_free(&p);
    return rc;
}

/* sdpa's keys past its limit (S at most 2^30, as T; infer.c):
 * past it 400 naming k, before the item's S is laid out as an int */
START_TEST(sdpa_keys_past_the_limit_are_refused)
{
    char err[OIP_ERRMAX] = "";
    ck_assert_msg(prepare_sdpa(2, err) == 0, "%s", err);
    for (int i = 0; i < 3; i++) {
        int64_t s = i == 0 ? ((int64_t)1 << 30) + 1
                  : i == 1 ? (int64_t)1 << 31 : ((int64_t)1 << 32) + 2;
        err[0] = 0;
        ck_assert_int_eq(prepare_sdpa(s, err), 400);
        ck_assert_str_eq(err, "inputs[k].shape: dimensions too large (S at "
                              "most 2^30)");
    }
}
END_TEST

static Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, context_rows_past_int_are_refused);
    tcase_add_test(tc, sdpa_keys_past_the_limit_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(infer_suite)

/* test_infer.c - srv_infer_prepare (server/infer.c) at the edges of its
 * size arithmetic: shapes whose dimensions do not fit the engine's int
 * are refused with 400 before anything is laid out, never cast. The
 * requests are built by hand (a decoded request whose data is a few
 * bytes: prepare reads no input's data but lengths'), so a shape of 2^31
 * rows costs nothing here. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/infer.h"
#include "server/seq.h"
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

/* A self-attention model of d_model 2: a sequence of one token is 8 bytes
 * of x and 8 of y, beside ~250 of layout (its attn_seq, its lengths, the
 * plan's tiles and rows). */
static const attn_config self2 = {.d_model = 2, .d_model_ctx = 2,
                                  .n_heads = 1, .n_kv_heads = 1,
                                  .head_dim = 2, .v_head_dim = 2};

/* per_sequence: x [b, 1, 2] on self2 under request-memory memory (the
 * request counted as its x's bytes); *extra gets what prepare counted
 * beside the outputs. */
static int per_sequence(int64_t b, size_t memory, size_t *extra, char *err)
{
    float *x = calloc((size_t)b * 2, sizeof *x);
    oip_tensor in;
    oip_request req;
    srv_prep p;
    srv_infer_limits lim = {memory, 1 << 20, NULL};
    int rc;
    memset(&req, 0, sizeof req);
    input(&in, "x", b, 1, 2, x);
    req.inputs = &in;
    req.n_inputs = 1;
    req.bytes = (size_t)b * 8;
    req.params.causal = -1;
    rc = srv_infer_prepare(&p, &req, "self", &self2, 0, 0, &lim, err);
    *extra = p.extra;
    srv_prep_free(&p);
    free(x);
    return rc;
}

/* Many one-token sequences in one request: the per-sequence arrays (here
 * and in the engine's plan, 15x the data at d_model 2) were not counted
 * in request-memory, so 65536 sequences of 1 MiB of data and outputs
 * passed a 7.3 MiB limit while ~16 MiB more was allocated for them. */
START_TEST(sequences_count_their_layout)
{
    char err[OIP_ERRMAX] = "";
    const int64_t b = 65536;
    size_t extra, data = (size_t)b * 16; /* x and y */
    ck_assert_int_eq(per_sequence(b, data + (size_t)b * 100, &extra, err), 413);
    ck_assert_msg(strstr(err, "inputs[x].shape: its 65536 sequences take") &&
                      strstr(err, "raise --request-memory"), "%s", err);
    ck_assert_int_eq(per_sequence(b, (size_t)1 << 30, &extra, err), 0);
    /* at least the attn_seq, two lengths and one tile each */
    ck_assert_uint_ge(extra, (size_t)b * (sizeof(attn_seq) + 8 + 28));
    ck_assert_int_eq(per_sequence(b, data + extra, &extra, err), 0);
    ck_assert_int_eq(per_sequence(b, data + extra - 1, &extra, err), 413);
}
END_TEST

/* per_item: sdpa q, k, v [n, 1, 1] under request-memory memory. */
static int per_item(int64_t n, size_t memory, size_t *extra, char *err)
{
    float *d = calloc((size_t)n * 3, sizeof *d);
    oip_tensor in[3];
    oip_request req;
    srv_prep p;
    srv_infer_limits lim = {memory, 1 << 20, NULL};
    int rc;
    memset(&req, 0, sizeof req);
    input(&in[0], "q", n, 1, 1, d);
    input(&in[1], "k", n, 1, 1, d + n);
    input(&in[2], "v", n, 1, 1, d + 2 * n);
    req.inputs = in;
    req.n_inputs = 3;
    req.bytes = (size_t)n * 12;
    req.params.causal = -1;
    rc = srv_infer_prepare(&p, &req, "sdpa", NULL, 0, 1, &lim, err);
    *extra = p.extra;
    srv_prep_free(&p);
    free(d);
    return rc;
}

/* sdpa items: each one's attn_raw and the raw plan's share of it, its q
 * times scale (a carve of 64 bytes for one float) were not counted. */
START_TEST(sdpa_items_count_their_layout_and_scaled_q)
{
    char err[OIP_ERRMAX] = "";
    const int64_t n = 65536;
    size_t extra, data = (size_t)n * 16; /* q, k, v and the output */
    ck_assert_int_eq(per_item(n, data + (size_t)n * 100, &extra, err), 413);
    ck_assert_msg(strstr(err, "inputs[q].shape: its 65536 items take") &&
                      strstr(err, "raise --request-memory"), "%s", err);
    ck_assert_int_eq(per_item(n, (size_t)1 << 30, &extra, err), 0);
    ck_assert_uint_ge(extra, (size_t)n * (sizeof(attn_raw) + 64));
    ck_assert_int_eq(per_item(n, data + extra - 1, &extra, err), 413);
}
END_TEST

/* one_sequence: x [1, t, 2] on self2 under request-memory memory, a
 * stateless request (step 0) or a sequence step (1; its seq_prep.c
 * layout); *need gets what it holds when it fits (the request, its
 * layout, its outputs), *layout what it holds beside the outputs. */
static int one_sequence(int step, int64_t t, size_t memory, size_t *need,
                        size_t *layout, char *err)
{
    float *x = calloc((size_t)t * 2, sizeof *x);
    oip_tensor in;
    oip_request req;
    srv_prep p;
    srv_step st;
    srv_infer_limits lim = {memory, 1 << 20, NULL};
    int rc;
    memset(&req, 0, sizeof req);
    memset(&st, 0, sizeof st);
    input(&in, "x", 1, t, 2, x);
    req.inputs = &in;
    req.n_inputs = 1;
    req.bytes = (size_t)t * 8 + 100;
    req.params.causal = -1;
    if (step) {
        strcpy(req.params.seq_id, "s1");
        req.params.seq_start = 1;
        rc = srv_seq_prepare(&st, &p, &req, "self", &self2, 1, 0, &lim, err);
    } else {
        rc = srv_infer_prepare(&p, &req, "self", &self2, 1, 0, &lim, err);
    }
    if (!rc)
        *need = req.bytes + p.extra + p.bytes;
    *layout = req.bytes + p.extra;
    srv_prep_free(&p);
    free(x);
    return rc;
}

/* A stateless request and a sequence step count the same sum (the
 * request, its layout, its outputs) against request-memory; their
 * layout's 413 was worded two ways ("its 1 sequences take N bytes each
 * ... beside the request's M" against "8 tokens take more than
 * request-memory (L) allows with the request"). One computation and one
 * message now (srv_prep_extra), each with what to send instead; at the
 * edge: the whole sum passes, a byte less is the outputs' 413, the
 * layout's sum a byte less is the layout's. */
START_TEST(stateless_and_step_share_the_limit_and_its_message)
{
    static const char *const fewer[2] = {"fewer or shorter sequences a request",
                                         "fewer tokens a step"};
    char err[OIP_ERRMAX], want[OIP_ERRMAX];
    int step;
    for (step = 0; step < 2; step++) {
        size_t need = 0, layout = 0, l2;
        err[0] = 0;
        ck_assert_int_eq(one_sequence(step, 8, (size_t)1 << 30, &need, &layout, err), 0);
        ck_assert_int_eq(one_sequence(step, 8, need, &need, &l2, err), 0);
        ck_assert_int_eq(one_sequence(step, 8, need - 1, &l2, &l2, err), 413);
        snprintf(want, sizeof want, "outputs.y: this %s needs more than %zu "
                 "bytes with its outputs (request-memory); ask for fewer "
                 "outputs, send fewer tokens, or raise --request-memory",
                 step ? "step" : "request", need - 1);
        ck_assert_str_eq(err, want);
        ck_assert_int_eq(one_sequence(step, 8, layout, &l2, &l2, err), 413);
        ck_assert_msg(strncmp(err, "outputs.y: ", 11) == 0, "%s", err);
        ck_assert_int_eq(one_sequence(step, 8, layout - 1, &l2, &l2, err), 413);
        snprintf(want, sizeof want, "inputs[x].shape: its 1 sequence takes %zu "
                 "bytes to lay out for the engine beside the request's 164 "
                 "(%zu in all), more than request-memory (%zu) allows; send "
                 "%s, or raise --request-memory", layout - 164, layout,
                 layout - 1, fewer[step]);
        ck_assert_str_eq(err, want);
    }
}
END_TEST

/* The layout's sum per item (the plan's share plus the item's own
 * attn_seq or attn_raw) is checked as its product and total are: a share
 * a few bytes under SIZE_MAX is not wrapped to a few bytes that fit, but
 * refused (413) as one that overflowed in attn_plan_item_bytes is. (Out
 * of a request's reach today: T and S are at most 2^30, d_k 2^20.) */
START_TEST(layout_sum_per_item_is_checked)
{
    char err[OIP_ERRMAX] = "";
    oip_request req;
    srv_prep p;
    srv_infer_limits lim = {(size_t)1 << 30, 1 << 20, NULL};
    memset(&req, 0, sizeof req);
    memset(&p, 0, sizeof p);
    req.bytes = 100;
    ck_assert_int_eq(srv_prep_extra(&p, &req, 1, 1000, sizeof(attn_seq), "x",
                                    "fewer tokens a step", &lim, err), 0);
    ck_assert_uint_eq(p.extra, 1000 + sizeof(attn_seq));
    ck_assert_int_eq(srv_prep_extra(&p, &req, 1, SIZE_MAX - 8, sizeof(attn_seq),
                                    "x", "fewer tokens a step", &lim, err), 413);
    ck_assert_msg(strstr(err, "inputs[x].shape: its 1 sequence takes "
                         "18446744073709551615 bytes"), "%s", err);
    ck_assert_int_eq(srv_prep_extra(&p, &req, 1, SIZE_MAX, 8, "x",
                                    "fewer tokens a step", &lim, err), 413);
}
END_TEST

static Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, context_rows_past_int_are_refused);
    tcase_add_test(tc, sdpa_keys_past_the_limit_are_refused);
    tcase_add_test(tc, stateless_and_step_share_the_limit_and_its_message);
    tcase_add_test(tc, sequences_count_their_layout);
    tcase_add_test(tc, sdpa_items_count_their_layout_and_scaled_q);
    tcase_add_test(tc, layout_sum_per_item_is_checked);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(infer_suite)

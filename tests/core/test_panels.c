/*
 * test_panels.c - weights in column panels (core/panels.c, attn.h's
 * ATTN_PANELS): the panels' widths, where attn_to_panels puts each element
 * (the formula of attn.h, computed here on its own), and the engine giving
 * bit for bit the same y from panels as from rows: a prompt (OpenBLAS), a
 * batch of decoder steps (the skinny GEMMs) and a lone step, on a layer
 * whose matrices all have several panels, the last one narrower, and a
 * batch of cross-attention (W_k, W_v of d_model_ctx rows, d_v != d_k).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kv.h"
#include "testutil.h"
#include "tests/check_main.h"

START_TEST(panel_widths)
{
    attn_config c = {.d_model = 2048, .n_heads = 32, .n_kv_heads = 8,
                     .head_dim = 64, .v_head_dim = 64};
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_Q), 256);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_K), 256);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_V), 256);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_O), 256);
    /* whole heads: 2 heads of 96, 1 of 300; never wider than the matrix */
    c = (attn_config){.d_model = 100, .n_heads = 4, .n_kv_heads = 2,
                      .head_dim = 96, .v_head_dim = 300};
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_Q), 192);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_K), 192);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_V), 300);
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_O), 100);
    c.head_dim = 8;
    ck_assert_int_eq(attn_panel_cols(&c, ATTN_W_K), 16);
}
END_TEST

START_TEST(to_panels_places)
{
    const size_t shapes[][3] = {{5, 70, 32}, {3, 64, 32}, {4, 10, 16},
                                {1, 33, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], width = shapes[s][1], pw = shapes[s][2];
        float *m = malloc(rows * width * sizeof(float));
        float *tmp = malloc(rows * width * sizeof(float));
        ck_assert(m && tmp);
        for (size_t i = 0; i < rows * width; i++)
            m[i] = (float)i;
        attn_to_panels(m, rows, width, pw, tmp);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < width; j++) {
                size_t p0 = j - j % pw; /* first column of j's panel */
                size_t w = width - p0 < pw ? width - p0 : pw;
                size_t at = p0 * rows + i * w + (j - p0);
                ck_assert_msg(m[at] == (float)(i * width + j),
                              "%zux%zu/%zu: (%zu, %zu) at %zu holds %g",
                              rows, width, pw, i, j, at, (double)m[at]);
            }
        free(m);
        free(tmp);
    }
}
END_TEST

/* Copies of L's matrices in panels. */
typedef struct panelled {
    float *m[4];
    attn_weights w;
} panelled;

static void panel_copy(panelled *P, const layer *L)
{
    const attn_config *c = &L->c;
    size_t ctx = (size_t)(c->d_model_ctx ? c->d_model_ctx : c->d_model);
    size_t in[4] = {(size_t)c->d_model, ctx, ctx,
                    (size_t)c->n_heads * (size_t)c->v_head_dim};
    size_t out[4] = {(size_t)c->n_heads * (size_t)c->head_dim,
                     (size_t)c->n_kv_heads * (size_t)c->head_dim,
                     (size_t)c->n_kv_heads * (size_t)c->v_head_dim,
                     (size_t)c->d_model};
    const float *src[4] = {L->wq, L->wk, L->wv, L->wo};
    char err[ATTN_ERRMAX];
    P->w = L->w;
    for (int k = 0; k < 4; k++) {
        size_t n = in[k] * out[k];
        P->m[k] = malloc(n * sizeof(float));
        ck_assert_ptr_nonnull(P->m[k]);
        ck_assert_msg((size_t)attn_panel_cols(c, ATTN_W_Q + k) < out[k],
                      "matrix %d has one panel", k);
        memcpy(P->m[k], src[k], n * sizeof(float));
    }
    ck_assert_msg(attn_weights_to_panels(c, P->m, err) == 0, "%s", err);
    P->w.w_q = P->m[0], P->w.w_k = P->m[1], P->w.w_v = P->m[2];
    P->w.w_o = P->m[3];
    P->w.layout = ATTN_PANELS;
}

/* d_model 300 (W_o: 256 + 44), 10 heads of 64 (W_q: 256 + 256 + 128) over
 * 5 kv heads (W_k, W_v: 256 + 64), biases. */
static void wide_layer(layer *L, panelled *P)
{
    tu_rng g = {0x5eed1234u};
    layer_init(L, &g, 300, 10, 5, 64, 64);
    panel_copy(P, L);
}

static void same_bits(const char *what, const float *a, const float *b,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                      "%s[%zu]: rows %.9g, panels %.9g", what, i,
                      (double)a[i], (double)b[i]);
}

START_TEST(prompt_same_as_rows)
{
    layer L;
    panelled P;
    wide_layer(&L, &P);
    tu_rng g = {77};
    const int T = 70;
    float *x = tu_randn(&g, (size_t)T * 300, 1.0f);
    float *ya = malloc((size_t)T * 300 * sizeof(float));
    float *yb = malloc((size_t)T * 300 * sizeof(float));
    ck_assert(ya && yb);
    attn_seq s = {.t = T, .s = T, .t_valid = T, .s_valid = T, .causal = 1,
                  .x = x, .y = ya};
    char err[ATTN_ERRMAX];
    ck_assert_msg(attn_forward(&L.c, &L.w, &s, 1, tu_ex, err) == 0, "%s", err);
    s.y = yb;
    ck_assert_msg(attn_forward(&L.c, &P.w, &s, 1, tu_ex, err) == 0, "%s", err);
    same_bits("y", ya, yb, (size_t)T * 300);
    /* and the panels matter: read as rows they are another layer */
    P.w.layout = ATTN_ROWS;
    ck_assert_msg(attn_forward(&L.c, &P.w, &s, 1, tu_ex, err) == 0, "%s", err);
    ck_assert(memcmp(ya, yb, (size_t)T * 300 * sizeof(float)) != 0);
    P.w.layout = 42;
    ck_assert_int_eq(attn_forward(&L.c, &P.w, &s, 1, tu_ex, err), ATTN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "weights.layout is 42"));
    free(x), free(ya), free(yb);
    for (int k = 0; k < 4; k++)
        free(P.m[k]);
    layer_free(&L);
}
END_TEST

/* Cross-attention, d_model 300 over a context of width 520, 6 heads of
 * d_k 96 and d_v 160 over 3 kv heads: W_q 3 panels of 192, W_k (520 rows)
 * 192 + 96, W_v (520 rows) 3 of 160, W_o 256 + 44. Two sequences (a
 * gather), 40 and 7 query rows over 33 and 50 context rows. */
START_TEST(cross_same_as_rows)
{
    tu_rng g = {0xc0ffeeu};
    layer L;
    panelled P;
    const int dm = 300, dc = 520, H = 6, Hk = 3, dk = 96, dv = 160;
    L.c = (attn_config){.d_model = dm, .d_model_ctx = dc, .n_heads = H,
                        .n_kv_heads = Hk, .head_dim = dk, .v_head_dim = dv};
    L.wq = tu_randn(&g, (size_t)dm * H * dk, 0.06f);
    L.wk = tu_randn(&g, (size_t)dc * Hk * dk, 0.05f);
    L.wv = tu_randn(&g, (size_t)dc * Hk * dv, 0.05f);
    L.wo = tu_randn(&g, (size_t)H * dv * dm, 0.03f);
    L.bq = tu_randn(&g, (size_t)H * dk, 0.1f);
    L.bk = tu_randn(&g, (size_t)Hk * dk, 0.1f);
    L.bv = tu_randn(&g, (size_t)Hk * dv, 0.1f);
    L.bo = tu_randn(&g, (size_t)dm, 0.1f);
    L.w = (attn_weights){.w_q = L.wq, .w_k = L.wk, .w_v = L.wv, .w_o = L.wo,
                         .b_q = L.bq, .b_k = L.bk, .b_v = L.bv, .b_o = L.bo};
    ck_assert_int_eq(attn_panel_cols(&L.c, ATTN_W_Q), 192);
    ck_assert_int_eq(attn_panel_cols(&L.c, ATTN_W_K), 192);
    ck_assert_int_eq(attn_panel_cols(&L.c, ATTN_W_V), 160);
    panel_copy(&P, &L);
    const int t[2] = {40, 7}, s[2] = {33, 50};
    float *x[2], *c[2], *y[2][2];
    attn_seq q[2];
    for (int i = 0; i < 2; i++) {
        x[i] = tu_randn(&g, (size_t)t[i] * dm, 1.0f);
        c[i] = tu_randn(&g, (size_t)s[i] * dc, 1.0f);
        for (int v = 0; v < 2; v++) {
            y[v][i] = malloc((size_t)t[i] * dm * sizeof(float));
            ck_assert_ptr_nonnull(y[v][i]);
        }
    }
    char err[ATTN_ERRMAX];
    const attn_weights *w[2] = {&L.w, &P.w};
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 2; i++)
            q[i] = (attn_seq){.t = t[i], .s = s[i], .t_valid = t[i],
                              .s_valid = s[i], .x = x[i], .context = c[i],
                              .y = y[v][i]};
        ck_assert_msg(attn_forward(&L.c, w[v], q, 2, tu_ex, err) == 0, "%s",
                      err);
    }
    for (int i = 0; i < 2; i++) {
        same_bits(i ? "y of 7 rows" : "y of 40 rows", y[0][i], y[1][i],
                  (size_t)t[i] * dm);
        free(x[i]), free(c[i]), free(y[0][i]), free(y[1][i]);
    }
    for (int k = 0; k < 4; k++)
        free(P.m[k]);
    layer_free(&L);
}
END_TEST

/* n sequences with 20-token prompts, then 3 steps of all n in one batch,
 * once on rows and once on panels (each with its own K/V pool). */
static void steps_same(int n)
{
    layer L;
    panelled P;
    wide_layer(&L, &P);
    tu_rng g = {991 + (uint64_t)n};
    const int dm = 300, prompt = 20, steps = 3;
    char err[ATTN_ERRMAX];
    attn_kv_pool *pool[2];
    attn_kv kv[2][8];
    const attn_weights *w[2] = {&L.w, &P.w};
    float *x = tu_randn(&g, (size_t)(prompt + steps) * n * dm, 1.0f);
    float *y[2] = {malloc((size_t)prompt * n * dm * sizeof(float)),
                   malloc((size_t)prompt * n * dm * sizeof(float))};
    ck_assert(y[0] && y[1] && n <= 8);
    for (int v = 0; v < 2; v++) {
        ck_assert_msg(attn_kv_pool_create(&pool[v], &L.c, ATTN_KV_F32, 0,
                                          (size_t)1 << 24, err) == 0,
                      "%s", err);
        for (int i = 0; i < n; i++) {
            attn_kv_init(&kv[v][i], pool[v]);
            attn_seq s = {.t = prompt, .s = prompt, .t_valid = prompt,
                          .s_valid = prompt, .causal = 1,
                          .x = x + (size_t)i * prompt * dm,
                          .y = y[v] + (size_t)i * prompt * dm,
                          .kv = &kv[v][i]};
            ck_assert_int_eq(attn_kv_reserve(&kv[v][i], prompt, err), 0);
            ck_assert_msg(attn_forward(&L.c, w[v], &s, 1, tu_ex, err) == 0,
                          "%s", err);
            attn_kv_advance(&kv[v][i], prompt);
        }
    }
    same_bits("prompt y", y[0], y[1], (size_t)prompt * n * dm);
    const float *xs = x + (size_t)prompt * n * dm;
    for (int k = 0; k < steps; k++) {
        for (int v = 0; v < 2; v++) {
            attn_seq sq[8];
            for (int i = 0; i < n; i++) {
                ck_assert_int_eq(attn_kv_reserve(&kv[v][i], 1, err), 0);
                int len = kv[v][i].len + 1;
                sq[i] = (attn_seq){.t = 1, .s = len, .t_valid = 1,
                                   .s_valid = len, .causal = 1,
                                   .x = xs + ((size_t)k * n + i) * dm,
                                   .y = y[v] + (size_t)i * dm,
                                   .kv = &kv[v][i]};
            }
            ck_assert_msg(attn_forward(&L.c, w[v], sq, n, tu_ex, err) == 0,
                          "%s", err);
            for (int i = 0; i < n; i++)
                attn_kv_advance(&kv[v][i], 1);
        }
        char what[32];
        snprintf(what, sizeof what, "step %d y", k);
        same_bits(what, y[0], y[1], (size_t)n * dm);
    }
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < n; i++)
            attn_kv_free(&kv[v][i]);
        attn_kv_pool_destroy(pool[v]);
        free(y[v]);
    }
    free(x);
    for (int k = 0; k < 4; k++)
        free(P.m[k]);
    layer_free(&L);
}

START_TEST(batched_steps_same_as_rows)
{
    steps_same(7);
}
END_TEST

START_TEST(lone_step_same_as_rows)
{
    steps_same(1);
}
END_TEST

static Suite *panels_suite(void)
{
    Suite *s = suite_create("panels");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown);
    tu_timeout(tc, 60);
    tcase_add_test(tc, panel_widths);
    tcase_add_test(tc, to_panels_places);
    tcase_add_test(tc, prompt_same_as_rows);
    tcase_add_test(tc, cross_same_as_rows);
    tcase_add_test(tc, batched_steps_same_as_rows);
    tcase_add_test(tc, lone_step_same_as_rows);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(panels_suite)

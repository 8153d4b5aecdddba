/*
 * test_kv.c - decoder steps through the engine (the K/V page pool itself:
 * test_kv_pool.c): a sequence fed in any split of chunks gives the y,
 * attention and scores of one causal request over all its tokens, on both
 * paths, with GQA and (partial) RoPE, in FP32 and, within a stated
 * tolerance, FP16 and BF16 pages; many sequences and stateless requests in
 * one batch give what each gives alone; an HF-style PyTorch decoder layer
 * with past_key_values (tests/core/gen_decode_vectors.py) step by step.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kv.h"
#include "testutil.h"
#include "tests/check_main.h"

/* ---- decoder steps equal one causal request ----------------------------- */

enum { P_FUSED, P_MAPS, P_SCORES };

/* Run the whole sequence (n tokens) through kv in chunks splits[] (summing
 * to n) on path `path`, and compare every chunk's y, attention and scores
 * with the rows of one causal request over all n tokens. */
static void chunks_equal_whole(layer *L, attn_kv_dtype dt, int page,
                               const int *splits, int n_splits, int path,
                               float atol, float rtol, unsigned seed)
{
    int n = 0;
    for (int i = 0; i < n_splits; i++)
        n += splits[i];
    tu_rng g = {seed};
    int dm = L->c.d_model, H = L->c.n_heads;
    float *x = tu_randn(&g, (size_t)n * dm, 1.0f);
    float *y = tu_fill((size_t)n * dm, NAN);
    float *a = tu_fill((size_t)H * n * n, NAN), *sc = tu_fill((size_t)H * n * n, NAN);
    char err[ATTN_ERRMAX];
    attn_seq whole = {.t = n, .s = n, .t_valid = n, .s_valid = n, .causal = 1,
                      .x = x, .y = y, .attention = a, .scores = sc};
    ck_assert_msg(attn_forward(&L->c, &L->w, &whole, 1, tu_ex, err) == 0, "%s",
                  err);
    attn_kv_pool *p;
    ck_assert_int_eq(attn_kv_pool_create(&p, &L->c, dt, page, 1 << 26, err), 0);
    attn_kv kv;
    attn_kv_init(&kv, p);
    int off = 0;
    for (int c = 0; c < n_splits; c++) {
        int t = splits[c], s = off + t;
        float *ys = tu_fill((size_t)t * dm, NAN);
        float *as = tu_fill((size_t)H * t * s, NAN),
              *ss = tu_fill((size_t)H * t * s, NAN);
        attn_seq st = {.t = t, .s = s, .t_valid = t, .s_valid = s,
                       .causal = 1, .x = x + (size_t)off * dm, .y = ys,
                       .kv = &kv};
        if (path == P_MAPS)
            st.attention = as, st.scores = ss;
        if (path == P_SCORES)
            st.scores = ss;
        ck_assert_int_eq(attn_kv_reserve(&kv, t, err), 0);
        ck_assert_msg(attn_forward(&L->c, &L->w, &st, 1, tu_ex, err) == 0, "%s",
                      err);
        attn_kv_advance(&kv, t);
        char what[96];
        snprintf(what, sizeof what, "chunk %d (rows %d..%d) y", c, off, s - 1);
        tu_assert_close(what, ys, y + (size_t)off * dm, (size_t)t * dm, atol,
                        rtol);
        for (int h = 0; h < H && path != P_FUSED; h++)
            for (int i = 0; i < t; i++) {
                const float *wa = a + ((size_t)h * n + off + i) * n;
                const float *ws = sc + ((size_t)h * n + off + i) * n;
                snprintf(what, sizeof what, "chunk %d head %d row %d scores", c,
                         h, off + i);
                tu_assert_close(what, ss + ((size_t)h * t + i) * s, ws,
                                (size_t)s, atol, rtol);
                if (path == P_MAPS) {
                    snprintf(what, sizeof what,
                             "chunk %d head %d row %d attention", c, h, off + i);
                    tu_assert_close(what, as + ((size_t)h * t + i) * s, wa,
                                    (size_t)s, atol, rtol);
                }
            }
        free(ys), free(as), free(ss);
        off = s;
    }
    ck_assert_int_eq(kv.len, n);
    attn_kv_free(&kv);
    ck_assert_uint_eq(attn_kv_pool_used(p), 0);
    attn_kv_pool_destroy(p);
    free(x), free(y), free(a), free(sc);
}

/* GQA (4 heads on 2 kv heads) with partial RoPE and biases. */
static void gqa_rope_layer(layer *L, unsigned seed)
{
    tu_rng g = {seed};
    layer_init(L, &g, 24, 4, 2, 8, 6);
    L->c.rope_theta = 10000.0f;
    L->c.rope_dims = 4;
}

static const int split_all[] = {23};
static const int split_ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int split_mixed[] = {5, 1, 3, 1, 1, 7, 2, 1, 2};

START_TEST(steps_equal_whole_f32)
{
    layer L;
    gqa_rope_layer(&L, 5);
    /* _i: path x split; pages of 4 tokens so chunks cross pages */
    int path = _i % 3, sp = _i / 3;
    const int *splits[] = {split_all, split_ones, split_mixed};
    int ns[] = {1, 23, 9};
    chunks_equal_whole(&L, ATTN_KV_F32, 4, splits[sp], ns[sp], path, 1e-5f,
                       1e-4f, 100u + (unsigned)_i);
    layer_free(&L);
}
END_TEST

/* Half-precision pages: keys and values rounded to 11 (FP16) or 8 (BF16)
 * significant bits; a step then differs from the FP32 whole-sequence pass
 * by about that relative error in K and V: 2e-3 (FP16) and 2e-2 (BF16) on
 * y and the weights of unit-scale inputs. */
START_TEST(steps_equal_whole_half)
{
    layer L;
    gqa_rope_layer(&L, 6);
    attn_kv_dtype dt = _i & 1 ? ATTN_KV_BF16 : ATTN_KV_F16;
    float tol = dt == ATTN_KV_F16 ? 2e-3f : 2e-2f;
    chunks_equal_whole(&L, dt, 4, split_mixed, 9, _i >> 1 ? P_MAPS : P_FUSED,
                       tol, tol, 200u + (unsigned)_i);
    layer_free(&L);
}
END_TEST

/* Prompts long enough for the fused kernel's key blocks and several query
 * blocks, MQA, full RoPE, default page size. */
START_TEST(steps_equal_whole_long)
{
    tu_rng g = {7};
    layer L;
    layer_init(&L, &g, 16, 4, 1, 8, 8);
    L.c.rope_theta = 500.0f;
    const int splits[] = {300, 1, 1, 37, 1};
    chunks_equal_whole(&L, ATTN_KV_F32, 0, splits, 5, _i ? P_MAPS : P_FUSED,
                       2e-5f, 2e-4f, 300u + (unsigned)_i);
    layer_free(&L);
}
END_TEST

/* A step's RoPE table holds the positions its batch has, not every one
 * before them: a one-token step at position 40000 of a rot-64 layer once
 * carved (and wrote a NaN into each row of) a 40001 x 64 table, 10 MB of
 * scratch per step, growing with the sequence; alone (_i 0), or beside a
 * new sequence's first step (_i 1: the table ran from its position 0).
 * Its scratch equals the same batch's at position 1; the numbers past
 * position 0 are steps_equal_whole's. */
START_TEST(rope_table_not_by_position)
{
    tu_rng g = {8};
    layer L;
    layer_init(&L, &g, 16, 2, 1, 64, 8);
    L.c.rope_theta = 10000.0f;
    attn_kv_pool *pool;
    char err[ATTN_ERRMAX];
    ck_assert_int_eq(attn_kv_pool_create(&pool, &L.c, ATTN_KV_F32, 0,
                                         (size_t)64 << 20, err), 0);
    int n = 1 + _i;
    float x[2][16] = {{0}}, y[2][16];
    size_t bytes[2];
    for (int k = 0; k < 2; k++) {
        int len = k ? 40000 : 1;
        attn_kv kv[2];
        attn_seq s[2];
        for (int i = 0; i < n; i++) {
            int past = i == n - 1 ? len : 0;
            attn_kv_init(&kv[i], pool);
            ck_assert_int_eq(attn_kv_reserve(&kv[i], past + 1, err), 0);
            attn_kv_advance(&kv[i], past);
            s[i] = (attn_seq){.t = 1, .s = past + 1, .t_valid = 1,
                              .s_valid = past + 1, .causal = 1, .x = x[i],
                              .y = y[i], .kv = &kv[i]};
        }
        attn_plan *p;
        ck_assert_msg(attn_plan_create(&p, &L.c, &L.w, s, n, err) == 0, "%s",
                      err);
        bytes[k] = attn_plan_scratch_bytes(p);
        attn_plan_destroy(p);
        for (int i = 0; i < n; i++)
            attn_kv_free(&kv[i]);
    }
    ck_assert_msg(bytes[1] == bytes[0], "%d sequence(s): scratch %zu at "
                  "40000, %zu at 1", n, bytes[1], bytes[0]);
    attn_kv_pool_destroy(pool);
    layer_free(&L);
}
END_TEST

/* A step whose keys pass FP16's 65504 (inputs of ~1e6, far inside
 * float32: FP32 pages take them) is refused naming the FP16 pages, not
 * "the inputs overflow float32" as it once was. */
START_TEST(f16_overflow_names_fp16)
{
    tu_rng g = {12};
    layer L;
    layer_init(&L, &g, 16, 2, 1, 8, 8);
    float *x = tu_randn(&g, 2 * 16, 1e6f), y[2 * 16];
    char err[ATTN_ERRMAX];
    for (int dt = ATTN_KV_F32; dt <= ATTN_KV_F16; dt++) {
        attn_kv_pool *pool;
        ck_assert_int_eq(attn_kv_pool_create(&pool, &L.c, (attn_kv_dtype)dt,
                                             0, 1 << 20, err), 0);
        attn_kv kv;
        attn_kv_init(&kv, pool);
        ck_assert_int_eq(attn_kv_reserve(&kv, 2, err), 0);
        attn_seq s = {.t = 2, .s = 2, .t_valid = 2, .s_valid = 2,
                      .causal = 1, .x = x, .y = y, .kv = &kv};
        int rc = attn_forward(&L.c, &L.w, &s, 1, NULL, err);
        if (dt == ATTN_KV_F32) {
            ck_assert_msg(rc == 0, "%s", err);
        } else {
            ck_assert_int_eq(rc, ATTN_ERANGE);
            ck_assert_str_eq(err, "item 0: a projection, score or output is "
                                  "not finite (a key or value of 65520 or "
                                  "more, which FP16 rounds to infinity (FP16 "
                                  "K/V pages), or inputs that overflow "
                                  "float32)");
        }
        attn_kv_free(&kv);
        attn_kv_pool_destroy(pool);
    }
    free(x);
    layer_free(&L);
}
END_TEST

/* One batch: three decoder sequences at different lengths (one-token steps
 * and a chunk), a stateless causal request and a stateless non-causal one
 * give exactly what each gives alone. */
START_TEST(batch_mixes_steps_and_stateless)
{
    layer L;
    gqa_rope_layer(&L, 8);
    int dm = 24, H = 4;
    tu_rng g = {9};
    char err[ATTN_ERRMAX];
    attn_kv_pool *p;
    ck_assert_int_eq(attn_kv_pool_create(&p, &L.c, ATTN_KV_F32, 4, 1 << 24, err),
                     0);
    attn_kv kv[3];
    int past[3] = {6, 1, 9}, tnew[5] = {1, 1, 3, 7, 5};
    float *hist[3];
    for (int i = 0; i < 3; i++) { /* prefill each alone */
        attn_kv_init(&kv[i], p);
        hist[i] = tu_randn(&g, (size_t)past[i] * dm, 1.0f);
        float *yp = tu_fill((size_t)past[i] * dm, 0);
        attn_seq s = {.t = past[i], .s = past[i], .t_valid = past[i],
                      .s_valid = past[i], .causal = 1, .x = hist[i], .y = yp,
                      .kv = &kv[i]};
        ck_assert_int_eq(attn_kv_reserve(&kv[i], past[i], err), 0);
        ck_assert_msg(attn_forward(&L.c, &L.w, &s, 1, NULL, err) == 0, "%s", err);
        attn_kv_advance(&kv[i], past[i]);
        free(yp);
    }
    attn_seq b[5], one[5];
    float *x[5], *yb[5], *ab[5], *y1[5], *a1[5];
    for (int i = 0; i < 5; i++) {
        int t = tnew[i], s = i < 3 ? past[i] + t : t;
        x[i] = tu_randn(&g, (size_t)t * dm, 1.0f);
        yb[i] = tu_fill((size_t)t * dm, NAN);
        y1[i] = tu_fill((size_t)t * dm, NAN);
        ab[i] = tu_fill((size_t)H * t * s, NAN);
        a1[i] = tu_fill((size_t)H * t * s, NAN);
        b[i] = (attn_seq){.t = t, .s = s, .t_valid = t, .s_valid = s,
                          .causal = i != 4, .x = x[i], .y = yb[i],
                          .attention = ab[i], .kv = i < 3 ? &kv[i] : NULL};
        if (i < 3)
            ck_assert_int_eq(attn_kv_reserve(&kv[i], t, err), 0);
    }
    ck_assert_msg(attn_forward(&L.c, &L.w, b, 5, tu_ex, err) == 0, "%s", err);
    for (int i = 0; i < 5; i++) { /* each alone, from the same history */
        one[i] = b[i];
        one[i].y = y1[i];
        one[i].attention = a1[i];
        ck_assert_msg(attn_forward(&L.c, &L.w, &one[i], 1, NULL, err) == 0,
                      "%s", err);
        tu_assert_close("batched y", yb[i], y1[i], (size_t)tnew[i] * dm, 1e-6f,
                        1e-5f);
        tu_assert_close("batched attention", ab[i], a1[i],
                        (size_t)H * tnew[i] * b[i].s, 1e-6f, 1e-5f);
        free(x[i]), free(yb[i]), free(y1[i]), free(ab[i]), free(a1[i]);
    }
    for (int i = 0; i < 3; i++) {
        attn_kv_free(&kv[i]);
        free(hist[i]);
    }
    attn_kv_pool_destroy(p);
    layer_free(&L);
}
END_TEST

/* ---- PyTorch: an HF-style decoder layer with past_key_values ------------ */

/* Read n floats (or ints) from f into a new buffer. */
static float *rd(FILE *f, size_t n)
{
    float *p = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, sizeof(float), n, f), n);
    return p;
}

/* tests/core/gen_decode_vectors.py: prefill the prompt in one step, then
 * one-token steps, on the fused (_i 0) or maps (_i 1) path; every y and
 * every step's attention row against torch. */
START_TEST(torch_decoder_layer)
{
    const char *dir = getenv("ATTN_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/core/vectors/decode.bin",
             dir ? dir : "tests");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (set ATTN_TEST_DATA)", path);
    int32_t n_cases;
    ck_assert_uint_eq(fread(&n_cases, 4, 1, f), 1);
    for (int cs = 0; cs < n_cases; cs++) {
        int32_t h[8];
        float theta;
        ck_assert_uint_eq(fread(h, 4, 8, f), 8);
        ck_assert_uint_eq(fread(&theta, 4, 1, f), 1);
        int dm = h[0], H = h[1], Hk = h[2], dk = h[3], dv = h[4], rot = h[5];
        int np = h[6], ns = h[7];
        attn_config c = {.d_model = dm, .n_heads = H, .n_kv_heads = Hk,
                         .head_dim = dk, .v_head_dim = dv,
                         .rope_theta = theta, .rope_dims = rot};
        float *wq = rd(f, (size_t)dm * H * dk), *wk = rd(f, (size_t)dm * Hk * dk);
        float *wv = rd(f, (size_t)dm * Hk * dv), *wo = rd(f, (size_t)H * dv * dm);
        float *bq = rd(f, (size_t)H * dk), *bk = rd(f, (size_t)Hk * dk);
        float *bv = rd(f, (size_t)Hk * dv), *bo = rd(f, (size_t)dm);
        float *x = rd(f, (size_t)(np + ns) * dm), *y0 = rd(f, (size_t)np * dm);
        attn_weights w = {wq, wk, wv, wo, bq, bk, bv, bo, ATTN_ROWS};
        char err[ATTN_ERRMAX];
        attn_kv_pool *p;
        ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, 0, 1 << 24,
                                             err),
                         0);
        attn_kv kv;
        attn_kv_init(&kv, p);
        float *y = tu_fill((size_t)np * dm, NAN);
        attn_seq st = {.t = np, .s = np, .t_valid = np, .s_valid = np,
                       .causal = 1, .x = x, .y = y, .kv = &kv};
        ck_assert_int_eq(attn_kv_reserve(&kv, np, err), 0);
        ck_assert_msg(attn_forward(&c, &w, &st, 1, tu_ex, err) == 0, "%s", err);
        attn_kv_advance(&kv, np);
        tu_assert_close("prefill y", y, y0, (size_t)np * dm, 1e-5f, 1e-4f);
        for (int i = 0; i < ns; i++) {
            int s = np + i + 1;
            float *wy = rd(f, (size_t)dm), *wa = rd(f, (size_t)H * s);
            float *a = tu_fill((size_t)H * s, NAN);
            st = (attn_seq){.t = 1, .s = s, .t_valid = 1, .s_valid = s,
                            .causal = 1, .x = x + (size_t)(np + i) * dm,
                            .y = y, .kv = &kv,
                            .attention = _i ? a : NULL};
            ck_assert_int_eq(attn_kv_reserve(&kv, 1, err), 0);
            ck_assert_msg(attn_forward(&c, &w, &st, 1, tu_ex, err) == 0, "%s",
                          err);
            attn_kv_advance(&kv, 1);
            char what[64];
            snprintf(what, sizeof what, "case %d step %d y", cs, i);
            tu_assert_close(what, y, wy, (size_t)dm, 1e-5f, 1e-4f);
            snprintf(what, sizeof what, "case %d step %d attention", cs, i);
            if (_i)
                tu_assert_close(what, a, wa, (size_t)H * s, 1e-6f, 1e-4f);
            free(wy), free(wa), free(a);
        }
        attn_kv_free(&kv);
        attn_kv_pool_destroy(p);
        free(wq), free(wk), free(wv), free(wo), free(bq), free(bk), free(bv);
        free(bo), free(x), free(y0), free(y);
    }
    fclose(f);
}
END_TEST

/* Bad decoder steps are refused before anything is computed. */
START_TEST(step_arguments)
{
    layer L;
    gqa_rope_layer(&L, 10);
    char err[ATTN_ERRMAX];
    attn_kv_pool *p, *other;
    ck_assert_int_eq(attn_kv_pool_create(&p, &L.c, ATTN_KV_F32, 4, 1 << 20, err),
                     0);
    attn_config c2 = L.c;
    c2.head_dim = 4;
    c2.rope_dims = 0;
    ck_assert_int_eq(attn_kv_pool_create(&other, &c2, ATTN_KV_F32, 4, 1 << 20,
                                         err),
                     0);
    attn_kv kv, ko;
    attn_kv_init(&kv, p);
    attn_kv_init(&ko, other);
    float x[2 * 24] = {0}, y[2 * 24], k[2 * 16];
    attn_seq s = {.t = 2, .s = 2, .t_valid = 2, .s_valid = 2, .causal = 1,
                  .x = x, .y = y, .kv = &kv};
    attn_plan *pl;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    ck_assert_msg(strstr(err, "attn_kv_reserve"), "%s", err);
    ck_assert_int_eq(attn_kv_reserve(&kv, 2, err), 0);
    s.s = 3;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    ck_assert_msg(strstr(err, "kv->len + t"), "%s", err);
    s.s = 2;
    s.t_valid = 1;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    s.t_valid = 2;
    s.context = x;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    s.context = NULL;
    s.k = k;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    s.k = NULL;
    attn_seq two[2] = {s, s};
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, two, 2, err), ATTN_EINVAL);
    ck_assert_msg(strstr(err, "also"), "%s", err);
    s.kv = &ko;
    ck_assert_int_eq(attn_kv_reserve(&ko, 2, err), 0);
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), ATTN_EINVAL);
    ck_assert_msg(strstr(err, "pool"), "%s", err);
    s.kv = &kv;
    ck_assert_int_eq(attn_plan_create(&pl, &L.c, &L.w, &s, 1, err), 0);
    attn_plan_destroy(pl);
    attn_kv_free(&kv);
    attn_kv_free(&ko);
    attn_kv_pool_destroy(p);
    attn_kv_pool_destroy(other);
    layer_free(&L);
}
END_TEST

/* ---- rewinding: a step that replaces the sequence's tail ---------------- */

/* step: t rows of x through kv as one decoder step (y: t rows, may be
 * NULL for a scratch), rewinding to n first when n >= 0. */
static void step(layer *L, attn_kv *kv, const float *x, int t, float *y, int n)
{
    char err[ATTN_ERRMAX];
    attn_kv_undo u;
    float *scratch = y ? NULL : tu_fill((size_t)t * L->c.d_model, 0);
    void *save = NULL;
    if (n >= 0) {
        save = malloc(attn_kv_rewind_bytes(kv, n, t) + 1);
        ck_assert_msg(attn_kv_rewind(kv, n, t, save, &u, err) == 0, "%s", err);
    }
    ck_assert_int_eq(attn_kv_reserve(kv, t, err), 0);
    attn_seq s = {.t = t, .s = kv->len + t, .t_valid = t, .s_valid = kv->len + t,
                  .causal = 1, .x = x, .y = y ? y : scratch, .kv = kv};
    ck_assert_msg(attn_forward(&L->c, &L->w, &s, 1, tu_ex, err) == 0, "%s", err);
    attn_kv_advance(kv, t);
    attn_kv_trim(kv);
    free(save);
    free(scratch);
}

/* A sequence of 13 tokens rewound to n and given 3 others, then 1 more:
 * each step's y equals the rows of one causal request over the history
 * it now has (the first n tokens, then the new ones), so the keys and
 * values past n were replaced and the positions (RoPE) start again at n;
 * the pages past the new end went back to the pool. */
START_TEST(rewind_equals_whole)
{
    static const int at[] = {0, 4, 7, 12, 13};
    int n = at[_i], dm = 24;
    layer L;
    gqa_rope_layer(&L, 11);
    tu_rng g = {400u + (unsigned)_i};
    float *xa = tu_randn(&g, 13 * (size_t)dm, 1.0f);
    float *xb = tu_randn(&g, 4 * (size_t)dm, 1.0f); /* 3 rows, then 1 */
    float *h = tu_fill((size_t)(n + 4) * dm, 0);
    memcpy(h, xa, (size_t)n * dm * sizeof(float));
    memcpy(h + (size_t)n * dm, xb, 4 * (size_t)dm * sizeof(float));
    float *want = tu_fill((size_t)(n + 4) * dm, NAN), yb[4 * 24];
    char err[ATTN_ERRMAX];
    attn_seq whole = {.t = n + 4, .s = n + 4, .t_valid = n + 4,
                      .s_valid = n + 4, .causal = 1, .x = h, .y = want};
    ck_assert_msg(attn_forward(&L.c, &L.w, &whole, 1, tu_ex, err) == 0, "%s",
                  err);
    attn_kv_pool *p;
    ck_assert_int_eq(attn_kv_pool_create(&p, &L.c, ATTN_KV_F32, 4, 1 << 20, err),
                     0);
    attn_kv kv;
    attn_kv_init(&kv, p);
    step(&L, &kv, xa, 9, NULL, -1);
    step(&L, &kv, xa + 9 * dm, 4, NULL, -1);
    ck_assert_int_eq(kv.len, 13);
    step(&L, &kv, xb, 3, yb, n);
    ck_assert_int_eq(kv.len, n + 3);
    ck_assert_int_eq(kv.n_pages, (n + 3 + 3) / 4);
    ck_assert_uint_eq(attn_kv_pool_used(p), attn_kv_bytes(&kv));
    step(&L, &kv, xb + 3 * dm, 1, yb + 3 * dm, -1);
    ck_assert_int_eq(kv.len, n + 4);
    tu_assert_close("rewound steps' y", yb, want + (size_t)n * dm,
                    4 * (size_t)dm, 1e-5f, 1e-4f);
    attn_kv_free(&kv);
    attn_kv_pool_destroy(p);
    free(xa), free(xb), free(h), free(want);
    layer_free(&L);
}
END_TEST

/* A rewound step that fails after its pass wrote the cache: undo puts
 * back every row it overwrote, bit for bit, and len; trim gives back the
 * pages it reserved past the old end. Each dtype (rows are copied as
 * stored). */
START_TEST(rewind_undo_restores)
{
    attn_kv_dtype dt = (attn_kv_dtype)(_i % 3);
    int n = _i < 3 ? 5 : 12, t = _i < 3 ? 3 : 6, dm = 24, nk = 2, dk = 8;
    layer L;
    gqa_rope_layer(&L, 12);
    tu_rng g = {500u + (unsigned)_i};
    float *xa = tu_randn(&g, 13 * (size_t)dm, 1.0f);
    float *xb = tu_randn(&g, (size_t)t * dm, 1.0f);
    float *y = tu_fill((size_t)t * dm, 0);
    float before[2][13 * 8], after[2][13 * 8], vb[2][13 * 6], va[2][13 * 6];
    char err[ATTN_ERRMAX];
    attn_kv_pool *p;
    ck_assert_int_eq(attn_kv_pool_create(&p, &L.c, dt, 4, 1 << 20, err), 0);
    attn_kv kv;
    attn_kv_init(&kv, p);
    step(&L, &kv, xa, 13, NULL, -1);
    size_t used = attn_kv_pool_used(p);
    for (int hh = 0; hh < nk; hh++)
        attn_kv_read(&kv, hh, 0, 13, before[hh], vb[hh]);
    attn_kv_undo u;
    /* 2 kv heads x (8 + 6) floats a token, as stored */
    size_t nb = attn_kv_rewind_bytes(&kv, n, t);
    ck_assert_uint_eq(nb, (size_t)((n + t < 13 ? n + t : 13) - n) * 2 * 14 *
                              (dt == ATTN_KV_F32 ? 4 : 2));
    void *save = malloc(nb);
    ck_assert_int_eq(attn_kv_rewind(&kv, n, t, save, &u, err), 0);
    ck_assert_int_eq(kv.len, n);
    ck_assert_int_eq(attn_kv_reserve(&kv, t, err), 0);
    attn_seq s = {.t = t, .s = n + t, .t_valid = t, .s_valid = n + t,
                  .causal = 1, .x = xb, .y = y, .kv = &kv};
    ck_assert_msg(attn_forward(&L.c, &L.w, &s, 1, tu_ex, err) == 0, "%s", err);
    attn_kv_read(&kv, 0, n, n + 1, after[0], va[0]);
    ck_assert_msg(memcmp(after[0], before[0] + n * dk, sizeof(float) * dk) != 0 &&
                      memcmp(va[0], vb[0] + n * 6, sizeof(float) * 6) != 0,
                  "the pass did not overwrite row %d", n);
    attn_kv_rewind_undo(&kv, &u); /* the step failed */
    attn_kv_trim(&kv);
    ck_assert_int_eq(kv.len, 13);
    ck_assert_int_eq(kv.n_pages, 4);
    ck_assert_uint_eq(attn_kv_pool_used(p), used);
    for (int hh = 0; hh < nk; hh++) {
        attn_kv_read(&kv, hh, 0, 13, after[hh], va[hh]);
        ck_assert_msg(memcmp(after[hh], before[hh], sizeof before[hh]) == 0,
                      "kv head %d: keys differ after the undo", hh);
        ck_assert_msg(memcmp(va[hh], vb[hh], sizeof vb[hh]) == 0,
                      "kv head %d: values differ after the undo", hh);
    }
    attn_kv_rewind_undo(&kv, &u); /* held nothing: no-op */
    ck_assert_int_eq(kv.len, 13);
    free(save);
    ck_assert_int_eq(attn_kv_rewind(&kv, 14, 1, NULL, &u, err), ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_rewind(&kv, -1, 1, NULL, &u, err), ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_rewind(&kv, 3, 1, NULL, &u, err), ATTN_EINVAL);
    ck_assert_int_eq(kv.len, 13);
    attn_kv_free(&kv);
    attn_kv_pool_destroy(p);
    free(xa), free(xb), free(y);
    layer_free(&L);
}
END_TEST

/* tests/core/gen_decode_vectors.py's decode_rewind.bin: one sequence over
 * 64-token pages, a prompt of 5 then one token a step to 140 (across the
 * page edges at 64 and 128), then steps below the length: onto a page's
 * edge (128, 64), across one (63 + 3), the last token sent again, 9 tokens
 * from 60 past the old end, far back (10). Every op's y and attention
 * against torch (a rewind there: past_key_values cut to the position), and
 * the pages held after each op. _i 1: before every step below the length
 * (and every 16th append), a step of other tokens from up to 3 below its
 * position fails after its pass wrote the cache (undo, trim, as a 504
 * does): it leaves no trace. */
START_TEST(torch_rewinds_across_pages)
{
    const char *dir = getenv("ATTN_TEST_DATA");
    char path[1024], err[ATTN_ERRMAX], what[96];
    snprintf(path, sizeof path, "%s/core/vectors/decode_rewind.bin",
             dir ? dir : "tests");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (set ATTN_TEST_DATA)", path);
    int32_t h[7];
    float theta;
    ck_assert_uint_eq(fread(h, 4, 7, f), 7);
    ck_assert_uint_eq(fread(&theta, 4, 1, f), 1);
    int dm = h[0], H = h[1], Hk = h[2], dk = h[3], dv = h[4], rot = h[5];
    int n_ops = h[6], rewinds = 0, edges = 0;
    attn_config c = {.d_model = dm, .n_heads = H, .n_kv_heads = Hk,
                     .head_dim = dk, .v_head_dim = dv, .rope_theta = theta,
                     .rope_dims = rot};
    float *wq = rd(f, (size_t)dm * H * dk), *wk = rd(f, (size_t)dm * Hk * dk);
    float *wv = rd(f, (size_t)dm * Hk * dv), *wo = rd(f, (size_t)H * dv * dm);
    float *bq = rd(f, (size_t)H * dk), *bk = rd(f, (size_t)Hk * dk);
    float *bv = rd(f, (size_t)Hk * dv), *bo = rd(f, (size_t)dm);
    attn_weights w = {wq, wk, wv, wo, bq, bk, bv, bo, ATTN_ROWS};
    attn_kv_pool *p;
    ck_assert_int_eq(attn_kv_pool_create(&p, &c, ATTN_KV_F32, 0, 1 << 24, err),
                     0);
    ck_assert_int_eq(attn_kv_page_tokens(p), 64);
    attn_kv kv;
    attn_kv_init(&kv, p);
    for (int op = 0; op < n_ops; op++) {
        int32_t pt[2];
        ck_assert_uint_eq(fread(pt, 4, 2, f), 2);
        int pos = pt[0], t = pt[1], s = pos + t;
        ck_assert_int_le(pos, kv.len);
        float *x = rd(f, (size_t)t * dm), *wy = rd(f, (size_t)t * dm);
        float *wa = rd(f, (size_t)H * t * s);
        float *y = tu_fill((size_t)t * dm, NAN), *a = tu_fill((size_t)H * t * s, NAN);
        attn_kv_undo u;
        void *save = NULL;
        if (_i && pos > 0 && (pos < kv.len || op % 16 == 0)) {
            /* a step from a little below pos that fails after its pass
             * wrote the cache: rows the op keeps must come back */
            int len = kv.len, pages = kv.n_pages, tp = pos - (pos < 3 ? pos : 3);
            int tt = t + 3, ts = tp + tt;
            float *other = tu_fill((size_t)tt * dm, 0.5f);
            float *oy = tu_fill((size_t)tt * dm, 0);
            save = malloc(attn_kv_rewind_bytes(&kv, tp, tt) + 1);
            ck_assert_msg(attn_kv_rewind(&kv, tp, tt, save, &u, err) == 0,
                          "%s", err);
            ck_assert_int_eq(attn_kv_reserve(&kv, tt, err), 0);
            attn_seq tr = {.t = tt, .s = ts, .t_valid = tt, .s_valid = ts,
                           .causal = 1, .x = other, .y = oy, .kv = &kv};
            ck_assert_msg(attn_forward(&c, &w, &tr, 1, tu_ex, err) == 0, "%s",
                          err);
            attn_kv_rewind_undo(&kv, &u);
            attn_kv_trim(&kv);
            ck_assert_int_eq(kv.len, len);
            ck_assert_int_eq(kv.n_pages, pages);
            free(save), free(other), free(oy);
            save = NULL;
        }
        if (pos < kv.len) {
            rewinds++;
            edges += pos % 64 == 0;
            save = malloc(attn_kv_rewind_bytes(&kv, pos, t) + 1);
            ck_assert_msg(attn_kv_rewind(&kv, pos, t, save, &u, err) == 0,
                          "%s", err);
        }
        ck_assert_int_eq(kv.len, pos);
        ck_assert_int_eq(attn_kv_reserve(&kv, t, err), 0);
        attn_seq st = {.t = t, .s = s, .t_valid = t, .s_valid = s,
                       .causal = 1, .x = x, .y = y, .kv = &kv, .attention = a};
        ck_assert_msg(attn_forward(&c, &w, &st, 1, tu_ex, err) == 0, "%s", err);
        attn_kv_advance(&kv, t);
        attn_kv_trim(&kv); /* a rewind's pages past the new end go back */
        ck_assert_int_eq(kv.len, s);
        ck_assert_int_eq(kv.n_pages, (s + 63) / 64);
        ck_assert_uint_eq(attn_kv_pool_used(p), attn_kv_bytes(&kv));
        snprintf(what, sizeof what, "op %d (%d tokens at %d) y", op, t, pos);
        tu_assert_close(what, y, wy, (size_t)t * dm, 1e-5f, 1e-4f);
        snprintf(what, sizeof what, "op %d (%d tokens at %d) attention", op,
                 t, pos);
        tu_assert_close(what, a, wa, (size_t)H * t * s, 1e-6f, 1e-4f);
        free(save), free(x), free(wy), free(wa), free(y), free(a);
    }
    /* the file is what the test reads: rewinds onto page edges among them */
    ck_assert_int_ge(rewinds, 6);
    ck_assert_int_ge(edges, 2);
    ck_assert_int_eq(fgetc(f), EOF);
    fclose(f);
    attn_kv_free(&kv);
    attn_kv_pool_destroy(p);
    free(wq), free(wk), free(wv), free(wo), free(bq), free(bk), free(bv);
    free(bo);
}
END_TEST

static Suite *kv_suite(void)
{
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("kv");
    tcase_add_checked_fixture(tc, tu_exec_setup, tu_exec_teardown);
    tcase_add_loop_test(tc, rope_table_not_by_position, 0, 2);
    tcase_add_test(tc, f16_overflow_names_fp16);
    tcase_add_loop_test(tc, steps_equal_whole_f32, 0, 9);
    tcase_add_loop_test(tc, steps_equal_whole_half, 0, 4);
    tcase_add_loop_test(tc, steps_equal_whole_long, 0, 2);
    tcase_add_test(tc, batch_mixes_steps_and_stateless);
    tcase_add_test(tc, step_arguments);
    tcase_add_loop_test(tc, torch_decoder_layer, 0, 2);
    tcase_add_loop_test(tc, rewind_equals_whole, 0, 5);
    tcase_add_loop_test(tc, rewind_undo_restores, 0, 6);
    tcase_add_loop_test(tc, torch_rewinds_across_pages, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(kv_suite)

/*
 * test_model.c - core/model.c, model_cfg.c, model_repo.c:
 *   - each naming layout (canonical, nn.MultiheadAttention packed, nested
 *     and kdim != embed_dim, q_proj under a prefix, GQA + RoPE) and dtype
 *     (F16, BF16) loads to the weights PyTorch holds and, run through the
 *     engine, gives PyTorch's outputs (tests/core/model_fixtures/, made by
 *     gen_model_fixtures.py);
 *   - transposition checked against the raw tensors of the file itself;
 *   - the demo model's heads show their designed patterns on the sample;
 *   - a repository of broken folders beside good ones
 *     (tests/core/model_corpus/, made by make_model_corpus.py): the exact
 *     error for each, the good ones still load;
 *   - loading from memory (names and model_opendir: test_model_repo.c;
 *     the config against the weights: test_model_cfg.c);
 *   - a wide layer's matrices in column panels (attn.h, ATTN_PANELS).
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/model.h"
#include "core/st.h"
#include "tests/check_main.h"
#include "tests/core/st_build.h"
#include "tests/tu_file.h"

static const char *root(void)
{
    const char *r = getenv("ATTN_TEST_DATA");
    return r ? r : "tests";
}

/* path: "<ATTN_TEST_DATA>/core/<a>/<b>" in one of a few rotating buffers. */
static const char *path(const char *a, const char *b)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/core/%s%s%s", root(), a, b ? "/" : "",
             b ? b : "");
    return buf[k];
}

/* tensor: all of name from f as floats (malloc'd), with its count. */
static float *tensor(const st_file *f, const char *name, size_t *n)
{
    const st_tensor *t = st_find(f, name);
    if (!t)
        return NULL;
    float *p = malloc((size_t)t->count * sizeof(float) + 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(st_to_f32(t, p), 0);
    if (n)
        *n = (size_t)t->count;
    return p;
}

static void assert_close(const char *what, const float *a, const float *b,
                         size_t n, float atol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= atol))
            ck_abort_msg("%s[%zu] = %.7g, expected %.7g", what, i,
                         (double)a[i], (double)b[i]);
}

static const struct {
    const char *name, *layout;
    int causal;
    float f32_tol; /* y vs PyTorch with unrounded weights (F16/BF16 only) */
} cases[] = {
    {"canonical", "canonical", 0, 0},
    {"mha", "nn.MultiheadAttention", 0, 0},
    {"mha_nested", "nn.MultiheadAttention", 0, 0},
    {"qproj", "q_proj", 0, 0},
    {"cross", "nn.MultiheadAttention", 0, 0},
    {"gqa_rope", "q_proj", 1, 0},
    {"llama", "canonical", 1, 0},
    {"f16", "canonical", 0, 1e-3f},
    {"bf16", "q_proj", 0, 8e-3f},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* run: y and attention of m on x (t rows) and context (s rows or NULL). */
static void run(const model *m, const float *x, int t, const float *ctx,
                int s, int causal, float *y, float *att)
{
    char err[ATTN_ERRMAX];
    attn_seq q = {.t = t, .s = ctx ? s : t, .t_valid = t,
                  .s_valid = ctx ? s : t, .causal = causal, .x = x,
                  .context = ctx, .y = y, .attention = att};
    int rc = attn_forward(model_config(m), model_weights(m), &q, 1, NULL,
                          err);
    ck_assert_msg(rc == 0, "attn_forward: %s", err);
}

START_TEST(test_fixture)
{
    char err[ATTN_ERRMAX];
    const char *name = cases[_i].name;
    model *m;
    int rc = model_load(&m, path("model_fixtures", name), err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    st_file *e;
    char ep[1100];
    snprintf(ep, sizeof ep, "%s/expected.safetensors",
             path("model_fixtures", name));
    ck_assert_msg(st_open(&e, ep, err) == 0, "%s", err);
    const attn_config *c = model_config(m);
    ck_assert_str_eq(model_layout(m), cases[_i].layout);
    ck_assert_int_eq(model_causal(m), cases[_i].causal);

    /* the weights, exactly as PyTorch holds them (rounded for F16/BF16) */
    static const char *const roles[] = {"W_q", "W_k", "W_v", "W_o",
                                        "b_q", "b_k", "b_v", "b_o"};
    const attn_weights *w = model_weights(m);
    const float *got[] = {w->w_q, w->w_k, w->w_v, w->w_o,
                          w->b_q, w->b_k, w->b_v, w->b_o};
    const st_tensor *wq = st_find(e, "W_q"), *wk = st_find(e, "W_k"),
                    *wv = st_find(e, "W_v");
    ck_assert_int_eq(c->d_model, (int)wq->shape[0]);
    ck_assert_int_eq(c->d_model_ctx, (int)wk->shape[0]);
    ck_assert_int_eq(c->n_heads * c->head_dim, (int)wq->shape[1]);
    ck_assert_int_eq(c->n_kv_heads * c->head_dim, (int)wk->shape[1]);
    ck_assert_int_eq(c->n_kv_heads * c->v_head_dim, (int)wv->shape[1]);
    for (int r = 0; r < 8; r++) {
        size_t n;
        float *want = tensor(e, roles[r], &n);
        if (!want && r >= 4) { /* a layer without this bias */
            ck_assert_msg(!got[r], "%s: %s loaded, none exported", name,
                          roles[r]);
            continue;
        }
        ck_assert_ptr_nonnull(want);
        ck_assert_ptr_nonnull(got[r]);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(got[r][i] == want[i], "%s %s[%zu] = %g, want %g",
                          name, roles[r], i, (double)got[r][i],
                          (double)want[i]);
        free(want);
    }

    /* the outputs, against PyTorch's */
    size_t nx, nc = 0, ny, na;
    float *x = tensor(e, "x", &nx), *ctx = tensor(e, "context", &nc);
    float *yw = tensor(e, "y", &ny), *aw = tensor(e, "attention", &na);
    int t = (int)(nx / (size_t)c->d_model);
    int s = ctx ? (int)(nc / (size_t)c->d_model_ctx) : t;
    float *y = calloc(ny, sizeof *y), *a = calloc(na, sizeof *a);
    run(m, x, t, ctx, s, 0, y, a);
    assert_close("y", y, yw, ny, 2e-5f);
    assert_close("attention", a, aw, na, 2e-6f);
    free(yw);
    free(aw);
    yw = tensor(e, "y_causal", NULL);
    aw = tensor(e, "attention_causal", NULL);
    run(m, x, t, ctx, s, 1, y, a);
    assert_close("y_causal", y, yw, ny, 2e-5f);
    assert_close("attention_causal", a, aw, na, 2e-6f);
    free(yw);
    free(aw);
    float *yf = tensor(e, "y_f32", NULL);
    ck_assert_int_eq(yf != NULL, cases[_i].f32_tol > 0);
    if (yf) { /* to the file's precision, against the F32 layer */
        run(m, x, t, ctx, s, 0, y, a);
        assert_close("y vs F32 weights", y, yf, ny, cases[_i].f32_tol);
        free(yf);
    }
    free(x);
    free(ctx);
    free(y);
    free(a);
    st_close(e);
    model_destroy(m);
}
END_TEST

/* Transposition, against the tensors of the file itself (no PyTorch). */
START_TEST(test_transpose_raw)
{
    char err[ATTN_ERRMAX], p[1100];
    model *m;
    st_file *f;
    ck_assert_int_eq(model_load(&m, path("model_fixtures", "mha"), err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors",
             path("model_fixtures", "mha"));
    ck_assert_int_eq(st_open(&f, p, err), 0);
    size_t n;
    float *in = tensor(f, "in_proj_weight", &n), *ib = tensor(f,
                                                             "in_proj_bias",
                                                             NULL);
    float *ow = tensor(f, "out_proj.weight", NULL);
    const int D = 32;
    ck_assert_uint_eq(n, 3 * D * D);
    const attn_weights *w = model_weights(m);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            ck_assert(w->w_q[i * D + j] == in[j * D + i]);
            ck_assert(w->w_k[i * D + j] == in[(D + j) * D + i]);
            ck_assert(w->w_v[i * D + j] == in[(2 * D + j) * D + i]);
            ck_assert(w->w_o[i * D + j] == ow[j * D + i]);
        }
    for (int j = 0; j < D; j++)
        ck_assert(w->b_k[j] == ib[D + j] && w->b_v[j] == ib[2 * D + j]);
    free(in);
    free(ib);
    free(ow);
    st_close(f);
    model_destroy(m);

    /* q_proj layout under the prefix, beside other layers */
    ck_assert_int_eq(model_load(&m, path("model_fixtures", "qproj"), err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors",
             path("model_fixtures", "qproj"));
    ck_assert_int_eq(st_open(&f, p, err), 0);
    float *q = tensor(f, "model.layers.1.self_attn.q_proj.weight", NULL);
    float *o = tensor(f, "model.layers.1.self_attn.o_proj.weight", NULL);
    w = model_weights(m);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            ck_assert(model_weights(m)->w_q[i * D + j] == q[j * D + i]);
            ck_assert(w->w_o[i * D + j] == o[j * D + i]);
        }
    free(q);
    free(o);
    st_close(f);
    model_destroy(m);
}
END_TEST

/* The demo's heads on the sample sentence "the cat sat on the mat because
 * it was tired": self, previous token, first token, same content. */
START_TEST(test_demo)
{
    char err[ATTN_ERRMAX], dir[1024], p[1100];
    const char *md = getenv("ATTN_MODELS");
    snprintf(dir, sizeof dir, "%s/demo", md ? md : "models");
    model *m;
    ck_assert_msg(model_load(&m, dir, err) == 0, "%s", err);
    const attn_config *c = model_config(m);
    ck_assert_int_eq(c->d_model, 64);
    ck_assert_int_eq(c->n_heads, 4);
    ck_assert_int_eq(c->head_dim, 16);
    ck_assert_int_eq(model_causal(m), 0);
    ck_assert_ptr_nonnull(strstr(model_description(m), "previous token"));
    snprintf(p, sizeof p, "%s/demo_sample.safetensors",
             path("model_fixtures", NULL));
    st_file *f;
    ck_assert_int_eq(st_open(&f, p, err), 0);
    size_t n;
    float *x = tensor(f, "x", &n);
    const int T = 10;
    ck_assert_uint_eq(n, T * 64);
    float *y = calloc(T * 64, sizeof *y), *a = calloc(4 * T * T, sizeof *a);
    run(m, x, T, NULL, 0, 0, y, a);
    static const int want[4][10] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
        {0, 0, 1, 2, 3, 4, 5, 6, 7, 8},
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {4, 1, 2, 3, 0, 5, 6, 7, 8, 9}, /* the two "the"s find each other */
    };
    for (int h = 0; h < 4; h++)
        for (int i = 0; i < T; i++) {
            const float *row = a + ((size_t)h * T + i) * T;
            int best = 0;
            for (int j = 1; j < T; j++)
                if (row[j] > row[best])
                    best = j;
            ck_assert_msg(best == want[h][i], "head %d token %d: argmax %d",
                          h, i, best);
            ck_assert_msg(row[best] > 0.5f, "head %d token %d: weight %g", h,
                          i, (double)row[best]);
        }
    free(x);
    free(y);
    free(a);
    st_close(f);
    model_destroy(m);
}
END_TEST

/* what a shape error of the canonical layout adds: a weight saved in
 * PyTorch's (out, in) orientation is its usual cause */
#define CANON_T                                                              \
    "; the canonical names hold (in, out) weights (Q = X W_q): a PyTorch "   \
    "Linear's weight, (out, in), is W_q transposed (name it q_proj.weight, " \
    "or export with tools/export_torch.py)"

/* Broken folders of the corpus and the exact message after the folder's
 * path ("<repo>/<name>") each must give. */
static const struct {
    const char *name, *msg;
} broken[] = {
    {"add_bias_kv", "/model.safetensors: tensors bias_k/bias_v found: "
                    "nn.MultiheadAttention with add_bias_kv=True is not "
                    "supported"},
    {"bad_file", "/model.safetensors: tensors end at byte 0 of the data but "
                 "the file has 2 data bytes (2 trailing) (rule: last tensor "
                 "ends at end of file)"},
    {"bias_length", "/model.safetensors: b_q (from 'b_q' [6]) has 6 "
                    "elements but must have 8 (the outputs of W_q)"},
    {"config_bad_type", "/config.json: n_heads must be a positive integer "
                        "(at most 16777216)"},
    {"config_bad_scale", "/config.json: scale must be a positive number "
                         "that a float holds (1.4e-45 to 3.4e38)"},
    {"config_bad_causal", "/config.json: causal must be true or false"},
    {"config_bad_rope", "/config.json: rope: unknown key 'base' (known: "
                        "theta, dims)"},
    {"config_duplicate", "/config.json: not valid JSON: duplicate object key "
                         "near '\"n_heads\"' (line 1, column 24)"},
    {"config_not_json", "/config.json: not valid JSON: string or '}' "
                        "expected near end of file (line 1, column 14)"},
    {"config_unknown_key",
     "/config.json: unknown key 'num_heads' (known: n_heads, n_kv_heads, "
     "head_dim, v_head_dim, causal, rope, scale, prefix, description)"},
    {"context_mismatch", "/model.safetensors: W_k (from 'W_k' [8, 8]) takes "
                         "8 inputs but W_v (from 'W_v' [6, 8]) takes 6; keys "
                         "and values read the same context" CANON_T},
    {"dtype", "/model.safetensors: tensor 'W_q' has dtype F64; attnd loads "
              "F32, F16 or BF16 (convert the file, e.g. with "
              "tools/export_torch.py)"},
    {"head_dim_conflict", "/model.safetensors: head_dim is 2 in the config "
                          "but W_q (from 'W_q' [8, 8]) has 8 outputs / "
                          "n_heads 2 = 4"},
    {"heads_not_dividing", "/model.safetensors: W_q (from 'W_q' [8, 8]) has "
                           "8 outputs, not a positive multiple of n_heads "
                           "3"},
    {"in_proj_shape", "/model.safetensors: tensor 'in_proj_weight' [8, 8] "
                      "must be (3 * embed_dim, embed_dim)"},
    {"kv_heads_conflict", "/model.safetensors: n_kv_heads is 1 in the config "
                          "but W_k (from 'W_k' [8, 8]) has 8 outputs / "
                          "head_dim 4 = 2"},
    {"kv_not_dividing", "/model.safetensors: 3 key/value heads (W_k from "
                        "'W_k' [8, 12]) do not divide n_heads 2" CANON_T},
    {"layers_ambiguous",
     "/model.safetensors: no attention weights at the top level but 2 layers "
     "inside (prefixes 'l.0.', 'l.1.'); set \"prefix\" in config.json to the "
     "one to serve, e.g. {\"prefix\": \"l.0.\"}"},
    {"missing_w_v", "/model.safetensors: missing tensor for W_v; the "
                    "canonical layout needs W_q, W_k, W_v, W_o (+ optional "
                    "b_q, b_k, b_v, b_o)"},
    {"mixed_layouts", "/model.safetensors: tensors of more than one naming "
                      "layout (W_q... q_proj.weight...); a weight set uses "
                      "one"},
    {"nested_mixed", "/model.safetensors: tensors of more than one naming "
                     "layout (W_q... q_proj.weight...); a weight set uses "
                     "one"},
    {"nan", "/model.safetensors: b_q (from 'b_q') has a non-finite value "
            "(NaN) at [5]; weights must be finite"},
    {"prefix_wrong", "/model.safetensors: no attention weights under prefix "
                     "'layers.9.'; expected W_q..., in_proj_weight... or "
                     "q_proj.weight... after it"},
    {"qproj_transposed",
     "/model.safetensors: W_k (from 'k_proj.weight' [8, 4]) takes 4 inputs "
     "but W_v (from 'v_proj.weight' [4, 8]) takes 8; keys and values read "
     "the same context; q_proj.weight... hold PyTorch's (out, in) weights: "
     "one saved (in, out) is transposed (the canonical W_q... names take "
     "that orientation)"},
    {"rank", "/model.safetensors: tensor 'W_q' [2, 4, 8] must have 2 "
             "dimensions for W_q"},
    {"rope_dims", "/model.safetensors: rope.dims 6 must be even and at most "
                  "head_dim 4 (0 = all of an even head_dim)"},
    {"stray_tensor", "/model.safetensors: unexpected tensor 'W_z' (the "
                     "canonical layout uses W_q, W_k, W_v, W_o (+ optional "
                     "b_q, b_k, b_v, b_o)); remove it, or set \"prefix\" to "
                     "serve one layer of a bigger file"},
    {"w_o_shape", "/model.safetensors: W_o (from 'W_o' [8, 6]) is (8, 6) but "
                  "must be (n_heads 2 x v_head_dim 4, d_model 8)" CANON_T},
};
#define N_BROKEN (int)(sizeof broken / sizeof broken[0])

START_TEST(test_broken)
{
    char err[ATTN_ERRMAX], want[2048];
    const char *dir = path("model_corpus", broken[_i].name);
    model *m = (model *)1;
    ck_assert_int_lt(model_load(&m, dir, err), 0);
    ck_assert_ptr_null(m);
    snprintf(want, sizeof want, "%s%s", dir, broken[_i].msg);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(test_broken_special)
{
    char err[ATTN_ERRMAX], want[2048];
    model *m;
    const char *d = path("model_corpus", "no_file");
    ck_assert_int_eq(model_load(&m, d, err), ATTN_ENOTFOUND);
    snprintf(want, sizeof want,
             "%s: no model.safetensors; expected layout: %s/model.safetensors"
             " (+ optional %s/config.json)",
             d, d, d);
    ck_assert_str_eq(err, want);
    d = path("model_corpus", "no_n_heads");
    ck_assert_int_eq(model_load(&m, d, err), ATTN_ENOTFOUND);
    snprintf(want, sizeof want,
             "%s/config.json: missing, and %s/model.safetensors __metadata__ "
             "has no n_heads; create it, e.g. {\"n_heads\": 8}",
             d, d);
    ck_assert_str_eq(err, want);
    d = path("model_corpus", "config_vs_metadata");
    ck_assert_int_eq(model_load(&m, d, err), ATTN_EFORMAT);
    snprintf(want, sizeof want,
             "n_heads: %s/config.json says 2 but %s/model.safetensors "
             "__metadata__ says 4",
             d, d);
    ck_assert_str_eq(err, want);
    /* no folder of the name (a name mistyped) is said so: "not a folder"
     * sent the user looking for a file of the name */
    ck_assert_int_eq(model_load(&m, path("model_corpus", "nope"), err),
                     ATTN_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "/nope: no such folder; a model is a "
                                      "folder holding model.safetensors"));
    ck_assert_ptr_null(strstr(err, "not a folder"));
    /* a file of the name is not a folder */
    ck_assert_int_eq(model_load(&m, path("model_corpus", "good/model.safetensors"),
                                err),
                     ATTN_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "model.safetensors: not a folder; a "
                                      "model is a folder"));

    /* a folder where a file belongs is the model's fault (ATTN_EFORMAT:
     * 400), not the disk's or the permissions' (ATTN_EIO: 503) */
    char tmp[1024], p[1200], good[PATH_MAX];
    tu_tmp(tmp, sizeof tmp, "attn_model_dirs_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(model_load(&m, tmp, err), ATTN_EFORMAT);
    snprintf(want, sizeof want, "%s: not a regular file", p);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(rmdir(p), 0);
    ck_assert_ptr_nonnull(realpath(path("model_corpus", "good/model.safetensors"),
                                   good));
    ck_assert_int_eq(symlink(good, p), 0);
    snprintf(p, sizeof p, "%s/config.json", tmp);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(model_load(&m, tmp, err), ATTN_EFORMAT);
    snprintf(want, sizeof want, "%s: a folder, not a file", p);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(rmdir(p), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(rmdir(tmp), 0);
}
END_TEST

/* Good folders beside the broken ones still load; the repository check
 * names every folder once and counts the broken ones. */
START_TEST(test_repo)
{
    char err[ATTN_ERRMAX];
    const char *repo = path("model_corpus", NULL);
    model *m;
    ck_assert_int_eq(model_load_repo(&m, repo, "good", err), 0);
    ck_assert_int_eq(model_config(m)->n_kv_heads, 2);
    ck_assert_str_eq(model_description(m), "");
    model_destroy(m);
    ck_assert_int_eq(model_load_repo(&m, repo, "good_gqa", err), 0);
    ck_assert_int_eq(model_config(m)->n_kv_heads, 1);
    ck_assert_int_eq(model_config(m)->head_dim, 4);
    ck_assert(model_config(m)->scale == 0.25f);
    model_destroy(m);
    ck_assert_int_eq(model_load_repo(&m, repo, "good_metadata", err), 0);
    ck_assert_int_eq(model_causal(m), 1);
    ck_assert(model_config(m)->rope_theta == 500000.0f);
    ck_assert_int_eq(model_config(m)->rope_dims, 2);
    ck_assert_str_eq(model_description(m), "from meta");
    model_destroy(m);
    ck_assert_int_eq(model_load_repo(&m, repo, "bad@name", err), ATTN_EINVAL);
    ck_assert_int_eq(model_load_repo(&m, repo, "../model_fixtures/mha", err),
                     ATTN_EINVAL);
    /* a repository that is missing or a file is named, not the model's
     * folder in it ("<repo>/good: not a folder") */
    const char *gone = path("no_such_repo", NULL);
    ck_assert_int_eq(model_load_repo(&m, gone, "good", err), ATTN_ENOTFOUND);
    char want[1200];
    snprintf(want, sizeof want, "%s: cannot read the model repository: No "
             "such file or directory; create it, or point --models at the "
             "repository (an upload creates it)", gone);
    ck_assert_str_eq(err, want);
    const char *file = path("model_corpus", "good/model.safetensors");
    ck_assert_int_eq(model_load_repo(&m, file, "good", err), ATTN_ENOTFOUND);
    snprintf(want, sizeof want, "%s: cannot read the model repository: Not "
             "a directory; point --models at a folder of model folders", file);
    ck_assert_str_eq(err, want);
    ck_assert_ptr_null(m);

    char **names;
    int n = model_repo_list(repo, &names, err);
    ck_assert_int_eq(n, N_BROKEN + 3 + 4); /* + good, no_file, bad@name... */
    for (int i = 1; i < n; i++)
        ck_assert_int_lt(strcmp(names[i - 1], names[i]), 0);
    model_repo_list_free(names, n);

    /* An empty repository is no error: zero models. */
    char empty[1024];
    tu_tmp(empty, sizeof empty, "attn_empty_repo_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(empty));
    ck_assert_int_eq(model_repo_list(empty, &names, err), 0);
    model_repo_list_free(names, 0);
    rmdir(empty);

    char *out = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&out, &len);
    int bad = model_check_repo(repo, fp, NULL);
    fclose(fp);
    ck_assert_int_eq(bad, n - 3);
    int lines = 0, oks = 0;
    for (char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    for (char *p = out; (p = strstr(p, ": ok (")); p++)
        oks++;
    ck_assert_int_eq(lines, n);
    ck_assert_int_eq(oks, 3);
    ck_assert_ptr_nonnull(strstr(out, "good_gqa: ok (d_model 8, 2 heads x "
                                      "4, 1 kv head, v_head_dim 4, "
                                      "canonical, 0.8 KiB)\n"));
    ck_assert_ptr_nonnull(strstr(out, "\nbad@name: invalid model name"));
    free(out);
    /* a folder with the caller's built-in model's name is not served:
     * reported and counted, whatever it holds */
    fp = open_memstream(&out, &len);
    ck_assert_int_eq(model_check_repo(repo, fp, "good"), n - 3 + 1);
    fclose(fp);
    ck_assert_ptr_nonnull(strstr(out, "\ngood: not served: 'good' is the "
                                      "built-in model (rename the folder to "
                                      "serve it)\n"));
    ck_assert_ptr_null(strstr(out, "\ngood: ok"));
    free(out);
    fp = open_memstream(&out, &len);
    ck_assert_int_eq(model_check_repo(path("no_such_repo", NULL), fp, NULL),
                     ATTN_ENOTFOUND);
    fclose(fp);
    ck_assert_ptr_nonnull(strstr(out, "no_such_repo: cannot read the model "
                                      "repository: No such file or "
                                      "directory; create it, or point "
                                      "--models at the repository (an upload "
                                      "creates it)\n"));
    free(out);
}
END_TEST

START_TEST(test_load_mem)
{
    char err[ATTN_ERRMAX], p[1100];
    const char *d = path("model_fixtures", "mha");
    size_t sl, cl;
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    char *st = tu_slurp(p, &sl);
    snprintf(p, sizeof p, "%s/config.json", d);
    char *cfg = tu_slurp(p, &cl);
    model *a, *b;
    ck_assert_int_eq(model_load(&a, d, err), 0);
    ck_assert_msg(model_load_mem(&b, "upload", cfg, cl, st, sl, err) == 0,
                  "%s", err);
    ck_assert_uint_eq(model_bytes(a), model_bytes(b));
    ck_assert(memcmp(model_weights(a)->w_v, model_weights(b)->w_v,
                     32 * 32 * sizeof(float)) == 0);
    model_destroy(b);
    ck_assert_int_eq(model_load_mem(&b, "upload", "{\"n_heads\": 3}", 14, st,
                                    sl, err),
                     ATTN_EFORMAT);
    ck_assert_str_eq(err, "upload/model.safetensors: W_q (from "
                          "'in_proj_weight' [96, 32]) has 32 outputs, not a "
                          "positive multiple of n_heads 3");
    ck_assert_int_eq(model_load_mem(&b, "upload", NULL, 0, st, sl, err),
                     ATTN_ENOTFOUND);
    ck_assert_int_eq(model_load_mem(&b, "upload", cfg, cl, st, sl - 1, err),
                     ATTN_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "upload/model.safetensors: tensor "));
    ck_assert_ptr_nonnull(strstr(err, "the file is truncated"));
    model_destroy(a);
    free(st);
    free(cfg);
}
END_TEST

/* A layer wide enough for several column panels per matrix (d_model 300,
 * 5 heads of 64): every weight lands where attn.h's ATTN_PANELS says. */
START_TEST(test_wide_panels)
{
    enum { DM = 300, HD = 320 };
    const char *names[4] = {"W_q", "W_k", "W_v", "W_o"};
    size_t n = (size_t)DM * HD, at = 0;
    char hdr[1024];
    for (int r = 0; r < 4; r++)
        at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                               "\"data_offsets\":[%zu,%zu]}",
                               r ? "," : "{", names[r], r < 3 ? DM : HD,
                               r < 3 ? HD : DM, r * n * 4, (r + 1) * n * 4);
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "}");
    while (at % 8)
        hdr[at++] = ' ';
    size_t sl = 8 + at + 4 * n * sizeof(float);
    unsigned char *st = malloc(sl);
    ck_assert_ptr_nonnull(st);
    for (int b = 0; b < 8; b++)
        st[b] = (unsigned char)((uint64_t)at >> (8 * b));
    memcpy(st + 8, hdr, at);
    for (size_t i = 0; i < 4 * n; i++) {
        float v = (float)((i / n) * 100000 + i % n); /* exact in F32 */
        memcpy(st + 8 + at + i * sizeof(float), &v, sizeof v);
    }
    char err[ATTN_ERRMAX];
    const char *cfg = "{\"n_heads\": 5}";
    model *m;
    ck_assert_msg(model_load_mem(&m, "wide", cfg, strlen(cfg), st, sl, err) ==
                      0,
                  "%s", err);
    const attn_weights *w = model_weights(m);
    const float *mat[4] = {w->w_q, w->w_k, w->w_v, w->w_o};
    ck_assert_int_eq(w->layout, ATTN_PANELS);
    for (int r = 0; r < 4; r++) {
        size_t rows = r < 3 ? DM : HD, width = r < 3 ? HD : DM;
        size_t pw = (size_t)attn_panel_cols(model_config(m), ATTN_W_Q + r);
        ck_assert_msg(pw < width, "%s: one panel", names[r]);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < width; j++) {
                size_t p0 = j - j % pw, pwj = width - p0 < pw ? width - p0 : pw;
                float want = (float)((size_t)r * 100000 + i * width + j);
                ck_assert_msg(mat[r][p0 * rows + i * pwj + j - p0] == want,
                              "%s (%zu, %zu)", names[r], i, j);
            }
    }
    model_destroy(m);
    free(st);
}
END_TEST

/* Every single-byte change to the header of a good model file (and to its
 * config) loads or fails with a message naming the upload; the sanitizers
 * catch anything worse. */
START_TEST(test_mutations)
{
    char err[ATTN_ERRMAX], p[1100];
    const char *d = path("model_corpus", "good");
    size_t sl, cl;
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    char *st = tu_slurp(p, &sl), *c = malloc(sl);
    snprintf(p, sizeof p, "%s/config.json", d);
    char *cfg = tu_slurp(p, &cl), *cc = malloc(cl);
    size_t hdr = 8 + (size_t)(unsigned char)st[0] +
                 256 * (size_t)(unsigned char)st[1];
    static const char vals[] = {'\0', '"', ',', '0', '9', ':', '[', ']',
                                '{', '}', 'W', '-', (char)0xff};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < hdr + 8 && i < sl; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(c, st, sl);
            c[i] = vals[v];
            model *m;
            int rc = model_load_mem(&m, "upload", cfg, cl, c, sl, err);
            if (rc == 0) {
                ok++;
                model_destroy(m);
            } else {
                bad++;
                ck_assert_msg(strncmp(err, "upload/", 7) == 0 ||
                                  strncmp(err, "n_heads", 7) == 0,
                              "%s", err);
            }
        }
    for (size_t i = 0; i < cl; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(cc, cfg, cl);
            cc[i] = vals[v];
            model *m;
            if (model_load_mem(&m, "upload", cc, cl, st, sl, err) == 0)
                model_destroy(m);
        }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(bad, 0);
    free(st);
    free(c);
    free(cfg);
    free(cc);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_loop_test(tc, test_fixture, 0, N_CASES);
    tcase_add_test(tc, test_transpose_raw);
    tcase_add_test(tc, test_demo);
    tcase_add_loop_test(tc, test_broken, 0, N_BROKEN);
    tcase_add_test(tc, test_broken_special);
    tcase_add_test(tc, test_repo);
    tcase_add_test(tc, test_load_mem);
    tcase_add_test(tc, test_wide_panels);
    tcase_add_test(tc, test_mutations);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

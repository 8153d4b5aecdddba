/*
 * test_attn.c - the engine (core/attn.c) against the seeds' worked numbers
 * and PyTorch 1.13 reference vectors (tests/core/gen_vectors.py), on every
 * path: materialised maps, fused, scores-only, fused on the executor.
 * Properties and bad arguments: test_attn_props.c.
 */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/exec.h"
#include "core/kernel.h"
#include "testutil.h"
#include "tests/check_main.h"

enum { PATH_MAPS, PATH_FUSED, PATH_SCORES, PATH_EXEC, N_PATHS };
static const char *path_name[N_PATHS] = {"maps", "fused", "scores-only",
                                         "fused-exec"};

/* One head of raw SDPA on the given path; att/sc may be NULL except on
 * PATH_MAPS where att is required. */
static void raw1(int dk, int dv, float scale, int t, int s, const float *q,
                 const float *k, const float *v, const uint8_t *mask,
                 int causal, float *y, float *att, float *sc, int path)
{
    attn_config c = {
        .n_heads = 1, .head_dim = dk, .v_head_dim = dv, .scale = scale};
    attn_raw r = {.t = t,
                  .s = s,
                  .causal = causal,
                  .q = q,
                  .k = k,
                  .v = v,
                  .mask = mask,
                  .y = y};
    if (path == PATH_MAPS)
        r.attention = att, r.scores = sc;
    if (path == PATH_SCORES)
        r.scores = sc;
    char err[ATTN_ERRMAX] = "";
    int rc = attn_forward_raw(&c, &r, 1, path == PATH_EXEC ? tu_ex : NULL, err);
    ck_assert_msg(rc == 0, "attn_forward_raw: %s", err);
}

/* ---- the seeds' worked numbers ---------------------------------------- */

START_TEST(seed_000_t2_dk4)
{
    const float q[] = {2, 0, 2, 0, 0, 4, 0, 2};
    const float k[] = {1, 0, 1, 0, 0, 1, 0, 0};
    const float v[] = {1, 2, 3, 0};
    const float w4[] = {0.8808f, 0.1192f, 0.1192f, 0.8808f};
    const float w6[] = {0.880797f, 0.119202f, 0.119202f, 0.880797f};
    const float y4[] = {1.2384f, 1.7616f, 2.7616f, 0.2384f};
    for (int path = 0; path < N_PATHS; path++) {
        float y[4], a[4] = {0}, sc[4];
        raw1(4, 2, 0, 2, 2, q, k, v, NULL, 0, y, a, sc, path);
        for (int i = 0; i < 4; i++) {
            tu_assert_printed(path_name[path], y[i], y4[i], 4);
            if (path == PATH_MAPS) {
                tu_assert_printed("weight", a[i], w4[i], 4);
                /* the seed's 6 digits are truncated, not rounded */
                ck_assert(fabs(a[i] - w6[i]) < 1e-6);
                ck_assert(fabsf(sc[i] - (i == 0 || i == 3 ? 2.0f : 0.0f)) <
                          1e-6f);
            }
        }
    }
}
END_TEST

START_TEST(seed_000_exercise2)
{
    /* q . k over 2 dims, but the exercise scales by sqrt(d_k = 4) = 2 */
    const float q[] = {1, 2}, k[] = {2, 1, 0, 2}, v[] = {10, 0, 0, 20};
    for (int path = 0; path < N_PATHS; path++) {
        float y[2], a[2];
        raw1(2, 2, 0.5f, 1, 2, q, k, v, NULL, 0, y, a, NULL, path);
        tu_assert_printed("y0", y[0], 5.0, 1);
        tu_assert_printed("y1", y[1], 10.0, 1);
        if (path == PATH_MAPS) {
            tu_assert_printed("p0", a[0], 0.50, 2);
            tu_assert_printed("p1", a[1], 0.50, 2);
        }
    }
}
END_TEST

/* Q = K, three tokens, d_k = 2: weights and outputs printed to 3 digits. */
static void seed_three(const float *qk, const float *v, const float *w3,
                       const float *y3)
{
    for (int path = 0; path < N_PATHS; path++) {
        float y[6], a[9];
        raw1(2, 2, 0, 3, 3, qk, qk, v, NULL, 0, y, a, NULL, path);
        for (int i = 0; i < 6; i++)
            tu_assert_printed(path_name[path], y[i], y3[i], 3);
        if (path == PATH_MAPS)
            for (int i = 0; i < 9; i++)
                tu_assert_printed("weight", a[i], w3[i], 3);
    }
}

START_TEST(seed_001_three_tokens)
{
    const float qk[] = {1, 0, 0, 1, 1, 1};
    const float v[] = {1, 0, 0, 2, 3, 1};
    const float w3[] = {0.401f, 0.198f, 0.401f, 0.198f, 0.401f,
                        0.401f, 0.248f, 0.248f, 0.503f};
    const float y3[] = {1.604f, 0.797f, 1.401f, 1.203f, 1.759f, 1.000f};
    seed_three(qk, v, w3, y3);
}
END_TEST

START_TEST(seed_002_three_tokens)
{
    const float qk[] = {1, 0, 1, 1, 0, 1};
    const float v[] = {1, 0, 0, 1, 1, 1};
    const float w3[] = {0.401f, 0.401f, 0.198f, 0.248f, 0.503f,
                        0.248f, 0.198f, 0.401f, 0.401f};
    const float y3[] = {0.599f, 0.599f, 0.497f, 0.752f, 0.599f, 0.802f};
    seed_three(qk, v, w3, y3);
}
END_TEST

START_TEST(seed_001_knowledge_check)
{
    /* scores [2, 2, 0]: d_k = 1, scale 1, q = 1, keys 2, 2, 0 */
    const float q[] = {1}, k[] = {2, 2, 0}, v[] = {1, 2, 3};
    float y[1], a[3];
    raw1(1, 1, 1.0f, 1, 3, q, k, v, NULL, 0, y, a, NULL, PATH_MAPS);
    tu_assert_printed("w0", a[0], 0.468, 3);
    tu_assert_printed("w1", a[1], 0.468, 3);
    tu_assert_printed("w2", a[2], 0.063, 3);
}
END_TEST

/* The seed 000 example through the full layer: cross-attention where the
 * context rows are [k | v] and W_k, W_v select their halves, W_q = I and
 * W_o = [I | 0]. */
START_TEST(seed_000_through_layer)
{
    const float x[] = {2, 0, 2, 0, 0, 4, 0, 2};
    const float ctx[] = {1, 0, 1, 0, 1, 2, 0, 1, 0, 0, 3, 0};
    float wq[16] = {0}, wk[24] = {0}, wv[12] = {0}, wo[8] = {0};
    for (int i = 0; i < 4; i++)
        wq[i * 4 + i] = 1, wk[i * 4 + i] = 1;
    wv[4 * 2 + 0] = 1, wv[5 * 2 + 1] = 1;
    wo[0] = 1, wo[4 + 1] = 1;
    attn_config c = {.d_model = 4,
                     .d_model_ctx = 6,
                     .n_heads = 1,
                     .n_kv_heads = 1,
                     .head_dim = 4,
                     .v_head_dim = 2};
    attn_weights w = {.w_q = wq, .w_k = wk, .w_v = wv, .w_o = wo};
    const float y4[] = {1.2384f, 1.7616f, 0, 0, 2.7616f, 0.2384f, 0, 0};
    for (int path = 0; path < N_PATHS; path++) {
        float y[8], a[4];
        attn_seq s = {.t = 2,
                      .s = 2,
                      .t_valid = 2,
                      .s_valid = 2,
                      .x = x,
                      .context = ctx,
                      .y = y};
        if (path == PATH_MAPS)
            s.attention = a;
        char err[ATTN_ERRMAX] = "";
        ck_assert_msg(attn_forward(&c, &w, &s, 1,
                                   path == PATH_EXEC ? tu_ex : NULL, err) == 0,
                      "%s", err);
        for (int i = 0; i < 8; i++)
            tu_assert_printed(path_name[path], y[i], y4[i], 4);
    }
}
END_TEST

/* ---- PyTorch reference vectors ---------------------------------------- */

typedef struct vtensor {
    char name[32];
    long off, n;
} vtensor;

typedef struct vcase {
    char name[64];
    int d_model, d_ctx, n_heads, n_kv_heads, head_dim, v_head_dim;
    int b, t, s, causal, cross, rope_dims, raw;
    int exact; /* the scores bit for bit (tests/core/gen_vectors.py) */
    double rope_theta;
    int tv[8], sv[8];
    vtensor ten[24];
    int n_ten;
} vcase;

static vcase g_cases[32];
static int g_ncases;
static float *g_data;
static long g_nfloats;

static void parse_ints(const char *v, int *out, int max)
{
    for (int i = 0; i < max && *v; i++) {
        out[i] = atoi(v);
        v = strchr(v, ',');
        if (!v)
            break;
        v++;
    }
}

/* Integer keys of a case line, by name. */
static const struct {
    const char *name;
    size_t off;
} int_keys[] = {
    {"d_model", offsetof(vcase, d_model)},
    {"d_ctx", offsetof(vcase, d_ctx)},
    {"n_heads", offsetof(vcase, n_heads)},
    {"n_kv_heads", offsetof(vcase, n_kv_heads)},
    {"head_dim", offsetof(vcase, head_dim)},
    {"v_head_dim", offsetof(vcase, v_head_dim)},
    {"b", offsetof(vcase, b)},
    {"t", offsetof(vcase, t)},
    {"s", offsetof(vcase, s)},
    {"causal", offsetof(vcase, causal)},
    {"cross", offsetof(vcase, cross)},
    {"rope_dims", offsetof(vcase, rope_dims)},
    {"raw", offsetof(vcase, raw)},
    {"exact", offsetof(vcase, exact)},
};

static void set_int_key(vcase *c, const char *key, int v)
{
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++)
        if (!strcmp(key, int_keys[i].name)) {
            memcpy((char *)c + int_keys[i].off, &v, sizeof v);
            return;
        }
    ck_abort_msg("unknown key %s in the vector index", key);
}

static void free_vectors(void)
{
    free(g_data);
    g_data = NULL;
}

/* load_vectors: the PyTorch vectors into g_cases/g_data, once per process
 * (freed at exit). */
static void load_vectors(void)
{
    if (g_data)
        return;
    const char *dir = getenv("ATTN_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/core/vectors/index.txt",
             dir ? dir : "tests");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s (set ATTN_TEST_DATA)", path);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            ck_assert_int_lt(g_ncases, 32);
            vcase *c = &g_cases[g_ncases++];
            memset(c, 0, sizeof *c);
            char *tok = strtok(line + 5, " \n");
            snprintf(c->name, sizeof c->name, "%s", tok);
            while ((tok = strtok(NULL, " \n"))) {
                char *eq = strchr(tok, '=');
                ck_assert_ptr_nonnull(eq);
                *eq++ = 0;
                if (!strcmp(tok, "rope_theta"))
                    c->rope_theta = atof(eq);
                else if (!strcmp(tok, "tv"))
                    parse_ints(eq, c->tv, 8);
                else if (!strcmp(tok, "sv"))
                    parse_ints(eq, c->sv, 8);
                else
                    set_int_key(c, tok, atoi(eq));
            }
        } else if (!strncmp(line, "tensor ", 7)) {
            ck_assert_int_gt(g_ncases, 0);
            vcase *c = &g_cases[g_ncases - 1];
            ck_assert_int_lt(c->n_ten, 24);
            vtensor *t = &c->ten[c->n_ten++];
            char cname[64];
            ck_assert_int_eq(sscanf(line + 7, "%63s %31s %ld %ld", cname,
                                    t->name, &t->off, &t->n),
                             4);
            ck_assert_str_eq(cname, c->name);
        }
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/core/vectors/vectors.bin",
             dir ? dir : "tests");
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    g_data = malloc((size_t)bytes);
    ck_assert_ptr_nonnull(g_data);
    atexit(free_vectors);
    ck_assert_int_eq(fread(g_data, 1, (size_t)bytes, f), bytes);
    fclose(f);
    g_nfloats = bytes / 4;
}

static const float *vget(const vcase *c, const char *name, long n)
{
    for (int i = 0; i < c->n_ten; i++)
        if (!strcmp(c->ten[i].name, name)) {
            ck_assert_msg(c->ten[i].n == n, "%s.%s has %ld floats, want %ld",
                          c->name, name, c->ten[i].n, n);
            ck_assert(c->ten[i].off + n <= g_nfloats);
            return g_data + c->ten[i].off;
        }
    return NULL;
}

static void run_case(const vcase *c, int path)
{
    long B = c->b, T = c->t, S = c->s, H = c->n_heads, Hk = c->n_kv_heads;
    long dm = c->d_model, dc = c->d_ctx, dk = c->head_dim, dv = c->v_head_dim;
    attn_config cfg = {.d_model = c->d_model,
                       .d_model_ctx = c->d_ctx,
                       .n_heads = c->n_heads,
                       .n_kv_heads = c->n_kv_heads,
                       .head_dim = c->head_dim,
                       .v_head_dim = c->v_head_dim,
                       .rope_theta = (float)c->rope_theta,
                       .rope_dims = c->rope_dims};
    attn_weights w = {.w_q = vget(c, "w_q", dm * H * dk),
                      .w_k = vget(c, "w_k", dc * Hk * dk),
                      .w_v = vget(c, "w_v", dc * Hk * dv),
                      .w_o = vget(c, "w_o", H * dv * dm),
                      .b_q = vget(c, "b_q", H * dk),
                      .b_k = vget(c, "b_k", Hk * dk),
                      .b_v = vget(c, "b_v", Hk * dv),
                      .b_o = vget(c, "b_o", dm)};
    const float *x = vget(c, "x", B * T * dm);
    const float *ctx = vget(c, "context", B * S * dc);
    const float *maskf = vget(c, "mask", B * T * S);
    const float *ry = vget(c, "y", B * T * dm);
    const float *ra = vget(c, "attention", B * H * T * S);
    const float *rs = vget(c, "scores", B * H * T * S);
    const float *rq = vget(c, "q", B * H * T * dk);
    const float *rk = vget(c, "k", B * Hk * S * dk);
    const float *rv = vget(c, "v", B * Hk * S * dv);
    ck_assert(x && ry && w.w_q && w.w_k && w.w_v && w.w_o);
    ck_assert_int_eq(c->cross, ctx != NULL);
    float *y = tu_fill((size_t)(B * T * dm), NAN);
    float *a = tu_fill((size_t)(B * H * T * S), NAN);
    float *sc = tu_fill((size_t)(B * H * T * S), NAN);
    float *q = tu_fill((size_t)(B * H * T * dk), NAN);
    float *k = tu_fill((size_t)(B * Hk * S * dk), NAN);
    float *v = tu_fill((size_t)(B * Hk * S * dv), NAN);
    uint8_t *mask = maskf ? malloc((size_t)(B * T * S)) : NULL;
    for (long i = 0; maskf && i < B * T * S; i++)
        mask[i] = maskf[i] != 0.0f;
    attn_seq seqs[8];
    for (long b = 0; b < B; b++) {
        attn_seq *s = &seqs[b];
        *s = (attn_seq){.t = c->t,
                        .s = c->s,
                        .t_valid = c->tv[b],
                        .s_valid = c->sv[b],
                        .causal = c->causal,
                        .x = x + b * T * dm,
                        .y = y + b * T * dm};
        if (ctx)
            s->context = ctx + b * S * dc;
        if (mask)
            s->mask = mask + b * T * S;
        if (path == PATH_MAPS) {
            s->attention = a + b * H * T * S;
            s->scores = sc + b * H * T * S;
            s->q = q + b * H * T * dk;
            s->k = k + b * Hk * S * dk;
            s->v = v + b * Hk * S * dv;
        }
        if (path == PATH_SCORES)
            s->scores = sc + b * H * T * S;
    }
    char err[ATTN_ERRMAX] = "", what[128];
    int rc = attn_forward(&cfg, &w, seqs, (int)B,
                          path == PATH_EXEC ? tu_ex : NULL, err);
    ck_assert_msg(rc == 0, "%s: %s", c->name, err);
#define CMP(nm, got, ref, n)                                                   \
    do {                                                                       \
        snprintf(what, sizeof what, "%s %s %s", c->name, path_name[path], nm); \
        tu_assert_close(what, got, ref, n, 1e-5f, 1e-4f);                      \
    } while (0)
    CMP("y", y, ry, B * T * dm);
    if (path == PATH_MAPS && ra)
        CMP("attention", a, ra, B * H * T * S);
    if ((path == PATH_MAPS || path == PATH_SCORES) && rs)
        CMP("scores", sc, rs, B * H * T * S);
    if (path == PATH_MAPS && rq) {
        CMP("q", q, rq, B * H * T * dk);
        CMP("k", k, rk, B * Hk * S * dk);
        CMP("v", v, rv, B * Hk * S * dv);
    }
#undef CMP
    free(y), free(a), free(sc), free(q), free(k), free(v), free(mask);
}

/* A raw SDPA case (the daemon's sdpa model) on one path. */
static void run_raw_case(const vcase *c, int path)
{
    long H = c->n_heads, T = c->t, S = c->s, dk = c->head_dim,
         dv = c->v_head_dim;
    attn_config cfg = {.n_heads = c->n_heads,
                       .head_dim = c->head_dim,
                       .v_head_dim = c->v_head_dim};
    const float *maskf = vget(c, "mask", T * S);
    const float *ry = vget(c, "y", H * T * dv);
    const float *ra = vget(c, "attention", H * T * S);
    const float *rs = vget(c, "scores", H * T * S);
    attn_raw r = {.t = c->t,
                  .s = c->s,
                  .causal = c->causal,
                  .q = vget(c, "q", H * T * dk),
                  .k = vget(c, "k", H * S * dk),
                  .v = vget(c, "v", H * S * dv)};
    ck_assert(r.q && r.k && r.v && ry && ra && rs);
    float *y = tu_fill((size_t)(H * T * dv), NAN);
    float *a = tu_fill((size_t)(H * T * S), NAN);
    float *sc = tu_fill((size_t)(H * T * S), NAN);
    uint8_t *mask = maskf ? malloc((size_t)(T * S)) : NULL;
    for (long i = 0; maskf && i < T * S; i++)
        mask[i] = maskf[i] != 0.0f;
    r.mask = mask;
    r.y = y;
    if (path == PATH_MAPS)
        r.attention = a;
    if (path == PATH_MAPS || path == PATH_SCORES)
        r.scores = sc;
    char err[ATTN_ERRMAX] = "", what[128];
    ck_assert_msg(attn_forward_raw(&cfg, &r, 1, path == PATH_EXEC ? tu_ex : NULL,
                                   err) == 0,
                  "%s: %s", c->name, err);
    snprintf(what, sizeof what, "%s %s y", c->name, path_name[path]);
    tu_assert_close(what, y, ry, H * T * dv, 1e-5f, 1e-4f);
    if (path == PATH_MAPS) {
        snprintf(what, sizeof what, "%s attention", c->name);
        tu_assert_close(what, a, ra, H * T * S, 1e-5f, 1e-4f);
    }
    if (path == PATH_MAPS || path == PATH_SCORES) {
        snprintf(what, sizeof what, "%s %s scores", c->name, path_name[path]);
        float tol = c->exact ? 0.0f : 1e-5f;
        tu_assert_close(what, sc, rs, H * T * S, tol, tol * 10);
    }
    free(y), free(a), free(sc), free(mask);
}

/* Loop 0: the CPU's fastest row operations; 1: the portable ones. */
START_TEST(torch_vectors)
{
    attn__avx2_off(_i);
    load_vectors();
    ck_assert_int_ge(g_ncases, 20);
    for (int i = 0; i < g_ncases; i++)
        for (int path = 0; path < N_PATHS; path++)
            if (g_cases[i].raw)
                run_raw_case(&g_cases[i], path);
            else
                run_case(&g_cases[i], path);
    attn__avx2_off(0);
}
END_TEST

/* Raw SDPA over several query blocks (t = 300: tiles of rows 0, 128 and
 * 256) and heads, against a double reference with the scale on q: each
 * tile scales its own rows of its head's q into the plan's copy, and a
 * wrong offset would give some block another head's or block's rows.
 * d_k = 24: 1/sqrt(24) is not a power of 2. */
START_TEST(raw_query_blocks)
{
    enum { H = 2, T = 300, S = 40, DK = 24, DV = 3 };
    tu_rng g = {4242u};
    float *q = tu_randn(&g, (size_t)H * T * DK, 1.0f);
    float *k = tu_randn(&g, (size_t)H * S * DK, 1.0f);
    float *v = tu_randn(&g, (size_t)H * S * DV, 1.0f);
    double sc = 1.0 / sqrt((double)DK);
    double *ref = malloc(sizeof(double) * H * T * DV);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double w[S], mx = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                double d = 0;
                for (int c = 0; c < DK; c++)
                    d += (double)q[((size_t)h * T + i) * DK + c] *
                         k[((size_t)h * S + j) * DK + c];
                w[j] = d * sc;
                mx = fmax(mx, w[j]);
            }
            for (int j = 0; j < S; j++)
                sum += (w[j] = exp(w[j] - mx));
            for (int c = 0; c < DV; c++) {
                double o = 0;
                for (int j = 0; j < S; j++)
                    o += w[j] / sum * v[((size_t)h * S + j) * DV + c];
                ref[((size_t)h * T + i) * DV + c] = o;
            }
        }
    attn_config cfg = {.n_heads = H, .head_dim = DK, .v_head_dim = DV};
    for (int path = 0; path < N_PATHS; path++) {
        float *y = tu_fill((size_t)H * T * DV, NAN);
        float *a = tu_fill((size_t)H * T * S, NAN);
        attn_raw r = {.t = T, .s = S, .q = q, .k = k, .v = v, .y = y,
                      .attention = path == PATH_MAPS ? a : NULL,
                      .scores = path == PATH_SCORES ? a : NULL};
        char err[ATTN_ERRMAX] = "";
        ck_assert_msg(attn_forward_raw(&cfg, &r, 1,
                                       path == PATH_EXEC ? tu_ex : NULL,
                                       err) == 0, "%s", err);
        for (size_t i = 0; i < (size_t)H * T * DV; i++)
            ck_assert_msg(fabs(y[i] - ref[i]) < 1e-5,
                          "%s y[%zu] = %.7g, want %.7g", path_name[path],
                          i, y[i], ref[i]);
        free(y), free(a);
    }
    free(q), free(k), free(v), free(ref);
}
END_TEST

/* attn_config_scale: a scale of the config's own as it is; 0 resolved as
 * the plan resolves it, 1/sqrt(d_k) rounded once (what the daemon's model
 * metadata reports as "scale"): for d_k 6 that is not 1.0f / sqrtf(6). */
START_TEST(config_scale)
{
    attn_config c = {.head_dim = 6};
    ck_assert_float_eq(attn_config_scale(&c), (float)(1.0 / sqrt(6.0)));
    ck_assert_float_ne(attn_config_scale(&c), 1.0f / sqrtf(6.0f));
    c.head_dim = 64;
    ck_assert_float_eq(attn_config_scale(&c), 0.125f);
    c.scale = 0.3f;
    ck_assert_float_eq(attn_config_scale(&c), 0.3f);
}
END_TEST

static Suite *attn_suite(void)
{
    Suite *s = suite_create("attn");
    TCase *seeds = tcase_create("seeds");
    tcase_add_checked_fixture(seeds, tu_exec_setup, tu_exec_teardown);
    tcase_add_test(seeds, seed_000_t2_dk4);
    tcase_add_test(seeds, seed_000_exercise2);
    tcase_add_test(seeds, seed_001_three_tokens);
    tcase_add_test(seeds, seed_002_three_tokens);
    tcase_add_test(seeds, seed_001_knowledge_check);
    tcase_add_test(seeds, seed_000_through_layer);
    suite_add_tcase(s, seeds);
    TCase *torch = tcase_create("torch");
    tcase_add_checked_fixture(torch, tu_exec_setup, tu_exec_teardown);
    tcase_add_loop_test(torch, torch_vectors, 0, 2);
    tcase_add_test(torch, raw_query_blocks);
    tcase_add_test(torch, config_scale);
    suite_add_tcase(s, torch);
    return s;
}

TU_MAIN(attn_suite)

/*
 * infer.c - check an infer request against its model and lay it out for
 * the engine (attn_seq per sequence, attn_raw per sdpa item), then encode
 * the answer. Pool threads; see infer.h.
 */
#include "server/infer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/maps.h"
#include "server/maps_norm.h"

#define ERR(...) (snprintf(err, OIP_ERRMAX, __VA_ARGS__), 400)

static const char *model_outs[SRV_O_N] = {"y", "attention", "scores", "q", "k", "v"};
static const char *sdpa_outs[SRV_O_N] = {"output", "attention", "scores", NULL, NULL, NULL};

static int is_float(oip_dtype t)
{
    return t == OIP_FP32 || t == OIP_FP16 || t == OIP_BF16;
}

/* mul: *acc *= v, 0 on overflow. */
static int mul(size_t *acc, int64_t v)
{
    return v >= 0 && !__builtin_mul_overflow(*acc, (size_t)v, acc);
}

/* check_names: every input name is one of names[] (list: the same, for
 * the message). */
static int check_names(const oip_request *req, const char *const *names, int n,
                       const char *model, const char *list, char *err)
{
    int i, j;
    for (i = 0; i < req->n_inputs; i++) {
        for (j = 0; j < n; j++)
            if (strcmp(req->inputs[i].name, names[j]) == 0)
                break;
        if (j == n)
            return ERR("inputs[%d].name: model '%s' has no input '%s' (inputs: %s)",
                       i, model, req->inputs[i].name, list);
    }
    return 0;
}

/* float_input: input name, or NULL when absent; *rc is 400 (with err)
 * when present with a non-float datatype. */
static const oip_tensor *float_input(const oip_request *req, const char *name,
                                     int *rc, char *err)
{
    const oip_tensor *t = oip_find_input(req, name);
    *rc = 0;
    if (t && !is_float(t->wire_dtype))
        *rc = ERR("inputs[%s].datatype: %s; expected FP32 (FP16/BF16 in binary form)",
                  name, oip_dtype_name(t->wire_dtype));
    return t;
}

/* shape_text: t's shape as "[1, 2, 64]" in buf (n bytes), for messages
 * that say what came beside what was expected. Returns buf. */
static const char *shape_text(const oip_tensor *t, char *buf, size_t n)
{
    size_t at = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < t->rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "[",
                               (long long)t->shape[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
    return buf;
}

/* get_lengths: an optional INT32/INT64 [B] input with values in [0, max]. */
static int get_lengths(const oip_request *req, const char *name, int64_t b,
                       int64_t max, int *out, char *err)
{
    const oip_tensor *t = oip_find_input(req, name);
    int64_t i;
    char got[OIP_MAX_RANK * 22 + 4];
    if (!t)
        return 0;
    if (t->wire_dtype != OIP_INT32 && t->wire_dtype != OIP_INT64)
        return ERR("inputs[%s].datatype: %s; expected INT32 (or INT64)", name,
                   oip_dtype_name(t->wire_dtype));
    if (t->rank != 1 || t->shape[0] != b)
        return ERR("inputs[%s].shape: %s; expected [%lld] (one length per sequence)",
                   name, shape_text(t, got, sizeof got), (long long)b);
    for (i = 0; i < b; i++) {
        int64_t v = t->wire_dtype == OIP_INT32 ? ((const int32_t *)t->data)[i]
                                               : ((const int64_t *)t->data)[i];
        if (v < 0 || v > max)
            return ERR("inputs[%s][%lld]: %lld is outside [0, %lld]", name,
                       (long long)i, (long long)v, (long long)max);
        out[i] = (int)v;
    }
    return 0;
}

/* select_outputs: fill p->want/binary from req->outputs (or the default). */
static int select_outputs(srv_prep *p, const oip_request *req,
                          const char *const *names, const char *model, char *err)
{
    int i, j;
    for (i = 0; i < req->n_outputs; i++) {
        for (j = 0; j < SRV_O_N; j++)
            if (names[j] && strcmp(req->outputs[i].name, names[j]) == 0)
                break;
        if (j == SRV_O_N)
            return ERR("outputs[%d].name: model '%s' has no output '%s' (outputs: %s)",
                       i, model, req->outputs[i].name,
                       p->raw ? "output, attention, scores"
                              : "y, attention, scores, q, k, v");
        if (p->want[j])
            return ERR("outputs[%d].name: '%s' is listed twice", i, names[j]);
        p->want[j] = 1;
        p->binary[j] = req->outputs[i].binary >= 0 ? req->outputs[i].binary
                                                  : req->params.binary_data_output;
    }
    if (req->n_outputs == 0) {
        p->want[SRV_O_Y] = 1;
        p->binary[SRV_O_Y] = req->params.binary_data_output;
    }
    return 0;
}

/* srv_prep_extra (infer.h): the one sum and message of the stateless
 * layouts (prepare_model, prepare_raw) and a sequence step's
 * (seq_prep.c). */
int srv_prep_extra(srv_prep *p, const oip_request *req, int64_t n, size_t plan,
                   size_t own, const char *what, const char *fewer,
                   const srv_infer_limits *lim, char *err)
{
    size_t total = req->bytes, per;
    char all[48] = "";
    int one = n == 1;
    if (plan == SIZE_MAX || __builtin_add_overflow(plan, own, &per))
        per = SIZE_MAX;
    if (per != SIZE_MAX && !__builtin_mul_overflow((size_t)n, per, &p->extra) &&
        !__builtin_add_overflow(total, p->extra, &total)) {
        if (total <= lim->memory)
            return 0;
        snprintf(all, sizeof all, " (%zu in all)", total);
    }
    snprintf(err, OIP_ERRMAX, "inputs[%s].shape: its %lld %s%s take%s %zu "
             "bytes%s to lay out for the engine beside the request's %zu%s, "
             "more than request-memory (%zu) allows; send %s, or raise "
             "--request-memory", what, (long long)n, p->raw ? "item" : "sequence",
             one ? "" : "s", one ? "s" : "", per, one ? "" : " each",
             req->bytes, all, lim->memory, fewer);
    return 413;
}

/* alloc_outputs: allocate every output that is wanted (attention also for
 * retain, and a weight set's v, for the map's value norms: what=norm; y
 * always), within the memory budget (the request and p->extra count
 * first). */
static int alloc_outputs(srv_prep *p, const oip_request *req,
                         const srv_infer_limits *lim, char *err)
{
    int o, d;
    size_t total = req->bytes + p->extra; /* srv_prep_extra checked the sum */
    size_t sz[SRV_O_N];
    for (o = 0; o < SRV_O_N; o++) {
        int need = p->want[o] || o == SRV_O_Y ||
                   ((o == SRV_O_ATT || (o == SRV_O_V && !p->raw)) &&
                    req->params.retain);
        sz[o] = 0;
        if (!need)
            continue;
        sz[o] = sizeof(float);
        for (d = 0; d < p->rank[o]; d++)
            if (!mul(&sz[o], p->shape[o][d]))
                return ERR("outputs.%s: size overflows", p->raw ? sdpa_outs[o] : model_outs[o]);
        if (__builtin_add_overflow(total, sz[o], &total) || total > lim->memory) {
            snprintf(err, OIP_ERRMAX, "outputs.%s%s: this request needs more than "
                     "%zu bytes with its outputs (request-memory); ask for fewer "
                     "outputs, send fewer tokens, or raise --request-memory",
                     p->raw ? sdpa_outs[o] : model_outs[o],
                     p->want[o] || o == SRV_O_Y ? "" : " (computed for the retained map)",
                     lim->memory);
            return 413;
        }
    }
    for (o = 0; o < SRV_O_N; o++) {
        if (!sz[o])
            continue;
        p->out[o] = malloc(sz[o]);
        if (!p->out[o]) {
            snprintf(err, OIP_ERRMAX, "outputs: out of memory");
            return 503;
        }
        p->bytes += sz[o];
    }
    return 0;
}

/* prepare_model: check req against model c (x [B, T, d_model], optional
 * context, lengths, context_lengths and mask), allocate the outputs it
 * asks for and lay out one attn_seq per sequence pointing into req's
 * tensors and p's outputs. 0, or an HTTP status (400/413/503) with err
 * naming the input. p is freed by the caller on failure. */
static int prepare_model(srv_prep *p, const oip_request *req, const char *name,
                         const attn_config *c, int causal,
                         const srv_infer_limits *lim, char *err)
{
    static const char *const names[] = {"x", "context", "lengths",
                                        "context_lengths", "mask"};
    const oip_tensor *x, *ctx, *mask;
    int64_t B, T, S, b;
    int rc, *len = NULL, *clen = NULL;
    size_t rows = 1;
    char got[OIP_MAX_RANK * 22 + 4];
    if ((rc = check_names(req, names, 5, name,
                          "x, context, lengths, context_lengths, mask", err)))
        return rc;
    x = float_input(req, "x", &rc, err);
    if (rc)
        return rc;
    if (!x)
        return ERR("inputs: 'x' is required (FP32 [B, T, %d])", c->d_model);
    if (x->rank != 3 || x->shape[2] != c->d_model)
        return ERR("inputs[x].shape: %s; expected [B, T, %d] for model '%s'",
                   shape_text(x, got, sizeof got), c->d_model, name);
    B = x->shape[0];
    T = x->shape[1];
    if (!mul(&rows, B) || !mul(&rows, T) || rows > (size_t)lim->max_tokens)
        return ERR("inputs[x].shape: %lld x %lld query rows is over max-tokens %lld",
                   (long long)B, (long long)T, lim->max_tokens);
    ctx = float_input(req, "context", &rc, err);
    if (rc)
        return rc;
    if (!ctx && c->d_model_ctx != c->d_model)
        return ERR("inputs: 'context' is required: model '%s' is cross-attention "
                   "(FP32 [B, S, %d])", name, c->d_model_ctx);
    if (ctx && (ctx->rank != 3 || ctx->shape[0] != B || ctx->shape[2] != c->d_model_ctx))
        return ERR("inputs[context].shape: %s; expected [%lld, S, %d]",
                   shape_text(ctx, got, sizeof got), (long long)B, c->d_model_ctx);
    S = ctx ? ctx->shape[1] : T;
    /* the engine's S is an int (sdpa's bound): past it, a cast wrapped */
    if (S > 1 << 30)
        return ERR("inputs[context].shape: %lld rows; at most 2^30 (S)",
                   (long long)S);
    if (!ctx && oip_find_input(req, "context_lengths"))
        return ERR("inputs[context_lengths]: only with a 'context' input");
    mask = oip_find_input(req, "mask");
    if (mask && mask->wire_dtype != OIP_BOOL)
        return ERR("inputs[mask].datatype: %s; expected BOOL",
                   oip_dtype_name(mask->wire_dtype));
    if (mask && !((mask->rank == 3 && mask->shape[0] == B && mask->shape[1] == T &&
                   mask->shape[2] == S) ||
                  (mask->rank == 2 && mask->shape[0] == T && mask->shape[1] == S)))
        return ERR("inputs[mask].shape: %s; expected [%lld, %lld, %lld] or [%lld, %lld]",
                   shape_text(mask, got, sizeof got), (long long)B, (long long)T,
                   (long long)S, (long long)T, (long long)S);
    p->cfg = *c;
    p->n = (int)B;
    p->rank[SRV_O_Y] = 3;
    memcpy(p->shape[SRV_O_Y], (int64_t[]){B, T, c->d_model}, 3 * sizeof(int64_t));
    p->rank[SRV_O_ATT] = p->rank[SRV_O_SCORES] = 4;
    memcpy(p->shape[SRV_O_ATT], (int64_t[]){B, c->n_heads, T, S}, 4 * sizeof(int64_t));
    memcpy(p->shape[SRV_O_SCORES], p->shape[SRV_O_ATT], 4 * sizeof(int64_t));
    p->rank[SRV_O_Q] = p->rank[SRV_O_K] = p->rank[SRV_O_V] = 4;
    memcpy(p->shape[SRV_O_Q], (int64_t[]){B, c->n_heads, T, c->head_dim}, 4 * sizeof(int64_t));
    memcpy(p->shape[SRV_O_K], (int64_t[]){B, c->n_kv_heads, S, c->head_dim}, 4 * sizeof(int64_t));
    memcpy(p->shape[SRV_O_V], (int64_t[]){B, c->n_kv_heads, S, c->v_head_dim}, 4 * sizeof(int64_t));
    p->maps_b = (int)B, p->maps_h = c->n_heads, p->maps_t = (int)T, p->maps_s = (int)S;
    /* each sequence's attn_seq, its two lengths (and their copies kept
     * for retain) and what the engine's plan holds for it: counted, as
     * B may be max-tokens sequences of one token each */
    if ((rc = select_outputs(p, req, model_outs, name, err)) ||
        (rc = srv_prep_extra(p, req, B, attn_plan_item_bytes(c, (int)T, (int)S, 0),
                             sizeof(attn_seq) + 2 * sizeof(int) +
                                 (req->params.retain ? 2 * sizeof(int32_t) : 0),
                             "x", "fewer or shorter sequences a request", lim,
                             err)) ||
        (rc = alloc_outputs(p, req, lim, err)))
        return rc;
    p->seqs = calloc((size_t)B, sizeof *p->seqs);
    len = calloc((size_t)B, sizeof *len);
    clen = calloc((size_t)B, sizeof *clen);
    if (!p->seqs || !len || !clen) {
        rc = 503;
        snprintf(err, OIP_ERRMAX, "inputs: out of memory");
        goto done;
    }
    for (b = 0; b < B; b++)
        len[b] = (int)T, clen[b] = (int)S;
    if ((rc = get_lengths(req, "lengths", B, T, len, err)) ||
        (rc = get_lengths(req, "context_lengths", B, S, clen, err)))
        goto done;
    if (!ctx) /* self-attention: the keys are the rows of x */
        memcpy(clen, len, sizeof *len * (size_t)B);
    if (req->params.causal >= 0)
        causal = req->params.causal;
    p->causal = causal;
    if (req->params.retain) {
        p->t_valid = malloc(sizeof *p->t_valid * (size_t)B);
        p->s_valid = malloc(sizeof *p->s_valid * (size_t)B);
        if (!p->t_valid || !p->s_valid) {
            rc = 503;
            snprintf(err, OIP_ERRMAX, "inputs: out of memory");
            goto done;
        }
        for (b = 0; b < B; b++)
            p->t_valid[b] = len[b], p->s_valid[b] = clen[b];
    }
    for (b = 0; b < B; b++) {
        attn_seq *q = &p->seqs[b];
        size_t ts = (size_t)T * (size_t)S; /* fits: outputs were sized */
        q->t = (int)T;
        q->s = (int)S;
        q->t_valid = len[b];
        q->s_valid = clen[b];
        q->causal = causal;
        q->x = (const float *)x->data + (size_t)b * (size_t)T * (size_t)c->d_model;
        q->context = ctx ? (const float *)ctx->data +
                               (size_t)b * (size_t)S * (size_t)c->d_model_ctx
                         : NULL;
        q->mask = mask ? (const uint8_t *)mask->data + (mask->rank == 3 ? (size_t)b * ts : 0)
                       : NULL;
        q->y = p->out[SRV_O_Y] + (size_t)b * (size_t)T * (size_t)c->d_model;
#define SLICE(o, per) (p->out[o] ? p->out[o] + (size_t)b * (per) : NULL)
        q->attention = SLICE(SRV_O_ATT, (size_t)c->n_heads * ts);
        q->scores = SLICE(SRV_O_SCORES, (size_t)c->n_heads * ts);
        q->q = SLICE(SRV_O_Q, (size_t)c->n_heads * (size_t)T * (size_t)c->head_dim);
        q->k = SLICE(SRV_O_K, (size_t)c->n_kv_heads * (size_t)S * (size_t)c->head_dim);
        q->v = SLICE(SRV_O_V, (size_t)c->n_kv_heads * (size_t)S * (size_t)c->v_head_dim);
#undef SLICE
    }
done:
    free(len);
    free(clen);
    return rc;
}

/* prepare_sdpa: the same for the built-in sdpa: q [..., T, d_k],
 * k [..., S, d_k], v [..., S, d_v] with equal leading dimensions (their
 * product is the number of attn_raw items) and an optional BOOL mask. */
static int prepare_sdpa(srv_prep *p, const oip_request *req,
                        const srv_infer_limits *lim, char *err)
{
    static const char *const names[] = {"q", "k", "v", "mask"};
    const oip_tensor *q, *k, *v, *mask;
    int rc, r, d, lead;
    int64_t T, S, dk, dv, i, n = 1;
    size_t rows = 1;
    char got[OIP_MAX_RANK * 22 + 4];
    if ((rc = check_names(req, names, 4, "sdpa", "q, k, v, mask", err)))
        return rc;
    q = float_input(req, "q", &rc, err);
    if (rc)
        return rc;
    k = float_input(req, "k", &rc, err);
    if (rc)
        return rc;
    v = float_input(req, "v", &rc, err);
    if (rc)
        return rc;
    if (!q || !k || !v)
        return ERR("inputs: '%s' is required (sdpa takes q [..., T, d_k], "
                   "k [..., S, d_k], v [..., S, d_v])", !q ? "q" : !k ? "k" : "v");
    r = q->rank;
    if (r < 2 || r > 4)
        return ERR("inputs[q].shape: rank %d; expected [T, d_k], [B, T, d_k] or "
                   "[B, H, T, d_k]", r);
    if (k->rank != r || v->rank != r)
        return ERR("inputs[%s].shape: rank %d differs from q's %d",
                   k->rank != r ? "k" : "v", k->rank != r ? k->rank : v->rank, r);
    lead = r - 2;
    for (d = 0; d < lead; d++) {
        if (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d])
            return ERR("inputs[%s].shape: dimension %d is %lld; q has %lld",
                       k->shape[d] != q->shape[d] ? "k" : "v", d,
                       (long long)(k->shape[d] != q->shape[d] ? k->shape[d] : v->shape[d]),
                       (long long)q->shape[d]);
        n *= q->shape[d];
    }
    T = q->shape[r - 2];
    dk = q->shape[r - 1];
    S = k->shape[r - 2];
    dv = v->shape[r - 1];
    if (k->shape[r - 1] != dk)
        return ERR("inputs[k].shape: last dimension %lld differs from q's d_k %lld",
                   (long long)k->shape[r - 1], (long long)dk);
    if (v->shape[r - 2] != S)
        return ERR("inputs[v].shape: %lld row%s; k has S = %lld",
                   (long long)v->shape[r - 2], v->shape[r - 2] == 1 ? "" : "s",
                   (long long)S);
    if (dk > 1 << 20 || T > 1 << 30)
        return ERR("inputs[q].shape: dimensions too large (T at most 2^30, "
                   "d_k 2^20)");
    if (S > 1 << 30)
        return ERR("inputs[k].shape: dimensions too large (S at most 2^30)");
    if (dv > 1 << 20)
        return ERR("inputs[v].shape: dimensions too large (d_v at most 2^20)");
    if (!mul(&rows, n) || !mul(&rows, T) || rows > (size_t)lim->max_tokens)
        return ERR("inputs[q].shape: %lld query rows is over max-tokens %lld",
                   (long long)(n * T), lim->max_tokens);
    mask = oip_find_input(req, "mask");
    if (mask && mask->wire_dtype != OIP_BOOL)
        return ERR("inputs[mask].datatype: %s; expected BOOL",
                   oip_dtype_name(mask->wire_dtype));
    if (mask) {
        int ok = (mask->rank == 2 || mask->rank == r) &&
                 mask->shape[mask->rank - 2] == T && mask->shape[mask->rank - 1] == S;
        for (d = 0; ok && mask->rank == r && d < lead; d++)
            ok = mask->shape[d] == q->shape[d];
        if (!ok)
            return ERR("inputs[mask].shape: %s; expected [%lld, %lld] or q's leading "
                       "dimensions then [%lld, %lld]", shape_text(mask, got, sizeof got),
                       (long long)T, (long long)S, (long long)T, (long long)S);
    }
    p->raw = 1;
    p->causal = req->params.causal > 0;
    p->cfg.d_model = p->cfg.d_model_ctx = (int)dk;
    p->cfg.n_heads = p->cfg.n_kv_heads = 1;
    p->cfg.head_dim = (int)dk;
    p->cfg.v_head_dim = (int)dv;
    p->cfg.scale = req->params.scale; /* 0: 1/sqrt(d_k) */
    p->n = (int)n;
    p->rank[SRV_O_Y] = p->rank[SRV_O_ATT] = p->rank[SRV_O_SCORES] = r;
    for (d = 0; d < lead; d++)
        p->shape[SRV_O_Y][d] = p->shape[SRV_O_ATT][d] = p->shape[SRV_O_SCORES][d] =
            q->shape[d];
    p->shape[SRV_O_Y][r - 2] = T;
    p->shape[SRV_O_Y][r - 1] = dv;
    p->shape[SRV_O_ATT][r - 2] = p->shape[SRV_O_SCORES][r - 2] = T;
    p->shape[SRV_O_ATT][r - 1] = p->shape[SRV_O_SCORES][r - 1] = S;
    p->maps_b = lead == 2 ? (int)q->shape[0] : (int)n;
    p->maps_h = lead == 2 ? (int)q->shape[1] : 1;
    p->maps_t = (int)T, p->maps_s = (int)S;
    /* each item's attn_raw and what the raw plan holds for it, its q
     * times scale with it (as large as q) */
    if ((rc = select_outputs(p, req, sdpa_outs, "sdpa", err)) ||
        (rc = srv_prep_extra(p, req, n, attn_plan_item_bytes(&p->cfg, (int)T, (int)S, 1),
                             sizeof(attn_raw), "q",
                             "fewer or smaller items a request", lim, err)) ||
        (rc = alloc_outputs(p, req, lim, err)))
        return rc;
    p->raws = calloc((size_t)n, sizeof *p->raws);
    if (!p->raws) {
        snprintf(err, OIP_ERRMAX, "inputs: out of memory");
        return 503;
    }
    for (i = 0; i < n; i++) {
        attn_raw *a = &p->raws[i];
        size_t ts = (size_t)T * (size_t)S;
        a->t = (int)T;
        a->s = (int)S;
        a->causal = req->params.causal > 0;
        a->q = (const float *)q->data + (size_t)i * (size_t)T * (size_t)dk;
        a->k = (const float *)k->data + (size_t)i * (size_t)S * (size_t)dk;
        a->v = (const float *)v->data + (size_t)i * (size_t)S * (size_t)dv;
        a->mask = mask ? (const uint8_t *)mask->data + (mask->rank == r ? (size_t)i * ts : 0)
                       : NULL;
        a->y = p->out[SRV_O_Y] + (size_t)i * (size_t)T * (size_t)dv;
        a->attention = p->out[SRV_O_ATT] ? p->out[SRV_O_ATT] + (size_t)i * ts : NULL;
        a->scores = p->out[SRV_O_SCORES] ? p->out[SRV_O_SCORES] + (size_t)i * ts : NULL;
    }
    return 0;
}

int srv_infer_prepare(srv_prep *p, const oip_request *req, const char *model_name,
                      const attn_config *cfg, int causal, int builtin,
                      const srv_infer_limits *lim, char *err)
{
    int rc;
    memset(p, 0, sizeof *p);
    if (req->params.retain && !lim->maps)
        return ERR("parameters.retain: this server keeps no maps (maps-bytes 0)");
    if (!builtin && req->params.scale > 0)
        return ERR("parameters.scale: model '%s' is a weight set, whose scale is "
                   "its own (its config.json's, else 1/sqrt(head_dim), in its "
                   "metadata); only the built-in sdpa takes one", model_name);
    rc = builtin ? prepare_sdpa(p, req, lim, err)
                 : prepare_model(p, req, model_name, cfg, causal, lim, err);
    if (rc)
        srv_prep_free(p);
    return rc;
}

void srv_prep_free(srv_prep *p)
{
    int o;
    for (o = 0; o < SRV_O_N; o++)
        free(p->out[o]);
    free(p->seqs);
    free(p->raws);
    free(p->t_valid);
    free(p->s_valid);
    memset(p, 0, sizeof *p);
}

int srv_prep_outputs(const srv_prep *p, const oip_request *req,
                     oip_output *outs)
{
    const char *const *names = p->raw ? sdpa_outs : model_outs;
    int i, o, n = 0;
    /* the order of the request's outputs list, else just y/output */
    for (i = 0; i < (req->n_outputs ? req->n_outputs : 1); i++) {
        for (o = 0; o < SRV_O_N; o++)
            if (names[o] && (req->n_outputs ? strcmp(req->outputs[i].name, names[o]) == 0
                                            : o == SRV_O_Y))
                break;
        if (o == SRV_O_N || !p->out[o])
            continue;
        memset(&outs[n], 0, sizeof outs[n]);
        outs[n].name = names[o];
        outs[n].dtype = OIP_FP32;
        outs[n].rank = p->rank[o];
        memcpy(outs[n].shape, p->shape[o], sizeof outs[n].shape);
        outs[n].data = p->out[o];
        outs[n].binary = p->binary[o] > 0;
        n++;
    }
    return n;
}

/* value_norms: the map's [B, H, S] value norms for what=norm
 * (maps_norm.h) into a (a->vnorm, malloc'd: the caller frees it): |v_j^h
 * W_O^h| through grams (the Gram matrices of the instance that computed
 * it), sdpa's |v_j^h| without; none without values. 0, or 503 (out of
 * memory) with err. */
static int value_norms(const srv_prep *p, maps_grams *grams,
                       maps_put_args *a, char *err)
{
    size_t n = (size_t)a->b * (size_t)a->h * (size_t)a->s; /* <= the map */
    float *out;
    if (!a->v || (!p->raw && !grams))
        return 0;
    out = malloc(n * sizeof(float));
    if (!out || (!p->raw && maps_grams_norms(grams, a->v, a->b, a->s,
                                             a->s_valid, out))) {
        free(out);
        snprintf(err, OIP_ERRMAX, "parameters.retain: out of memory");
        return 503;
    }
    if (p->raw)
        maps_v_norms(a->v, n, a->dv, out);
    a->vnorm = out;
    a->norm_of = p->raw ? MAPS_NORM_V : MAPS_NORM_VO;
    return 0;
}

int srv_infer_encode(const srv_prep *p, const oip_request *req,
                     const char *model_name, maps_grams *grams,
                     maps_store *maps, oip_encode_fn *enc, char **body,
                     size_t *len, size_t *header_len, char *map_id,
                     char *err)
{
    oip_output outs[SRV_O_N];
    char extra[MAPS_ID_MAX + 32], id[MAPS_ID_MAX];
    int rc, n = srv_prep_outputs(p, req, outs);
    extra[0] = map_id[0] = 0;
    if (req->params.retain && maps) {
        char merr[512];
        maps_put_args a;
        memset(&a, 0, sizeof a);
        a.model = model_name;
        a.b = p->maps_b, a.h = p->maps_h, a.t = p->maps_t, a.s = p->maps_s;
        a.attention = p->out[SRV_O_ATT];
        a.causal = p->causal;
        a.t_valid = p->t_valid;
        a.s_valid = p->s_valid;
        a.tokens = (const char *const *)req->params.tokens;
        a.n_tokens = req->params.n_tokens;
        a.token_items = req->params.token_items;
        a.cross = p->raw || oip_find_input(req, "context") != NULL;
        {   /* what the page needs for masked cells and the step view */
            const oip_tensor *mk = oip_find_input(req, "mask");
            const oip_tensor *vin = p->raw ? oip_find_input(req, "v") : NULL;
            if (mk) { /* shape checked at prepare: [T, S] or [lead..., T, S] */
                a.mask = (const uint8_t *)mk->data;
                a.mask_planes = (int)(mk->count / ((size_t)p->maps_t * p->maps_s));
            }
            a.scores = p->out[SRV_O_SCORES];
            a.v = p->raw ? (vin ? (const float *)vin->data : NULL) : p->out[SRV_O_V];
            a.kv_h = p->raw ? p->maps_h : p->cfg.n_kv_heads;
            a.dv = p->cfg.v_head_dim;
            a.dk = p->cfg.head_dim;
            a.scale = attn_config_scale(&p->cfg);
        }
        if ((rc = value_norms(p, grams, &a, err)))
            return rc;
        /* a weight set's v was computed for the norms: kept when asked */
        if (!p->raw && !p->want[SRV_O_V])
            a.v = NULL, a.kv_h = 0;
        rc = maps_put(maps, &a, id, merr);
        free((float *)a.vnorm);
        if (rc < 0) { /* the field, once: a message naming a parameter
                       * (retain, tokens) says which already */
            snprintf(err, OIP_ERRMAX, "%s%.400s",
                     strncmp(merr, "parameters.", 11) ? "parameters.retain: " : "",
                     merr);
            return rc == ATTN_ENOMEM ? 503 : 400;
        }
        snprintf(extra, sizeof extra, "{\"map_id\":\"%s\"}", id);
    }
    rc = (enc ? enc : oip_encode)(model_name, req->id, outs, n,
                                  extra[0] ? extra : NULL, body, len,
                                  header_len, err);
    if (extra[0] && rc < 0) /* no answer carries its id */
        maps_drop(maps, id);
    else if (extra[0])
        memcpy(map_id, id, MAPS_ID_MAX);
    return srv_encode_status(rc);
}

int srv_encode_status(int rc)
{
    /* a non-finite JSON output comes from the client's (finite, huge)
     * inputs: a bad request, not a server fault */
    return rc == ATTN_EFORMAT ? 400 : rc == ATTN_ENOMEM ? 503 : rc < 0 ? 500 : 0;
}

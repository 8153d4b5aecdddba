/*
 * seq_prep.c - one sequence step on the pool side: check the request
 * against its model and lay it out for the engine (attn_seq with kv), and
 * encode its answer (outputs, sequence_length and _bytes, the growing
 * map). See
 * seq.h; srv_seq_alloc_maps runs on the loop at bind time, when the
 * sequence's length is known.
 */
#include "server/seq.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR(...) (snprintf(err, OIP_ERRMAX, __VA_ARGS__), 400)

static const char *outs_names[SRV_O_N] = {"y", "attention", "scores", "q", "k", "v"};

int srv_seq_wants(const srv_step *st, const oip_request *req)
{
    return st->hdr_id[0] || req->params.seq_id[0] || req->params.seq_start ||
           req->params.seq_end || req->params.has_seq_pos;
}

/* size_of: bytes of output o with p's shape; 0 on overflow. */
static size_t size_of(const srv_prep *p, int o)
{
    size_t n = sizeof(float);
    int d;
    for (d = 0; d < p->rank[o]; d++)
        if (p->shape[o][d] < 0 ||
            __builtin_mul_overflow(n, (size_t)p->shape[o][d], &n))
            return 0;
    return n;
}

/* alloc: output o within memory (*total counts what is allocated so far). */
static int alloc(srv_prep *p, int o, size_t *total, size_t memory, char *err)
{
    size_t n = size_of(p, o);
    if (!n || __builtin_add_overflow(*total, n, total) || *total > memory) {
        snprintf(err, OIP_ERRMAX, "outputs.%s%s: this step needs more than "
                 "%zu bytes with its outputs (request-memory); ask for fewer "
                 "outputs, send fewer tokens, or raise --request-memory", outs_names[o],
                 p->want[o] ? "" : " (computed for the retained map)", memory);
        return 413;
    }
    p->out[o] = malloc(n);
    if (!p->out[o]) {
        snprintf(err, OIP_ERRMAX, "outputs: out of memory");
        return 503;
    }
    p->bytes += n;
    return 0;
}

int srv_seq_prepare(srv_step *st, srv_prep *p, const oip_request *req,
                    const char *model_name, const attn_config *c, int causal,
                    int builtin, const srv_infer_limits *lim, char *err)
{
    const oip_params *pr = &req->params;
    const oip_tensor *x;
    size_t total = req->bytes;
    int i, o, rc;
    int64_t T;
    memset(p, 0, sizeof *p);
    if (st->hdr_id[0] && pr->seq_id[0] && strcmp(st->hdr_id, pr->seq_id) != 0)
        return ERR("Attnd-Sequence-Id: header '%s' and parameters.sequence_id "
                   "'%s' differ; send the same id in both, or only one",
                   st->hdr_id, pr->seq_id);
    srv_copy(st->id, sizeof st->id, pr->seq_id[0] ? pr->seq_id : st->hdr_id);
    st->start = pr->seq_start; /* (srv_seq_check_failed reads it, the id) */
    if (!st->id[0])
        return ERR("parameters.%s: given without parameters.sequence_id (or "
                   "the Attnd-Sequence-Id header)",
                   pr->seq_start ? "sequence_start"
                   : pr->seq_end ? "sequence_end" : "sequence_position");
    if (pr->seq_start && pr->has_seq_pos && pr->seq_pos != 0)
        return ERR("parameters.sequence_position: %d with sequence_start; a "
                   "start holds the whole history from position 0",
                   pr->seq_pos);
    if (builtin)
        return ERR("parameters.sequence_id: model '%s' is the built-in sdpa, "
                   "which has no projections to cache; sequences need a "
                   "weight-set model", model_name);
    if (pr->scale > 0)
        return ERR("parameters.scale: model '%s' is a weight set, whose scale is "
                   "its own (its config.json's, else 1/sqrt(head_dim), in its "
                   "metadata); only the built-in sdpa takes one", model_name);
    if (c->d_model_ctx != c->d_model)
        return ERR("parameters.sequence_id: model '%s' is cross-attention; "
                   "sequences need a self-attention model", model_name);
    for (i = 0; i < req->n_inputs; i++)
        if (strcmp(req->inputs[i].name, "x") != 0)
            return ERR("inputs[%d].name: a sequence step takes only 'x' (the "
                       "new tokens; '%s' is not allowed: every row is a new "
                       "token and the keys are the sequence's own)", i,
                       req->inputs[i].name);
    x = oip_find_input(req, "x");
    if (!x)
        return ERR("inputs: 'x' is required (FP32 [1, T, %d])", c->d_model);
    if (x->wire_dtype != OIP_FP32 && x->wire_dtype != OIP_FP16 &&
        x->wire_dtype != OIP_BF16)
        return ERR("inputs[x].datatype: %s; expected FP32 (FP16/BF16 in "
                   "binary form)", oip_dtype_name(x->wire_dtype));
    if (x->rank != 3 || x->shape[2] != c->d_model)
        return ERR("inputs[x].shape: expected [1, T, %d] for model '%s'",
                   c->d_model, model_name);
    if (x->shape[0] != 1)
        return ERR("inputs[x].shape: a sequence step takes B = 1 (one "
                   "sequence per request), got B = %lld; send each sequence "
                   "as its own request (they batch together)",
                   (long long)x->shape[0]);
    T = x->shape[1];
    if (T > lim->max_tokens || T > (1 << 30))
        return ERR("inputs[x].shape: %lld tokens is over max-tokens %lld",
                   (long long)T, lim->max_tokens);
    if (pr->retain && !lim->maps)
        return ERR("parameters.retain: this server keeps no maps (maps-bytes 0)");
    if (pr->token_items > 1) /* [[...]] is B = 1's own list: one only */
        return ERR("parameters.tokens: %d lists, expected 1 (a sequence step "
                   "is one item)", pr->token_items);
    if (pr->n_tokens && pr->n_tokens != T) /* they label the map's new rows */
        return ERR("parameters.tokens: %d label%s for %lld new token%s; send "
                   "one per row of x, or none", pr->n_tokens,
                   pr->n_tokens == 1 ? "" : "s", (long long)T, T == 1 ? "" : "s");
    for (i = 0; i < req->n_outputs; i++) {
        for (o = 0; o < SRV_O_N; o++)
            if (strcmp(req->outputs[i].name, outs_names[o]) == 0)
                break;
        if (o == SRV_O_K || o == SRV_O_V)
            return ERR("outputs[%d].name: '%s' is not an output of a sequence "
                       "step (the keys and values stay in the server's K/V "
                       "cache)", i, outs_names[o]);
        if (o == SRV_O_N)
            return ERR("outputs[%d].name: model '%s' has no output '%s' (a "
                       "sequence step gives y, attention, scores, q)", i,
                       model_name, req->outputs[i].name);
        if (p->want[o])
            return ERR("outputs[%d].name: '%s' is listed twice", i, outs_names[o]);
        p->want[o] = 1;
        p->binary[o] = req->outputs[i].binary >= 0 ? req->outputs[i].binary
                                                   : pr->binary_data_output;
    }
    if (!req->n_outputs) {
        p->want[SRV_O_Y] = 1;
        p->binary[SRV_O_Y] = pr->binary_data_output;
    }
    p->cfg = *c;
    p->n = 1;
    p->causal = pr->causal >= 0 ? pr->causal : causal;
    p->rank[SRV_O_Y] = 3;
    memcpy(p->shape[SRV_O_Y], (int64_t[]){1, T, c->d_model}, 3 * sizeof(int64_t));
    p->rank[SRV_O_Q] = 4;
    memcpy(p->shape[SRV_O_Q], (int64_t[]){1, c->n_heads, T, c->head_dim},
           4 * sizeof(int64_t));
    p->rank[SRV_O_ATT] = p->rank[SRV_O_SCORES] = 4; /* S at bind */
    /* its attn_seq and what the plan holds for it (a step's rows are its
     * own keys' rows: s = T), counted as a stateless request's are */
    if ((rc = srv_prep_extra(p, req, 1, attn_plan_item_bytes(c, (int)T, (int)T, 0),
                             sizeof(attn_seq), "x", "fewer tokens a step", lim,
                             err)))
        return rc;
    total += p->extra; /* srv_prep_extra checked the sum */
    if ((rc = alloc(p, SRV_O_Y, &total, lim->memory, err)) ||
        (p->want[SRV_O_Q] && (rc = alloc(p, SRV_O_Q, &total, lim->memory, err))))
        return rc;
    p->seqs = calloc(1, sizeof *p->seqs);
    if (!p->seqs) {
        snprintf(err, OIP_ERRMAX, "inputs: out of memory");
        return 503;
    }
    p->seqs[0].t = p->seqs[0].t_valid = (int)T;
    p->seqs[0].causal = p->causal;
    p->seqs[0].x = x->data;
    p->seqs[0].y = p->out[SRV_O_Y];
    p->seqs[0].q = p->out[SRV_O_Q];
    st->start = pr->seq_start;
    st->end = pr->seq_end;
    st->retain = pr->retain;
    st->has_pos = pr->has_seq_pos;
    st->pos = pr->seq_pos;
    st->is_step = 1;
    return 0;
}

int srv_seq_alloc_maps(srv_prep *p, const oip_request *req, int s, size_t kept,
                       int retain, int retain_scores, size_t memory, char *err)
{
    const attn_config *c = &p->cfg;
    int64_t T = p->shape[SRV_O_Y][1];
    size_t total = req->bytes + p->bytes + p->extra + kept;
    int rc;
    memcpy(p->shape[SRV_O_ATT], (int64_t[]){1, c->n_heads, T, s}, 4 * sizeof(int64_t));
    memcpy(p->shape[SRV_O_SCORES], p->shape[SRV_O_ATT], 4 * sizeof(int64_t));
    p->maps_b = 1, p->maps_h = c->n_heads, p->maps_t = (int)T, p->maps_s = s;
    free(p->out[SRV_O_ATT]);
    free(p->out[SRV_O_SCORES]);
    p->out[SRV_O_ATT] = p->out[SRV_O_SCORES] = NULL;
    if (((p->want[SRV_O_ATT] || retain) &&
         (rc = alloc(p, SRV_O_ATT, &total, memory, err))) ||
        ((p->want[SRV_O_SCORES] || retain_scores) &&
         (rc = alloc(p, SRV_O_SCORES, &total, memory, err))))
        return rc;
    p->seqs[0].attention = p->out[SRV_O_ATT];
    p->seqs[0].scores = p->out[SRV_O_SCORES];
    return 0;
}

/* grow_map: start (t0 == 0 on a start) or extend the sequence's map with
 * this step's rows: weights, and scores when the start asked for them (it
 * sets st->map_scores; every later step computes them for the map).
 * st->map_id becomes "" when the map is gone (evicted, or a start's too
 * big for the store); a map that cannot take the rows (too big for the
 * store now, out of memory) sets st->map_ends: it cannot go on without
 * them, so it ends once the step is answered (seq.c). */
static void grow_map(srv_step *st, const char *model_name, maps_store *maps)
{
    const srv_prep *p = st->prep;
    maps_put_args a;
    char merr[ATTN_ERRMAX];
    int rc;
    memset(&a, 0, sizeof a);
    a.model = model_name;
    a.b = 1, a.h = p->maps_h, a.t = p->maps_t, a.s = p->maps_s;
    a.attention = p->out[SRV_O_ATT];
    /* a start allocated scores only when asked for them */
    a.scores = st->start || st->map_scores ? p->out[SRV_O_SCORES] : NULL;
    a.causal = p->causal;
    a.dk = p->cfg.head_dim;
    a.scale = attn_config_scale(&p->cfg);
    if (st->in->params.n_tokens == a.t) {
        a.tokens = (const char *const *)st->in->params.tokens;
        a.n_tokens = a.t;
    }
    if (st->start) {
        if (maps_put(maps, &a, st->map_id, merr) < 0)
            st->map_id[0] = 0;
        st->map_scores = st->map_id[0] && a.scores;
        return;
    }
    rc = maps_grow_make(maps, st->map_id, st->t0, &a, &st->grown, merr);
    if (rc == ATTN_ENOTFOUND)
        st->map_id[0] = 0;
    else if (rc < 0) {
        st->map_ends = 1;
        srv_copy(st->map_end_why, sizeof st->map_end_why, merr);
    }
}

/* keeps_map: does st's encoding start or grow its sequence's map? */
static int keeps_map(const srv_step *st)
{
    return st->prep->out[SRV_O_ATT] && (st->start ? st->retain : st->map_id[0] != 0);
}

size_t srv_seq_map_bytes(const srv_step *st)
{
    const srv_prep *p = st->prep;
    size_t n;
    int scores;
    if (!st->is_step || !keeps_map(st))
        return 0;
    /* its weights, its scores when it keeps them (a start: when it asked
     * for them), each row's end (the keys it attended); SIZE_MAX past
     * size_t, which no inline bound admits */
    scores = st->start ? p->out[SRV_O_SCORES] != NULL : st->map_scores;
    if (__builtin_mul_overflow((size_t)p->maps_h, (size_t)p->maps_s, &n) ||
        __builtin_mul_overflow(n, (size_t)p->maps_s, &n) ||
        __builtin_mul_overflow(n, sizeof(float) * (scores ? 2 : 1), &n) ||
        __builtin_add_overflow(n, (size_t)p->maps_s * sizeof(int32_t), &n))
        return SIZE_MAX;
    return n;
}

int srv_seq_encode(srv_step *st, const char *model_name, maps_store *maps,
                   oip_encode_fn *enc, char **body, size_t *len,
                   size_t *header_len, char *err)
{
    const srv_prep *p = st->prep;
    const oip_request *req = st->in;
    oip_output outs[SRV_O_N];
    char extra[MAPS_ID_MAX + 128];
    size_t page = (size_t)attn_kv_page_tokens(st->kv->pool);
    int rc, n = srv_prep_outputs(p, req, outs);
    if (maps && keeps_map(st) && !atomic_load(&st->late))
        grow_map(st, model_name, maps);
    else if (st->start)
        st->map_id[0] = 0;
    char d[24], *w = stpcpy(extra, "{\"sequence_length\":"); /* no printf: a step's */
    w = stpcpy(w, srv_fmt_u(d, (unsigned long long)p->maps_s));
    /* its K/V once answered: the pages of its new length (a rewound
     * step's pages past it go back then), as GET /v2/sequences/{id}'s
     * bytes; the pool's page format is fixed, so read here on the pool */
    w = stpcpy(w, ",\"sequence_bytes\":");
    w = stpcpy(w, srv_fmt_u(d, (unsigned long long)(((size_t)p->maps_s + page - 1) /
                                                   page * attn_kv_page_bytes(st->kv->pool))));
    if (st->map_id[0] && !st->map_ends)
        w = stpcpy(stpcpy(stpcpy(w, ",\"map_id\":\""), st->map_id), "\"");
    stpcpy(w, "}");
    rc = (enc ? enc : oip_encode)(model_name, req->id, outs, n, extra, body, len,
                                  header_len, err);
    return srv_encode_status(rc);
}

/*
 * infer.h - one infer request on the pool side: check a decoded request
 * against its model, lay out its engine inputs and output buffers, and
 * encode its answer. No libuv, no shared state: pool threads call these on
 * their own job.
 */
#ifndef ATTND_INFER_H
#define ATTND_INFER_H

#include <stddef.h>

#include "core/attn.h"
#include "proto/oip.h"
#include "server/maps.h"
#include "server/maps_norm.h"

enum { SRV_O_Y, SRV_O_ATT, SRV_O_SCORES, SRV_O_Q, SRV_O_K, SRV_O_V, SRV_O_N };

/* A request laid out for the engine. Output buffers are owned here. */
typedef struct srv_prep {
    int raw;             /* 1: built-in sdpa (attn_raw items) */
    attn_config cfg;     /* the model's, or sdpa's (n_heads 1, d_k, d_v) */
    int n;               /* sequences (model) or items (sdpa) */
    attn_seq *seqs;      /* (n) model path */
    attn_raw *raws;      /* (n) sdpa path */
    float *out[SRV_O_N]; /* each NULL unless produced */
    int rank[SRV_O_N];
    int64_t shape[SRV_O_N][OIP_MAX_RANK];
    int want[SRV_O_N];   /* asked for in the response */
    int binary[SRV_O_N]; /* send as binary data */
    size_t bytes;        /* output bytes */
    size_t extra;        /* bytes of its n sequences' (items') layout here
                            and in the engine's plan (attn_plan_item_bytes:
                            tiles, a raw item's q times scale), counted
                            with the request and its outputs */
    int maps_b, maps_h, maps_t, maps_s; /* attention as (b, h, t, s) */
    int causal;
    int32_t *t_valid, *s_valid; /* (maps_b) lengths, kept for retain */
} srv_prep;

/* Limits of srv_infer_prepare, from the settings. */
typedef struct srv_infer_limits {
    size_t memory;     /* decoded request + outputs */
    long long max_tokens;
    maps_store *maps;  /* NULL: retain is refused */
} srv_infer_limits;

/*
 * srv_infer_prepare: check req against the model (cfg/causal; builtin = the
 * sdpa model) and fill p. Input data stays in req (it must outlive p's
 * use). Returns 0, or an HTTP status (400, 413) with err naming the field.
 */
int srv_infer_prepare(srv_prep *p, const oip_request *req, const char *model_name,
                      const attn_config *cfg, int causal, int builtin,
                      const srv_infer_limits *lim, char *err);
void srv_prep_free(srv_prep *p);

/* srv_prep_extra: p->extra = what laying out n sequences (sdpa: items)
 * for the engine takes, each the plan's share (plan:
 * attn_plan_item_bytes, SIZE_MAX when that overflowed) plus own (its
 * attn_seq or attn_raw, its lengths); with the request
 * (req->bytes) within request-memory, 0, or 413 with err naming the
 * input (what), the bytes and what to send instead (fewer: "fewer tokens
 * a step"); every sum and product checked. A stateless request's layout
 * and a sequence step's. */
int srv_prep_extra(srv_prep *p, const oip_request *req, int64_t n, size_t plan,
                   size_t own, const char *what, const char *fewer,
                   const srv_infer_limits *lim, char *err);

/* srv_prep_outputs: the computed outputs of p in the order of req's
 * outputs list (just y / output when it has none) as oip_outputs pointing
 * at p's buffers; returns how many (<= SRV_O_N). */
int srv_prep_outputs(const srv_prep *p, const oip_request *req,
                     oip_output *outs);

/*
 * srv_infer_encode: the response of a computed request (and its retained
 * map, when asked, with its value norms for what=norm: through grams,
 * the Gram matrices of the weight set of the instance that computed it,
 * maps_norm.h; NULL for sdpa), written by
 * enc (oip_encode's contract; NULL = oip_encode, JSON). Returns 0 or an HTTP status with err; *body is
 * malloc'd. map_id (MAPS_ID_MAX bytes) receives the id of the map put in
 * the store, "" when none was: a status leaves none (a map put before
 * the encoding failed is dropped). The map is the caller's to drop when
 * the body never reaches its client (sched.c: any answer but 200).
 */
int srv_infer_encode(const srv_prep *p, const oip_request *req,
                     const char *model_name, maps_grams *grams,
                     maps_store *maps, oip_encode_fn *enc, char **body,
                     size_t *len, size_t *header_len, char *map_id,
                     char *err);

/* srv_encode_status: the HTTP status of an encoder's return code: 0, 400
 * (a non-finite JSON output), 503 (out of memory) or 500. */
int srv_encode_status(int rc);

#endif

/*
 * maps.h - retained attention maps (API extension `attention_maps`).
 *
 * An infer request with parameters.retain = true hands its attention
 * weights [B, H, T, S] (and its token labels) to maps_put(), which copies
 * them into a store bounded in bytes and returns an id such as
 * "m12-3fa9c1". When a new entry does not fit, the oldest entries are
 * evicted first; a single entry larger than the whole budget is refused.
 *
 * Readers (the HTTP routes GET /v2/maps, /v2/maps/{id},
 * /v2/maps/{id}/attention) take a reference on an entry, so an entry
 * evicted while being rendered stays alive until its last reader lets go;
 * an evicted id answers 404 from then on. Entries are immutable once put;
 * a sequence's map grows (maps_grow_make, maps_grow_put) by replacing its
 * entry with a larger one under the same id, so a reader always sees one
 * whole version.
 *
 * Thread-safety: every function may be called from any thread at any time
 * (one mutex guards the list; rendering happens outside it).
 */
#ifndef ATTN_MAPS_H
#define ATTN_MAPS_H

#include <stddef.h>
#include <stdint.h>

#define MAPS_ID_MAX 32     /* bytes of an id, NUL included */
#define MAPS_NAME_MAX 129  /* model name, NUL included */
#define MAPS_MAX_TOKENS_BYTES 65536 /* cap on one entry's token labels */

typedef struct maps_store maps_store; /* opaque */

/* What an infer request retains. attention is contiguous (b, h, t, s). */
typedef struct maps_put_args {
    const char *model;        /* model name, 1..128 bytes */
    int b, h, t, s;           /* batch, heads, query rows, key rows */
    const float *attention;   /* (b, h, t, s) softmax weights */
    int causal;               /* the request's causal flag */
    const int32_t *t_valid;   /* (b) valid query rows, or NULL = all t */
    const int32_t *s_valid;   /* (b) valid key rows, or NULL = all s */
    /* (b, t) row i of item b attended keys 0 .. row_end - 1 (0 .. s; the
     * rows of a sequence's grown map, each from its own step), or NULL:
     * the causal flag says (keys 0 .. i, or all) */
    const int32_t *row_end;
    const char *const *tokens; /* labels, or NULL: see maps_put */
    int n_tokens;
    int token_items;          /* 0: one list labels every item; b: one list
                               * per item, n_tokens / b each, back to back */
    int cross;                /* keys are another sequence's (sdpa's k, a
                               * context): t + s labels even when s == t */
    /* Optional, for the page's mask drawing and step view (NULL/0 = not
     * kept). mask_planes is 1 (one [t, s] mask for all), b, or b * h. */
    const uint8_t *mask;      /* (mask_planes, t, s) 1 = may attend */
    int mask_planes;
    const float *scores;      /* (b, h, t, s) (q * scale) . k, pre-mask */
    const float *v;           /* (b, kv_h, s, dv) value rows */
    int kv_h, dv;             /* v's heads (h % kv_h == 0) and width */
    int dk;                   /* head dim behind scores (0 = unknown) */
    float scale;              /* q's scale behind scores (0 = unknown) */
    /* (b, h, s) each key's value norm per query head, for what=norm, or
     * NULL (not kept): norm_of MAPS_NORM_VO, |v_j^h W_O^h| (a weight set:
     * v_j^h its kv head's value row, W_O^h the d_v rows of W_o that head
     * h's output goes through); MAPS_NORM_V, |v_j^h| (sdpa: no W_o) */
    const float *vnorm;
    int norm_of;
} maps_put_args;

/* What a map's what=norm weighs its cells by (maps_info.norm_of). */
enum { MAPS_NORM_NONE = 0, MAPS_NORM_VO = 1, MAPS_NORM_V = 2 };

/* What maps_slice_of reads. */
typedef enum maps_what {
    MAPS_WEIGHTS = 0, /* softmax weights */
    MAPS_SCORES,      /* scaled scores (if retained) */
    MAPS_ALLOWED,     /* 1 = attended, 0 = masked by any mask */
    MAPS_NORM         /* weight x the key's value norm (if retained) */
} maps_what;

/* One entry's metadata (a copy; safe to keep). */
typedef struct maps_info {
    char id[MAPS_ID_MAX];
    char model[MAPS_NAME_MAX];
    int b, h, t, s;
    int causal;         /* the retaining request's flag (a sequence's map:
                           its start's; each row's own are in its mask) */
    int64_t created_ms; /* Unix time, milliseconds */
    size_t bytes;       /* what the entry counts against the budget */
    int mask_planes;    /* explicit mask planes kept (0 = none sent) */
    int has_scores;     /* scores retained */
    int kv_h, dv;       /* v retained as (b, kv_h, s, dv); 0 = none */
    int dk;             /* 0 = unknown */
    float scale;        /* q's scale behind the scores; 0 = unknown */
    int norm_of;        /* MAPS_NORM_*: value norms kept for what=norm */
    unsigned version;   /* 0 when put; one more each time it grows or is cut
                           (a sequence's step, also one that replaced rows) */
} maps_info;

/*
 * maps_store_create: a store holding at most max_bytes (floats, labels and
 * bookkeeping counted; max_bytes >= 1). 0, or ATTN_EINVAL / ATTN_ENOMEM.
 * maps_store_destroy frees it (NULL is fine); no other thread may use the
 * store then, and no reference may be outstanding.
 */
int maps_store_create(maps_store **out, size_t max_bytes);
void maps_store_destroy(maps_store *st);

/*
 * maps_put: copy one request's maps into the store and write its new id
 * into id_out (MAPS_ID_MAX bytes). Token labels: n_tokens == 0 (none),
 * n_tokens == t (query labels; keys share them when s == t), or
 * n_tokens == t + s (query labels, then key labels, for cross-attention:
 * when s == t, only with a->cross), for every batch item, or with
 * a->token_items == b one such list per item (n_tokens / b each);
 * anything else is refused. Evicts the oldest entries until the new one
 * fits. Returns 0, ATTN_EINVAL (bad shape, labels, or an entry larger than
 * the whole store; err names the field), ATTN_EOVERFLOW or ATTN_ENOMEM;
 * the store is unchanged on failure. Any thread.
 */
int maps_put(maps_store *st, const maps_put_args *a, char *id_out,
             char *err);

/*
 * A sequence's map (b == 1, square: t == s == tokens so far) grows by the
 * rows of its next step, in two parts, so that it changes only once the
 * step has been answered. maps_grow_make builds the grown entry (the
 * copy: the work) in *out and leaves the store as it was: a gives the
 * step's rows, a->t new query rows over a->s = t0 + a->t keys, attention
 * (1, h, a->t, a->s), labels a->tokens (0 or a->t of them); the entry's
 * first t0 rows are kept (rows past t0, replaced by a step that rewound
 * the sequence, are dropped), with their weights on keys 0 .. t0-1 only,
 * widened to a->s keys with zeros (they never saw later keys; rewound:
 * those keys are other tokens now), and the new rows appended. Each row
 * keeps the keys it attended, for the mask (maps_slice.c: allowed): a kept row
 * its own (cut at t0), a new row at t0 + r the keys 0 .. t0 + r under
 * a->causal, else all a->s. A map that kept scores grows them the same
 * way: the step gives its rows' a->scores (1, h, a->t, a->s), else
 * ATTN_EINVAL (a map without scores ignores a step's). Explicit masks and
 * values are not kept for growing maps. Returns 0, ATTN_ENOTFOUND
 * (evicted), ATTN_EINVAL (h differs, t0 past the map, scores missing, or
 * the map outgrew the store: said, naming maps-bytes, before the grown
 * map is allocated) or ATTN_ENOMEM. maps_grow_put puts it in
 * place of its id's entry, whatever that became, as the newest with the
 * same id and the next version (0), or frees it when that was evicted
 * meanwhile (ATTN_ENOTFOUND); maps_grown_free frees one not put (NULL is
 * fine). Any thread.
 */
typedef struct maps__entry maps_grown;
int maps_grow_make(maps_store *st, const char *id, int t0,
                   const maps_put_args *a, maps_grown **out, char *err);
int maps_grow_put(maps_store *st, maps_grown *g);
void maps_grown_free(maps_grown *g);

/* maps_drop: id leaves the store (a failed sequence start's new map).
 * Any thread. */
void maps_drop(maps_store *st, const char *id);

/* maps_stats: bytes in use, the budget, entries held, entries evicted so
 * far (for /metrics). Any of the pointers may be NULL. */
void maps_stats(maps_store *st, size_t *used, size_t *max_bytes,
                size_t *n_entries, uint64_t *n_evicted);

/* maps_list: up to cap entries' metadata, newest first; returns how many
 * were written. maps_list_counted also gives the bytes in use and the
 * entries held at that same moment (either pointer may be NULL), so that
 * a listing adds up. */
size_t maps_list(maps_store *st, maps_info *out, size_t cap);
size_t maps_list_counted(maps_store *st, maps_info *out, size_t cap,
                         size_t *used, size_t *n_entries);

/* maps_info_get: metadata of id. 0, or ATTN_ENOTFOUND (unknown/evicted). */
int maps_info_get(maps_store *st, const char *id, maps_info *out);

/*
 * maps_slice: one [T, S] map of entry id - batch item b, head h (h == -1:
 * the mean over heads) - max-pooled into at most max_n x max_n cells
 * (max_n <= 0: no pooling). Pooling uses blocks of ceil(T / max_n) rows by
 * ceil(S / max_n) columns; every output cell is the maximum of its block,
 * so a strong weight never disappears in the overview. *out is malloc'd
 * (rows, cols) row-major and the caller frees it; *row_block / *col_block
 * (may be NULL) receive the block sizes. Returns 0, ATTN_ENOTFOUND,
 * ATTN_EINVAL (b or h out of range; err names it) or ATTN_ENOMEM.
 */
int maps_slice(maps_store *st, const char *id, int b, int h, int max_n,
               float **out, int *rows, int *cols, int *row_block,
               int *col_block, char *err);

/*
 * maps_slice_of: maps_slice for what: the weights (as maps_slice), the
 * scores (ATTN_EINVAL naming `what` when none were retained; h == -1 is
 * their mean), the weights times their key's value norm (MAPS_NORM:
 * ATTN_EINVAL when none were kept; h == -1 the mean of the heads'
 * cells, maps_norm.c), or the allowed cells as 1.0 / 0.0 from the request's causal
 * flag (or each row's end, row_end), lengths and explicit mask (h == -1:
 * allowed by any head). Pooling
 * takes the block maximum, so a pooled allowed-cell is 0 only when every
 * pair in its block was masked.
 */
int maps_slice_of(maps_store *st, const char *id, maps_what what, int b,
                  int h, int max_n, float **out, int *rows, int *cols,
                  int *row_block, int *col_block, char *err);

/*
 * maps_values: the value rows (s, dv) that query head h of batch item b
 * read (its kv head), malloc'd into *out. 0, ATTN_ENOTFOUND, ATTN_EINVAL
 * (b/h out of range, or no values retained; err names it) or ATTN_ENOMEM.
 */
int maps_values(maps_store *st, const char *id, int b, int h, float **out,
                int *rows, int *cols, char *err);

/* maps_pool_max: the pooling maps_slice uses, on a caller's (t, s) map
 * into out (rows, cols) with the block sizes it reports. Exposed for
 * tests and benchmarks. 0 or ATTN_EINVAL. */
int maps_pool_max(const float *in, int t, int s, int max_n, float *out,
                  int *rows, int *cols, int *row_block, int *col_block);

/* An HTTP answer built by maps_http_get (no sockets here). */
typedef struct maps_reply {
    int status;               /* 200, 400, 404, 413 */
    const char *content_type; /* static string */
    char *body;               /* malloc'd; the caller frees */
    size_t len;
    char shape[64];           /* "rows,cols" (b=all, h=all: "B,H,rows,cols")
                                 for format=f32 and npy, else "" */
    char version[24];         /* the version of the map the cells of a 200
                                 /attention answer are from, else "" */
    unsigned long json_mark; /* attn_json_mark at the route's start */
    int cut;                 /* maps_http_render: stopped part way (no body) */
} maps_reply;

/* Asked while a map renders: nonzero when its reader has gone, and the
 * render should stop. Called from the rendering thread. */
typedef int (*maps_cut_fn)(void *ctx);

/* Query-string lookup the router supplies: the value of key, or NULL. */
typedef const char *(*maps_arg_fn)(void *ctx, const char *key);

/*
 * maps_http_get: answer a GET for path (no query string) under /v2/maps:
 *   /v2/maps                       {"maps":[{id,model,shape,created,...}],
 *                                   "count", "bytes_used", "bytes_max"}
 *                                  (the newest 1024; count is all of them)
 *   /v2/maps/{id}                  metadata, tokens, lengths
 *   /v2/maps/{id}/attention        ?b=&h=&max=&format=json|f32|npy
 *                                  &what=attention|scores|mask|v|entropy
 *                                  |norm
 *                                  (entropy: each row's, [rows, 1]; norm:
 *                                  each weight x its key's value norm)
 *                                  (b=all, h=all: every item's, head's
 *                                  planes, [B, H, rows, cols])
 * arg looks up query parameters (may be NULL when there are none); the
 * router has refused names this route does not read and names given twice
 * (http_head.c), so what arg does not return was not sent. Errors
 * become {"error": "..."} replies naming the parameter. Returns 0 when r
 * holds a reply, or ATTN_ENOMEM (r->body NULL; answer 500). Any thread.
 */
int maps_http_get(maps_store *st, const char *path, maps_arg_fn arg,
                  void *ctx, maps_reply *r);
/* maps_http_render: maps_http_get that asks cut(cut_ctx) (may be NULL)
 * before every 16th row of each plane and before printing; when it says
 * the reader went, the render stops there: 0 with r->cut set, no body.
 * An /attention answer that would allocate (its floats, its JSON text,
 * a row of a head mean or mask; the stored planes are read in place)
 * more than answer_max bytes (request-memory; 0: no bound, as
 * maps_http_get) is a 413 naming it. */
int maps_http_render(maps_store *st, const char *path, maps_arg_fn arg,
                     void *ctx, maps_cut_fn cut, void *cut_ctx,
                     size_t answer_max, maps_reply *r);

#endif

/*
 * maps_http.c - the retained-map routes rendered as HTTP replies:
 *   GET /v2/maps                  list, newest first
 *   GET /v2/maps/{id}             one entry's metadata and labels
 *   GET /v2/maps/{id}/attention   one [T, S] map (b=all, h=all: every
 *                                 item's, head's), JSON, raw FP32 or .npy
 * Pure functions of the store: no sockets, callable from any thread.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/attn.h"
#include "core/json_mem.h"
#include "proto/oip.h"
#include "server/maps.h"
#include "server/maps_int.h"

/* JSON maps above this many cells are refused (use max=N or f32). */
#define MAPS_JSON_MAX_CELLS ((size_t)1 << 20)
/* GET /v2/maps lists at most this many (newest); "count" gives them all. */
#define MAPS_LIST_MAX 1024

/* Fill r with o dumped compactly (steals o), status 200; 0 or
 * ATTN_ENOMEM. */
static int reply_json(maps_reply *r, json_t *o)
{
    r->status = 200;
    r->content_type = "application/json";
    r->body = attn_json_dumps(o, JSON_COMPACT, r->json_mark);
    json_decref(o);
    if (!r->body)
        return ATTN_ENOMEM;
    r->len = strlen(r->body);
    return 0;
}

/* Fill r with a JSON error body; 0 or ATTN_ENOMEM. */
static int reply_error(maps_reply *r, int status, const char *msg)
{
    int rc = reply_json(r, json_pack("{s:s}", "error", msg));
    r->status = status;
    return rc;
}

/* RFC 3339 UTC with milliseconds, e.g. 2026-11-29T08:10:00.123Z. */
static void format_time(int64_t ms, char *buf, size_t n)
{
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    char tmp[32];

    gmtime_r(&sec, &tm);
    strftime(tmp, sizeof(tmp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%03dZ", tmp, (int)(ms % 1000));
}

/* An entry's metadata; "retained" lists what ?what= can read. */
static json_t *info_json(const maps_info *in)
{
    char when[48];
    json_t *o, *kept;

    format_time(in->created_ms, when, sizeof(when));
    kept = json_pack("[ss]", "attention", "mask");
    if (kept && in->has_scores &&
        json_array_append_new(kept, json_string("scores")))
        goto fail;
    if (kept && in->kv_h > 0 && json_array_append_new(kept, json_string("v")))
        goto fail;
    if (kept && in->norm_of &&
        json_array_append_new(kept, json_string("norm")))
        goto fail;
    o = json_pack("{s:s, s:s, s:[i,i,i,i], s:s, s:I, s:b, s:b, s:o, s:I}",
                  "id", in->id, "model", in->model, "shape", in->b, in->h,
                  in->t, in->s, "created", when, "bytes", (json_int_t)in->bytes,
                  "causal", in->causal, "mask", in->mask_planes > 0,
                  "retained", kept, "version", (json_int_t)in->version);
    if (!o)
        return NULL;
    if ((in->kv_h > 0 &&
         json_object_set_new(o, "v_shape",
                             json_pack("[i,i,i,i]", in->b, in->kv_h, in->s,
                                       in->dv))) ||
        (in->norm_of &&
         json_object_set_new(o, "norm_of",
                             json_string(in->norm_of == MAPS_NORM_VO
                                             ? "v W_o" : "v"))) ||
        (in->dk > 0 && json_object_set_new(o, "d_k", json_integer(in->dk))) ||
        (in->scale > 0.0f &&
         json_object_set_new(o, "scale", json_real((double)in->scale)))) {
        json_decref(o);
        return NULL;
    }
    return o;
fail:
    json_decref(kept);
    return NULL;
}

/* GET /v2/maps: the newest MAPS_LIST_MAX entries, the total count and the
 * store's bytes. 0, or ATTN_ENOMEM with r untouched. */
static int route_list(maps_store *st, maps_reply *r)
{
    maps_info *list = malloc(MAPS_LIST_MAX * sizeof(*list));
    json_t *o = NULL, *arr;
    size_t n, i, used, max_bytes, total;

    if (!list)
        return ATTN_ENOMEM;
    /* the list, its count and its bytes at one moment */
    n = maps_list_counted(st, list, MAPS_LIST_MAX, &used, &total);
    maps_stats(st, NULL, &max_bytes, NULL, NULL);
    arr = json_array();
    for (i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, info_json(&list[i])) != 0)
            goto fail;
    o = json_pack("{s:o, s:I, s:I, s:I}", "maps", arr, "count",
                  (json_int_t)total, "bytes_used", (json_int_t)used,
                  "bytes_max", (json_int_t)max_bytes);
    free(list);
    return reply_json(r, o);
fail:
    json_decref(arr);
    free(list);
    return ATTN_ENOMEM;
}

/* Labels [from, to) of e as a JSON array of strings. */
static json_t *labels_json(const maps__entry *e, int from, int to)
{
    json_t *arr = json_array();
    int i;

    for (i = from; arr && i < to; i++)
        if (json_array_append_new(
                arr, json_string(e->labels + e->label_off[i])) != 0) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

static json_t *ints_json(const int32_t *v, int n)
{
    json_t *arr = json_array();
    int i;

    for (i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_integer(v[i])) != 0) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

/* item_labels: item bi's query (into *q) and key (into *k) labels of e,
 * per labels an item (0, t or t + s; the keys share the queries' when s
 * == t); NULL on ENOMEM. */
static void item_labels(const maps__entry *e, int bi, int per, json_t **q,
                        json_t **k)
{
    int t = e->info.t, o = bi * per;

    if (per == t + e->info.s) {
        *q = labels_json(e, o, o + t);
        *k = labels_json(e, o + t, o + per);
    } else if (per == t) {
        *q = labels_json(e, o, o + t);
        *k = e->info.s == t ? labels_json(e, o, o + t) : json_array();
    } else {
        *q = json_array();
        *k = json_array();
    }
}

/* GET /v2/maps/{id}: metadata, labels (query and key) and lengths; 404
 * when id is not retained. tokens and key_tokens are item 0's (the one
 * list's, when one labelled every item); item_tokens and item_key_tokens
 * every item's, when the request sent one list per item. 0, or
 * ATTN_ENOMEM. */
static int route_meta(maps_store *st, const char *id, maps_reply *r)
{
    maps__entry *e = maps__acquire(st, id);
    json_t *o, *q = NULL, *k = NULL, *iq = NULL, *ik = NULL;
    int per, bi, bad = 0, rc;

    if (!e) {
        char msg[128];
        snprintf(msg, sizeof(msg), "map %s: not retained (unknown or "
                 "evicted)", id);
        return reply_error(r, 404, msg);
    }
    per = e->label_items ? e->n_labels / e->label_items : e->n_labels;
    item_labels(e, 0, per, &q, &k);
    o = info_json(&e->info);
    if (e->label_items) {
        iq = json_array();
        ik = json_array();
        for (bi = 0; iq && ik && bi < e->label_items && !bad; bi++) {
            json_t *a, *b;
            item_labels(e, bi, per, &a, &b);
            bad = json_array_append_new(iq, a) | json_array_append_new(ik, b);
        }
        /* each set below takes its value, NULL too */
        bad |= json_object_set_new(o, "item_tokens", iq) |
               json_object_set_new(o, "item_key_tokens", ik);
    }
    /* each set takes its value (NULL too) even when it fails, o NULL
     * included: all of them run, so none is left held */
    if ((o == NULL) | bad | json_object_set_new(o, "tokens", q) |
        json_object_set_new(o, "key_tokens", k) |
        json_object_set_new(o, "lengths", ints_json(e->t_valid, e->info.b)) |
        json_object_set_new(o, "context_lengths",
                            ints_json(e->s_valid, e->info.b))) {
        json_decref(o);
        maps__release(e);
        return ATTN_ENOMEM;
    }
    maps__release(e);
    rc = reply_json(r, o);
    return rc;
}

/* Parse a decimal int in [lo, hi] (lo >= 0): digits alone, not the white
 * space or sign strtol lets before them; 0 or -1. */
static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v;

    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* Rows (or columns) of n pooled into at most max_n (maps_pool_max's). */
static int pooled(int n, int max_n)
{
    int blk = max_n <= 0 || n <= max_n ? 1 : (n + max_n - 1) / max_n;
    return (n + blk - 1) / blk;
}

/* NPY_HEAD: room for a .npy header of up to four dimensions (128 bytes
 * at most: 10 + 66 + 4 x 12, padded to 64). */
#define NPY_HEAD 192

/* npy_header: a NumPy .npy (format 1.0) header for little-endian float32
 * of shape dims[nd] into buf, as numpy.save writes it (the dict, padded
 * with spaces and a newline to a multiple of 64 bytes with its 10-byte
 * preamble); returns its length. */
static size_t npy_header(char *buf, const int *dims, int nd)
{
    char *d = buf + 10;
    size_t n = (size_t)snprintf(d, NPY_HEAD - 10, "{'descr': '<f4', "
                                "'fortran_order': False, 'shape': (");
    int i;

    for (i = 0; i < nd; i++)
        n += (size_t)snprintf(d + n, NPY_HEAD - 10 - n, "%s%d",
                              i ? ", " : "", dims[i]);
    n += (size_t)snprintf(d + n, NPY_HEAD - 10 - n, "%s), }",
                          nd == 1 ? "," : "");
    while ((10 + n + 1) % 64)
        d[n++] = ' ';
    d[n++] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(n & 255);
    buf[9] = (char)(n >> 8);
    return 10 + n;
}

/* dims_text: dims[nd] as "a,b,c" (Map-Shape) or, with json, "[a,b,c]". */
static void dims_text(char *buf, size_t cap, const int *dims, int nd,
                      int json)
{
    size_t n = (size_t)snprintf(buf, cap, "%s", json ? "[" : "");
    int i;

    for (i = 0; i < nd && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? "," : "",
                              dims[i]);
    if (json && n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* MAPS_HEAD: room for the JSON answer's head (route_attention's) */
#define MAPS_HEAD 512

/* answer_need: the bytes an answer of cells floats (planes of plane
 * cells) allocates at its peak in format fmt (0 JSON, 1 f32, 2 npy):
 * its floats (the one plane, the body of a single f32 answer; or the
 * buffer b=all, h=all and npy fill, planes written in place), beside
 * them while they fill the row a head mean or mask computes (scratch) or
 * a value plane's copy, then the JSON text. The stored t x s planes are
 * read in place, never copied whole. */
static size_t answer_need(size_t cells, size_t plane, int fmt, int whole,
                          int values, size_t scratch)
{
    size_t held = (fmt == 2 ? NPY_HEAD : 0) + cells * sizeof(float);
    size_t work = values ? (whole || fmt == 2 ? plane * sizeof(float) : 0)
                         : scratch;
    size_t text = fmt ? 0 : MAPS_HEAD + cells * OIP_JSON_FLOAT_MAX + 3;

    return held + (text > work ? text : work);
}

/* too_big: the 413 for an answer of need bytes past answer_max, naming
 * only what would fit instead (each alone: another format, one plane at
 * a time, a pooled overview), else that only a larger bound serves it.
 * rows: what=entropy, one value per query row (nothing to pool). */
static void too_big(char *err, size_t cap, const char *shape, size_t cells,
                    size_t plane, size_t planes, int fmt, int whole,
                    int values, int rows, size_t scratch, size_t need,
                    size_t answer_max)
{
    char ask[128];
    size_t n = 0;

#define ASK(s) n += (size_t)snprintf(ask + n, sizeof(ask) - n, "%s%s", \
                                     n ? ", " : "", s)
    ask[0] = '\0';
    if (!fmt && answer_need(cells, plane, 2, whole, values, scratch) <=
                    answer_max)
        ASK("format=npy");
    else if (!fmt && answer_need(cells, plane, 1, whole, values, scratch) <=
                         answer_max)
        ASK("format=f32");
    if (whole && answer_need(plane, plane, fmt, 0, values, scratch) <=
                     answer_max)
        ASK("one b and h at a time");
    if (!values && !rows &&
        answer_need(planes, 1, fmt, whole, values, scratch) <= answer_max)
        ASK("max=");
#undef ASK
    if (n)
        snprintf(err, cap, "%s: the %s map as %s takes %zu bytes, more "
                 "than one request may (%zu bytes, request-memory); ask "
                 "for %s, or raise --request-memory",
                 whole ? "b, h" : values || rows ? "what" : "max", shape,
                 fmt == 2 ? "npy" : fmt ? "f32" : "JSON", need, answer_max,
                 ask);
    else
        snprintf(err, cap, "%s: the %s map as %s takes %zu bytes, more "
                 "than one request may (%zu bytes, request-memory), and no "
                 "smaller answer of it fits (%s %zu bytes): raise "
                 "--request-memory",
                 whole ? "b, h" : values || rows ? "what" : "max",
                 shape, fmt == 2 ? "npy" : fmt ? "f32" : "JSON", need,
                 answer_max, values ? "one value plane alone is"
                             : rows ? "one plane of it alone is"
                                    : "a row of it alone is",
                 values || rows ? plane * sizeof(float) : scratch);
}

/* One /attention request's asks (its query string, parsed). */
typedef struct ask {
    int b, h;          /* batch item, head (h -1: the heads' mean) */
    int b_all, h_all;  /* b=all, h=all */
    int max_n;         /* max=: pool into at most max_n rows and columns */
    int fmt;           /* 0 JSON, 1 f32, 2 npy */
    int values;        /* what=v */
    int entropy;       /* what=entropy: one value per query row */
    maps_what what;
    const char *what_s; /* as sent (NULL: attention) */
} ask;

/* parse_ask: a's fields from the query string (arg may be NULL); NULL, or
 * the 400's message naming the parameter. */
static const char *parse_ask(maps_arg_fn arg, void *ctx, ask *a)
{
    const char *sb = arg ? arg(ctx, "b") : NULL;
    const char *sh = arg ? arg(ctx, "h") : NULL;
    const char *sm = arg ? arg(ctx, "max") : NULL;
    const char *sf = arg ? arg(ctx, "format") : NULL;
    const char *sw = arg ? arg(ctx, "what") : NULL;

    memset(a, 0, sizeof(*a));
    a->what = MAPS_WEIGHTS;
    a->what_s = sw;
    if (sb && strcmp(sb, "all") == 0)
        a->b_all = 1;
    else if (sb && parse_int(sb, 0, 1 << 30, &a->b))
        return "b: expected a batch index >= 0 or \"all\"";
    if (sh && strcmp(sh, "mean") == 0)
        a->h = -1;
    else if (sh && strcmp(sh, "all") == 0)
        a->h_all = 1;
    else if (sh && parse_int(sh, 0, 1 << 30, &a->h))
        return "h: expected a head index >= 0, \"mean\" or \"all\"";
    if (sm && parse_int(sm, 1, 1 << 20, &a->max_n))
        return "max: expected an integer in [1, 1048576]";
    if (sf && strcmp(sf, "f32") == 0)
        a->fmt = 1;
    else if (sf && strcmp(sf, "npy") == 0)
        a->fmt = 2;
    else if (sf && strcmp(sf, "json") != 0)
        return "format: expected json, f32 or npy";
    if (!sw || strcmp(sw, "attention") == 0)
        a->what = MAPS_WEIGHTS;
    else if (strcmp(sw, "scores") == 0)
        a->what = MAPS_SCORES;
    else if (strcmp(sw, "mask") == 0)
        a->what = MAPS_ALLOWED;
    else if (strcmp(sw, "v") == 0)
        a->values = 1;
    else if (strcmp(sw, "entropy") == 0)
        a->entropy = 1;
    else if (strcmp(sw, "norm") == 0)
        a->what = MAPS_NORM;
    else
        return "what: expected attention, scores, mask, v, entropy or norm";
    if (a->values && a->h < 0)
        return "h: what=v needs a head index or \"all\" (values have no "
               "mean)";
    if (a->values && sm)
        return "max: what=v is never pooled";
    if (a->entropy && sm)
        return "max: what=entropy is one value per query row, never pooled";
    return NULL;
}

/* json_too_big: an answer of cells floats (planes of prows x pcols; whole:
 * several planes) asked as JSON past MAPS_JSON_MAX_CELLS: ATTN_EINVAL with
 * the 400's message in err naming what to ask for instead; else 0. */
static int json_too_big(const ask *a, const maps_info *info, size_t cells,
                        int prows, int pcols, int whole,
                        char err[ATTN_ERRMAX])
{
    if (a->fmt || cells <= MAPS_JSON_MAX_CELLS)
        return 0;
    if (a->entropy)
        snprintf(err, ATTN_ERRMAX, "what: %zu entropies (%d a plane) are "
                 "too large for JSON; ask for format=f32 or npy, or one b "
                 "and h", cells, info->t);
    else if (a->values && whole)
        snprintf(err, ATTN_ERRMAX, "what: %zu value cells (%d x %d a head) "
                 "are too large for JSON; ask for format=f32 or npy, or one "
                 "b and h", cells, info->s, info->dv);
    else if (a->values)
        snprintf(err, ATTN_ERRMAX, "what: %d x %d value rows are too large "
                 "for JSON; ask for format=f32", info->s, info->dv);
    else if (whole)
        snprintf(err, ATTN_ERRMAX, "max: %zu cells (%d x %d a plane) are too "
                 "large for JSON; ask for max=, format=f32 or npy, or one b "
                 "and h", cells, prows, pcols);
    else
        snprintf(err, ATTN_ERRMAX, "max: a %d x %d map is too large for "
                 "JSON; ask for max=1024 or format=f32", info->t, info->s);
    return ATTN_EINVAL;
}

/* json_answer: r's 200 JSON answer of the cells floats of map (taken,
 * freed), as the ask a read them from the map of info: its head (id,
 * model, what, b, h, shape dims[nd], source_shape sdims[nd], block bt x
 * bs) and flat row-major "data". 0 or ATTN_ENOMEM. */
static int json_answer(maps_reply *r, const maps_info *info, const ask *a,
                       const int *dims, const int *sdims, int nd, int bt,
                       int bs, float *map, size_t cells)
{
    char head[MAPS_HEAD], shape[64], src[64];
    json_t *js = json_string(info->model);
    /* the model name may need escaping: let jansson render it */
    char *mq = attn_json_dumps(js, JSON_ENCODE_ANY, r->json_mark);
    size_t cap;
    char *p;
    int hl;

    json_decref(js);
    if (!mq)
        goto nomem;
    hl = snprintf(head, sizeof(head),
                  "{\"id\":\"%s\",\"model\":%s,\"what\":\"%s\",\"b\":",
                  info->id, mq, a->values ? "v" : a->what_s ? a->what_s
                                                            : "attention");
    free(mq);
    if (a->b_all)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "\"all\"");
    else
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "%d", a->b);
    hl += snprintf(head + hl, sizeof(head) - (size_t)hl, ",\"h\":");
    if (a->h_all)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "\"all\"");
    else if (a->h < 0)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "\"mean\"");
    else
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "%d", a->h);
    dims_text(shape, sizeof(shape), dims, nd, 1);
    dims_text(src, sizeof(src), sdims, nd, 1);
    hl += snprintf(head + hl, sizeof(head) - (size_t)hl,
                   ",\"shape\":%s,\"source_shape\":%s,"
                   "\"block\":[%d,%d],\"datatype\":\"FP32\",\"data\":[",
                   shape, src, bt, bs);
    if (hl < 0 || (size_t)hl >= sizeof(head))
        goto nomem;
    cap = (size_t)hl + cells * OIP_JSON_FLOAT_MAX + 3;
    r->body = malloc(cap);
    if (!r->body)
        goto nomem;
    memcpy(r->body, head, (size_t)hl);
    p = r->body + hl;
    /* as infer responses print floats; null for a non-finite score */
    p += oip_json_floats(map, cells, p);
    if (cells)
        p--; /* the last comma */
    *p++ = ']';
    *p++ = '}';
    *p = '\0';
    r->len = (size_t)(p - r->body);
    r->status = 200;
    r->content_type = "application/json";
    free(map);
    return 0;
nomem:
    free(map);
    return ATTN_ENOMEM;
}

/* entropy_into: the Shannon entropy (nats) of each query row's weights
 * of item b, head h (h -1: the mean of the heads' entropies) into dst[t]:
 * H_i = -sum_j p_ij ln p_ij over the cells with p > 0 (0 ln 0 = 0: a
 * masked key, whose weight is 0, adds nothing; a sequence's row only
 * holds the keys its step had), summed in double and rounded once; a
 * query row past item b's length is 0. Reads the stored rows in place;
 * asks cut before every 16th row: 1 when its reader went, else 0. */
static int entropy_into(const maps__entry *e, int b, int h, maps_cut_fn cut,
                        void *cut_ctx, float *dst)
{
    size_t ts = (size_t)e->info.t * (size_t)e->info.s;
    int h0 = h < 0 ? 0 : h, h1 = h < 0 ? e->info.h : h + 1, i, j, k;

    for (i = 0; i < e->info.t; i++) {
        double sum = 0.0;
        if (cut && (i & 15) == 0 && cut(cut_ctx))
            return 1;
        for (k = h0; i < e->t_valid[b] && k < h1; k++) {
            const float *row =
                e->attention +
                ((size_t)b * (size_t)e->info.h + (size_t)k) * ts +
                (size_t)i * (size_t)e->info.s;
            double hk = 0.0;
            for (j = 0; j < e->info.s; j++)
                if (row[j] > 0.0f)
                    hk -= (double)row[j] * log((double)row[j]);
            sum += hk;
        }
        dst[i] = (float)(sum / (double)(h1 - h0));
    }
    return 0;
}

/* GET /v2/maps/{id}/attention?b=&h=&max=&format=&what=: one [T, S] map
 * (or its max-pooled overview) as JSON with a flat row-major "data", as
 * raw FP32 with the shape in r->shape, or as a .npy file; b=all and
 * h=all (extension) put every batch item's and head's planes in one
 * answer, [B, H, rows, cols] (either alone: [B, ...] or [H, ...]). Bad
 * parameters are 400s naming themselves; JSON above MAPS_JSON_MAX_CELLS
 * cells is refused (ask for max= or f32; for what=v the cells are the
 * value rows, S x d_v: f32), and an answer that allocates more than
 * answer_max bytes (answer_need; request-memory; 0: no bound) is 413.
 * cut (may be NULL) is asked while each plane fills and before it is
 * printed: when its reader went, r->cut and no body.
 * 0, or ATTN_ENOMEM. */
static int route_attention(maps_store *st, const char *id, maps_arg_fn arg,
                           void *ctx, maps_cut_fn cut, void *cut_ctx,
                           size_t answer_max, maps_reply *r)
{
    char err[ATTN_ERRMAX], shape[64], npy[NPY_HEAD];
    const char *bad;
    float *map = NULL, *all = NULL;
    int rows, cols, bt = 1, bs = 1, rc, nd = 0, dims[4], sdims[4];
    int b0, b1, h0, h1, bi, hi, prows, pcols, whole, gone = 0;
    ask a;
    maps_info info;
    maps__entry *e;
    size_t cells, plane, k = 0, nhead = 0, need, scratch;

    bad = parse_ask(arg, ctx, &a);
    if (bad)
        return reply_error(r, 400, bad);
    /* one version of the map throughout: a sequence's next step may
     * replace it meanwhile (the metadata below and the cells agree, and
     * so do the planes of b=all, h=all) */
    e = maps__acquire(st, id);
    if (!e) {
        snprintf(err, sizeof(err), "map %s: not retained (unknown or "
                 "evicted)", id);
        return reply_error(r, 404, err);
    }
    info = e->info;
    b0 = a.b_all ? 0 : a.b;
    b1 = a.b_all ? info.b : a.b + 1;
    h0 = a.h_all ? 0 : a.h;
    h1 = a.h_all ? info.h : a.h + 1;
    if (a.b_all)
        dims[nd] = sdims[nd] = info.b, nd++;
    if (a.h_all)
        dims[nd] = sdims[nd] = info.h, nd++;
    whole = nd > 0;
    prows = a.values ? info.s : pooled(info.t, a.max_n);
    pcols = a.values ? info.dv : a.entropy ? 1 : pooled(info.s, a.max_n);
    dims[nd] = prows;
    dims[nd + 1] = pcols;
    sdims[nd] = a.values ? info.s : info.t;
    sdims[nd + 1] = a.values ? info.dv : a.entropy ? 1 : info.s;
    nd += 2;
    /* b*h*t*s*4 and b*kv_h*s*dv*4 fit (maps__entry_build): so do these */
    plane = (size_t)prows * (size_t)pcols;
    cells = plane * (size_t)(b1 - b0) * (size_t)(h1 - h0);
    scratch = a.values || a.entropy ? 0
                                    : maps__row_scratch(&info, a.what, h0);
    need = answer_need(cells, plane, a.fmt, whole, a.values, scratch);
    rc = json_too_big(&a, &info, cells, prows, pcols, whole, err);
    if (!rc)
        rc = maps__check(e, b0, h0, !a.values, err);
    if (!rc && answer_max && need > answer_max) {
        char sh_[64];
        dims_text(sh_, sizeof(sh_), dims, nd, 1);
        too_big(err, sizeof(err), sh_, cells, plane,
                (size_t)(b1 - b0) * (size_t)(h1 - h0), a.fmt, whole,
                a.values, a.entropy, scratch, need, answer_max);
        maps__release(e);
        return reply_error(r, 413, err);
    }
    if (rc) {
        maps__release(e);
        return reply_error(r, 400, err);
    }
    if (whole || a.fmt == 2) {
        if (a.fmt == 2)
            nhead = npy_header(npy, dims, nd);
        all = malloc(nhead + cells * sizeof(float));
        if (!all) {
            maps__release(e);
            return ATTN_ENOMEM;
        }
    }
    for (bi = b0; !rc && !gone && bi < b1; bi++)
        for (hi = h0; !rc && !gone && hi < h1; hi++) {
            if (whole && cut && cut(cut_ctx)) {
                gone = 1; /* its reader went */
                break;
            }
            if (a.entropy) { /* in place, or its own t floats */
                float *dst = all ? all + nhead / sizeof(float) + k
                                 : (map = malloc(plane * sizeof(float)));
                if (!dst) {
                    rc = ATTN_ENOMEM;
                    break;
                }
                gone = entropy_into(e, bi, hi, cut, cut_ctx, dst);
                k += plane;
                continue;
            }
            if (all && !a.values) { /* the plane in place */
                rc = maps__slice_into(e, a.what, bi, hi, a.max_n, cut,
                                      cut_ctx, all + nhead / sizeof(float) + k,
                                      &rows, &cols, &bt, &bs, err);
                gone = rc > 0;
                rc = rc > 0 ? 0 : rc;
                k += plane;
                continue;
            }
            rc = a.values ? maps__values_entry(e, bi, hi, &map, &rows,
                                               &cols, err)
                          : maps__slice_cut(e, a.what, bi, hi, a.max_n, cut,
                                            cut_ctx, &map, &rows, &cols, &bt,
                                            &bs, err);
            gone = !rc && !map;
            if (rc || gone || !all)
                break;
            memcpy(all + nhead / sizeof(float) + k, map,
                   plane * sizeof(float));
            k += plane;
            free(map);
            map = NULL;
        }
    maps__release(e);
    if (rc) {
        free(all);
        free(map);
        return rc == ATTN_EINVAL ? reply_error(r, 400, err) : rc;
    }
    if (all) {
        free(map);
        map = all;
    }
    if (gone || (!a.fmt && cut && cut(cut_ctx))) { /* its reader went */
        free(map);
        r->cut = 1;
        return 0;
    }
    /* the version its cells are from (one throughout: acquired above), so
     * that a reader of several answers knows they agree without asking
     * for the metadata again */
    snprintf(r->version, sizeof(r->version), "%u", info.version);
    if (a.fmt) {
        dims_text(shape, sizeof(shape), dims, nd, 0);
        /* Raw little-endian FP32, row-major, after a .npy header (npy) or
         * alone with the shape in a header (f32; npy too). */
        if (nhead)
            memcpy(map, npy, nhead);
        r->status = 200;
        r->content_type = "application/octet-stream";
        r->body = (char *)map;
        r->len = nhead + cells * sizeof(float);
        snprintf(r->shape, sizeof(r->shape), "%s", shape);
        return 0;
    }
    return json_answer(r, &info, &a, dims, sdims, nd, bt, bs, map, cells);
}

/* An id is 1..MAPS_ID_MAX-1 bytes of [A-Za-z0-9_-]. */
static int id_valid(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n >= MAPS_ID_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

int maps_http_get(maps_store *st, const char *path, maps_arg_fn arg,
                  void *ctx, maps_reply *r)
{
    return maps_http_render(st, path, arg, ctx, NULL, NULL, 0, r);
}

int maps_http_render(maps_store *st, const char *path, maps_arg_fn arg,
                     void *ctx, maps_cut_fn cut, void *cut_ctx,
                     size_t answer_max, maps_reply *r)
{
    static const char pre[] = "/v2/maps";
    char id[MAPS_ID_MAX];
    const char *rest, *slash;
    size_t n;

    memset(r, 0, sizeof(*r));
    r->json_mark = attn_json_mark();
    if (strncmp(path, pre, sizeof(pre) - 1) != 0)
        return reply_error(r, 404, "no such route");
    rest = path + sizeof(pre) - 1;
    if (*rest == '\0' || strcmp(rest, "/") == 0)
        return route_list(st, r);
    if (*rest != '/')
        return reply_error(r, 404, "no such route");
    rest++;
    slash = strchr(rest, '/');
    n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!id_valid(rest, n))
        return reply_error(r, 404, "map id: unknown (ids look like "
                                   "m12-3fa9c1)");
    memcpy(id, rest, n);
    id[n] = '\0';
    if (!slash)
        return route_meta(st, id, r);
    if (strcmp(slash, "/attention") == 0)
        return route_attention(st, id, arg, ctx, cut, cut_ctx, answer_max,
                               r);
    return reply_error(r, 404, "no such route (try /v2/maps/{id}/attention)");
}

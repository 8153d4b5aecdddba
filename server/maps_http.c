/*
 * maps_http.c - the retained-map routes rendered as HTTP replies:
 *   GET /v2/maps                  list, newest first
 *   GET /v2/maps/{id}             one entry's metadata and labels
 *   GET /v2/maps/{id}/attention   one [T, S] map, JSON or raw FP32
 * Pure functions of the store: no sockets, callable from any thread.
 */
#include <errno.h>
#include <jansson.h>
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

/* GET /v2/maps/{id}: metadata, labels (query and key) and lengths; 404
 * when id is not retained. 0, or ATTN_ENOMEM. */
static int route_meta(maps_store *st, const char *id, maps_reply *r)
{
    maps__entry *e = maps__acquire(st, id);
    json_t *o, *q = NULL, *k = NULL;
    int t, rc;

    if (!e) {
        char msg[128];
        snprintf(msg, sizeof(msg), "map %s: not retained (unknown or "
                 "evicted)", id);
        return reply_error(r, 404, msg);
    }
    t = e->info.t;
    if (e->n_labels == t + e->info.s) {
        q = labels_json(e, 0, t);
        k = labels_json(e, t, e->n_labels);
    } else if (e->n_labels == t) {
        q = labels_json(e, 0, t);
        k = e->info.s == t ? labels_json(e, 0, t) : json_array();
    } else {
        q = json_array();
        k = json_array();
    }
    o = info_json(&e->info);
    /* each set takes its value (NULL too) even when it fails, o NULL
     * included: all of them run, so none is left held */
    if ((o == NULL) | json_object_set_new(o, "tokens", q) |
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

/* GET /v2/maps/{id}/attention?b=&h=&max=&format=: one [T, S] map (or its
 * max-pooled overview) as JSON with a flat row-major "data", or as raw FP32
 * with the shape in r->shape. Bad parameters are 400s naming themselves;
 * JSON above MAPS_JSON_MAX_CELLS cells is refused (ask for max= or f32;
 * for what=v the cells are the value rows, S x d_v: f32). cut (may be
 * NULL) is asked while the plane fills and before it is printed: when its
 * reader went, r->cut and no body.
 * 0, or ATTN_ENOMEM. */
static int route_attention(maps_store *st, const char *id, maps_arg_fn arg,
                           void *ctx, maps_cut_fn cut, void *cut_ctx,
                           maps_reply *r)
{
    const char *sb = arg ? arg(ctx, "b") : NULL;
    const char *sh = arg ? arg(ctx, "h") : NULL;
    const char *sm = arg ? arg(ctx, "max") : NULL;
    const char *sf = arg ? arg(ctx, "format") : NULL;
    const char *sw = arg ? arg(ctx, "what") : NULL;
    char err[ATTN_ERRMAX], head[512];
    float *map = NULL;
    int b = 0, h = 0, max_n = 0, rows, cols, bt = 1, bs = 1, rc, hl, f32 = 0;
    int values = 0;
    maps_what what = MAPS_WEIGHTS;
    maps_info info;
    maps__entry *e;
    size_t cells, cap;
    char *p;

    if (sb && parse_int(sb, 0, 1 << 30, &b))
        return reply_error(r, 400, "b: expected a batch index >= 0");
    if (sh && strcmp(sh, "mean") == 0)
        h = -1;
    else if (sh && parse_int(sh, 0, 1 << 30, &h))
        return reply_error(r, 400, "h: expected a head index >= 0 or "
                                   "\"mean\"");
    if (sm && parse_int(sm, 1, 1 << 20, &max_n))
        return reply_error(r, 400, "max: expected an integer in [1, "
                                   "1048576]");
    if (sf && strcmp(sf, "f32") == 0)
        f32 = 1;
    else if (sf && strcmp(sf, "json") != 0)
        return reply_error(r, 400, "format: expected json or f32");
    if (!sw || strcmp(sw, "attention") == 0)
        what = MAPS_WEIGHTS;
    else if (strcmp(sw, "scores") == 0)
        what = MAPS_SCORES;
    else if (strcmp(sw, "mask") == 0)
        what = MAPS_ALLOWED;
    else if (strcmp(sw, "v") == 0)
        values = 1;
    else
        return reply_error(r, 400, "what: expected attention, scores, mask "
                                   "or v");
    if (values && h < 0)
        return reply_error(r, 400, "h: what=v needs a head index (values "
                                   "have no mean)");
    if (values && sm)
        return reply_error(r, 400, "max: what=v is never pooled");
    /* one version of the map throughout: a sequence's next step may
     * replace it meanwhile (the metadata below and the cells agree) */
    e = maps__acquire(st, id);
    if (!e) {
        snprintf(err, sizeof(err), "map %s: not retained (unknown or "
                 "evicted)", id);
        return reply_error(r, 404, err);
    }
    info = e->info;
    rc = 0;
    if (!f32) {
        int pr = max_n > 0 && info.t > max_n ? max_n : info.t;
        int pc = max_n > 0 && info.s > max_n ? max_n : info.s;
        /* what=v prints the value rows [S, d_v] (never pooled) */
        if (values && (size_t)info.s * (size_t)info.dv > MAPS_JSON_MAX_CELLS) {
            snprintf(err, sizeof(err),
                     "what: %d x %d value rows are too large for JSON; ask "
                     "for format=f32", info.s, info.dv);
            rc = ATTN_EINVAL;
        } else if (!values && (size_t)pr * (size_t)pc > MAPS_JSON_MAX_CELLS) {
            snprintf(err, sizeof(err),
                     "max: a %d x %d map is too large for JSON; ask for "
                     "max=1024 or format=f32", info.t, info.s);
            rc = ATTN_EINVAL;
        }
    }
    if (!rc)
        rc = maps__check(e, b, h, !values, err);
    if (!rc)
        rc = values ? maps__values_entry(e, b, h, &map, &rows, &cols, err)
                    : maps__slice_cut(e, what, b, h, max_n, cut, cut_ctx,
                                      &map, &rows, &cols, &bt, &bs, err);
    maps__release(e);
    if (rc == ATTN_EINVAL)
        return reply_error(r, 400, err);
    if (rc)
        return rc;
    if (!map || (!f32 && cut && cut(cut_ctx))) { /* its reader went */
        free(map);
        r->cut = 1;
        return 0;
    }
    cells = (size_t)rows * (size_t)cols;
    if (f32) {
        /* Raw little-endian FP32, row-major; the shape in a header. */
        r->status = 200;
        r->content_type = "application/octet-stream";
        r->body = (char *)map;
        r->len = cells * sizeof(float);
        snprintf(r->shape, sizeof(r->shape), "%d,%d", rows, cols);
        return 0;
    }
    /* The model name may need escaping: let jansson render it. */
    {
        json_t *js = json_string(info.model);
        char *mq = attn_json_dumps(js, JSON_ENCODE_ANY, r->json_mark);
        json_decref(js);
        if (!mq)
            goto nomem;
        hl = snprintf(head, sizeof(head),
                      "{\"id\":\"%s\",\"model\":%s,\"what\":\"%s\","
                      "\"b\":%d,\"h\":",
                      info.id, mq, values ? "v" : sw ? sw : "attention", b);
        free(mq);
        if (h < 0)
            hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "\"mean\"");
        else
            hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "%d", h);
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl,
                       ",\"shape\":[%d,%d],\"source_shape\":[%d,%d],"
                       "\"block\":[%d,%d],\"datatype\":\"FP32\",\"data\":[",
                       rows, cols, values ? info.s : info.t,
                       values ? info.dv : info.s, bt, bs);
    }
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
    return maps_http_render(st, path, arg, ctx, NULL, NULL, r);
}

int maps_http_render(maps_store *st, const char *path, maps_arg_fn arg,
                     void *ctx, maps_cut_fn cut, void *cut_ctx, maps_reply *r)
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
        return route_attention(st, id, arg, ctx, cut, cut_ctx, r);
    return reply_error(r, 404, "no such route (try /v2/maps/{id}/attention)");
}

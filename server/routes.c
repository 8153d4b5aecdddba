/*
 * routes.c - the route table and the small synchronous handlers.
 *
 * The table is the one place a path meets its handler: adding an endpoint
 * is one row. Handlers run on the loop thread and either answer at once
 * (srv_respond*) or suspend the request (infer, load, a map's cells).
 */
#include "server/srv.h"
#include "core/json_mem.h"
#include "core/kv.h"
#include "server/seq.h"
#include "server/web.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void h_live(srv_req *r) { srv_respond(r, 200, NULL, NULL, 0); }

static void h_ready(srv_req *r)
{
    if (r->s->draining)
        srv_respond_error(r, 503, "server: draining (shutting down)");
    else if (!srv_registry_ready(r->s))
        srv_respond_error(r, 503, "server: models are still loading or "
                                  "failed to load (see /v2/repository/index)");
    else
        srv_respond(r, 200, NULL, NULL, 0);
}

static void h_server_meta(srv_req *r)
{
    srv_respond_json(r, 200,
                     "{\"name\":\"attnd\",\"version\":\"" ATTND_VERSION "\","
                     "\"extensions\":[\"binary_tensor_data\",\"model_repository\","
                     "\"statistics\",\"attention_maps\",\"sequences\"]}");
}

/* entry_for: the loaded model named by r->arg[0], or NULL after a 404. */
static srv_entry *entry_for(srv_req *r)
{
    srv_entry *e = srv_registry_find(r->s, r->arg[0]);
    if (!e) {
        srv_respond_no_model(r, r->arg[0], NULL);
        return NULL;
    }
    return e;
}

static json_t *tensor_meta(const char *name, const char *dtype, int rank,
                           const long long *dims)
{
    json_t *shape = json_array();
    int i;
    for (i = 0; i < rank; i++)
        json_array_append_new(shape, json_integer(dims[i]));
    return json_pack("{s:s,s:s,s:o}", "name", name, "datatype", dtype, "shape",
                     shape);
}

#define DIMS(...) ((const long long[]){__VA_ARGS__})

/* model_meta: a ready model's metadata (sdpa included): name, versions,
 * platform, the inputs and outputs with their shapes (-1 = any) and the
 * model's parameters; NULL when out of memory. */
static json_t *model_meta(const srv_entry *e)
{
    json_t *o, *in, *out;
    in = json_array();
    out = json_array();
    if (e->inst->builtin) {
        json_array_append_new(in, tensor_meta("q", "FP32", 2, DIMS(-1, -1)));
        json_array_append_new(in, tensor_meta("k", "FP32", 2, DIMS(-1, -1)));
        json_array_append_new(in, tensor_meta("v", "FP32", 2, DIMS(-1, -1)));
        json_array_append_new(in, tensor_meta("mask", "BOOL", 2, DIMS(-1, -1)));
        json_array_append_new(out, tensor_meta("output", "FP32", 2, DIMS(-1, -1)));
        json_array_append_new(out, tensor_meta("attention", "FP32", 2, DIMS(-1, -1)));
        json_array_append_new(out, tensor_meta("scores", "FP32", 2, DIMS(-1, -1)));
        o = json_pack("{s:s,s:[s],s:s,s:o,s:o,s:{s:s,s:b}}", "name", e->name,
                      "versions", "1", "platform", "attnd_sdpa", "inputs", in,
                      "outputs", out, "parameters", "leading_dims",
                      "none, [B] or [B, H] before the last two dims of q, k, v",
                      "causal", 0);
    } else {
        const attn_config *c = model_config(e->inst->m);
        long long dm = c->d_model, dc = c->d_model_ctx, h = c->n_heads,
                  hk = c->n_kv_heads, dk = c->head_dim, dv = c->v_head_dim;
        json_array_append_new(in, tensor_meta("x", "FP32", 3, DIMS(-1, -1, dm)));
        json_array_append_new(in, tensor_meta("context", "FP32", 3, DIMS(-1, -1, dc)));
        json_array_append_new(in, tensor_meta("lengths", "INT32", 1, DIMS(-1)));
        json_array_append_new(in, tensor_meta("context_lengths", "INT32", 1, DIMS(-1)));
        json_array_append_new(in, tensor_meta("mask", "BOOL", 3, DIMS(-1, -1, -1)));
        json_array_append_new(out, tensor_meta("y", "FP32", 3, DIMS(-1, -1, dm)));
        json_array_append_new(out, tensor_meta("attention", "FP32", 4, DIMS(-1, h, -1, -1)));
        json_array_append_new(out, tensor_meta("scores", "FP32", 4, DIMS(-1, h, -1, -1)));
        json_array_append_new(out, tensor_meta("q", "FP32", 4, DIMS(-1, h, -1, dk)));
        json_array_append_new(out, tensor_meta("k", "FP32", 4, DIMS(-1, hk, -1, dk)));
        json_array_append_new(out, tensor_meta("v", "FP32", 4, DIMS(-1, hk, -1, dv)));
        /* scale: the float q is multiplied by (0 in config.json resolved
         * as the engine does), for clients that redo a score from q, k */
        o = json_pack("{s:s,s:[s],s:s,s:o,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:b,s:f,s:f,s:s}}",
                      "name", e->name, "versions", "1", "platform",
                      "attnd_attention", "inputs", in, "outputs", out,
                      "parameters", "d_model", (json_int_t)dm, "d_model_ctx",
                      (json_int_t)dc, "n_heads", (json_int_t)h, "n_kv_heads",
                      (json_int_t)hk, "head_dim", (json_int_t)dk, "v_head_dim",
                      (json_int_t)dv, "causal", model_causal(e->inst->m),
                      "rope", c->rope_theta != 0.0f, "rope_theta",
                      (double)c->rope_theta, "scale",
                      (double)attn_config_scale(c), "description",
                      model_description(e->inst->m));
        if (o && e->inst->kv_pool) { /* extension `sequences` (README) */
            json_t *p = json_object_get(o, "parameters");
            json_object_set_new(p, "kv_bytes_per_token",
                                json_integer((json_int_t)attn_kv_token_bytes(
                                    c, attn_kv_pool_dtype(e->inst->kv_pool))));
            json_object_set_new(p, "kv_bytes_limit",
                                json_integer((json_int_t)attn_kv_pool_budget(
                                    e->inst->kv_pool)));
        }
    }
    return o;
}

/* ready_entry: the ready model r names, or NULL after a 404 (a 503 with
 * Retry-After while its first load runs, as infer answers). */
static srv_entry *ready_entry(srv_req *r)
{
    srv_entry *e = entry_for(r);
    if (e && !e->inst && e->state == SRV_LOADING) {
        srv_respond_error(r, 503, "model '%s': still loading; retry shortly",
                          e->name);
        return NULL;
    }
    if (e && (e->state != SRV_READY || !e->inst)) {
        srv_respond_no_model(r, e->name, e);
        return NULL;
    }
    return e;
}

/* h_model_meta: GET /v2/models/{m}: model_meta; 404 when the model is
 * unknown or not loaded. */
static void h_model_meta(srv_req *r)
{
    unsigned long mark = attn_json_mark();
    srv_entry *e = ready_entry(r);
    if (e)
        srv_respond_dump(r, model_meta(e), mark,
                         "model '%s': out of memory for its metadata",
                         r->arg[0]);
}

/* triton_tensors: metadata tensors ({name, datatype, shape}) as Triton's
 * model configuration has them ({name, data_type: TYPE_..., dims}). */
static json_t *triton_tensors(const json_t *meta)
{
    json_t *a = json_array(), *t;
    size_t i;
    char type[32];
    json_array_foreach(meta, i, t) {
        snprintf(type, sizeof type, "TYPE_%s",
                 json_string_value(json_object_get(t, "datatype")));
        json_array_append_new(a, json_pack("{s:O,s:s,s:O}", "name",
                                           json_object_get(t, "name"), "data_type",
                                           type, "dims", json_object_get(t, "shape")));
    }
    return a;
}

#define CONFIG_OOM "model '%s': out of memory for its configuration"

/* h_model_config: GET /v2/models/{m}/config, Triton's model configuration
 * (what tritonclient's get_model_config and perf_analyzer read): the
 * metadata's inputs and outputs with their full shapes (max_batch_size 0:
 * the batch dimension is in dims, as -1) and its parameters as strings. */
static void h_model_config(srv_req *r)
{
    unsigned long mark = attn_json_mark();
    srv_entry *e = ready_entry(r);
    json_t *meta, *o, *params, *v;
    const char *k;
    char text[64];
    if (!e)
        return;
    if (!(meta = model_meta(e))) {
        srv_respond_dump(r, NULL, mark, CONFIG_OOM, r->arg[0]);
        return;
    }
    params = json_object();
    json_object_foreach(json_object_get(meta, "parameters"), k, v) {
        const char *str = json_string_value(v);
        if (!str) {
            if (json_is_boolean(v))
                str = json_is_true(v) ? "true" : "false";
            else if (json_is_integer(v))
                snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            else
                snprintf(text, sizeof text, "%.9g", json_number_value(v));
            str = str ? str : text;
        }
        json_object_set_new(params, k, json_pack("{s:s}", "string_value", str));
    }
    o = json_pack("{s:O,s:O,s:s,s:i,s:{s:{s:i}},s:o,s:o,s:o}", "name",
                  json_object_get(meta, "name"), "platform",
                  json_object_get(meta, "platform"), "backend", "attnd",
                  "max_batch_size", 0, "version_policy", "latest",
                  "num_versions", 1, "input",
                  triton_tensors(json_object_get(meta, "inputs")), "output",
                  triton_tensors(json_object_get(meta, "outputs")), "parameters",
                  params);
    json_decref(meta);
    srv_respond_dump(r, o, mark, CONFIG_OOM, r->arg[0]);
}

static void h_model_ready(srv_req *r)
{
    srv_entry *e = entry_for(r);
    if (!e)
        return;
    if (r->s->draining)
        srv_respond_error(r, 503, "server: draining (shutting down)");
    else if (e->state == SRV_READY)
        srv_respond(r, 200, NULL, NULL, 0);
    else if (e->state == SRV_LOADING)
        srv_respond_error(r, 503, "model '%s': loading", e->name);
    else
        srv_respond_no_model(r, e->name, e);
}

static const char *query_arg(void *ctx, const char *key)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

/* maps_answer: a maps_http_get reply (rc < 0: out of memory). Loop
 * thread. */
static void maps_answer(srv_req *r, int rc, maps_reply *rep)
{
    if (rc < 0) {
        srv_respond_error(r, 503, "maps: out of memory");
        return;
    }
    if (rep->shape[0])
        snprintf(r->extra_hdr, sizeof r->extra_hdr, "Map-Shape: %s", rep->shape);
    if (rep->version[0])
        snprintf(r->map_version, sizeof r->map_version, "%s", rep->version);
    srv_respond(r, rep->status, rep->content_type, rep->body, rep->len);
}

/* A map's cells (GET /v2/maps/{id}/attention) are sliced, pooled and
 * printed on the pool: on the loop, a 1024 x 1024 JSON map held every other
 * request for ~10 ms (150-200 ms before the fast printer) and pooling it
 * from 4096 x 4096 for longer. One render at a time, as on the loop (each
 * may hold a map plane, its pooled copy and its text): the others wait
 * their turn, suspended. The query's pairs are copied first (MHD's are
 * the loop's); the suspended connection keeps r alive. While draining, a
 * new one renders on the loop at once, so that it cannot hold the stop. */
typedef struct maps_job {
    uv_work_t work;
    struct maps_job *next; /* in s->maps_head's queue */
    srv_req *r;
    char *path;
    int n, cap;
    char **kv; /* key, value (NULL when absent) pairs, in the query's order */
    maps_reply rep;
    int rc;
    int fd;      /* r's socket (loop: taken when queued) */
    int skipped; /* pool: its client went before the render: not done */
    uint64_t polled_ns; /* pool: job_went's last poll(2) */
} maps_job;

static enum MHD_Result copy_arg(void *cls, enum MHD_ValueKind kind,
                                const char *key, const char *value)
{
    maps_job *mj = cls;
    (void)kind;
    if (mj->n == mj->cap) /* counted before: a pair more cannot come */
        return MHD_NO;
    mj->kv[2 * mj->n] = strdup(key);
    mj->kv[2 * mj->n + 1] = value ? strdup(value) : NULL;
    if (!mj->kv[2 * mj->n] || (value && !mj->kv[2 * mj->n + 1]))
        mj->rc = -1;
    mj->n++;
    return MHD_YES;
}

/* job_arg: the value of key (given once: http_head.c checked), as
 * MHD_lookup_connection_value. Pool thread. */
static const char *job_arg(void *ctx, const char *key)
{
    const maps_job *mj = ctx;
    for (int i = 0; i < mj->n; i++)
        if (mj->kv[2 * i] && strcmp(mj->kv[2 * i], key) == 0)
            return mj->kv[2 * i + 1];
    return NULL;
}

static void maps_job_free(maps_job *mj)
{
    for (int i = 0; i < 2 * mj->n; i++)
        free(mj->kv[i]);
    free(mj->kv);
    free(mj->path);
    free(mj);
}

/* job_went: maps_http_render's cut: has mj's client gone (one poll(2),
 * at most one a millisecond: the render asks between heads, and a weight
 * set of 2^20 one-wide heads spent 3 s of an h=all render in them, 2^24
 * would hold a pool thread ~50 s a GET)? Pool thread. */
#define JOB_POLL_NS 1000000u
static int job_went(void *ctx)
{
    maps_job *mj = ctx;
    uint64_t now = srv_now_ns();
    if (mj->polled_ns && now - mj->polled_ns < JOB_POLL_NS)
        return 0;
    mj->polled_ns = now;
    return srv_client_went(mj->fd);
}

/* maps_work: render mj's map, unless its client went while mj waited on
 * the pool behind other work (a large inference): one poll(2) of its
 * socket, taken on the loop when mj was queued; and again between the
 * map's heads, every few rows and before printing, where a client that
 * goes stops the render (mj->rep.cut). The fd stays r's: MHD closes no
 * suspended connection (guard.c shuts none that is dispatched, and the
 * stop waits for n_suspended), and only maps_done resumes it. Nothing but
 * mj (and s's read-only maps and config) is touched here: the loop learns
 * of a skip or cut in maps_done. Pool thread. */
static void maps_work(uv_work_t *w)
{
    maps_job *mj = w->data;
    srv_pool_thread_enter(mj->r->s, "reading a retained map", NULL);
    if (srv_client_went(mj->fd)) {
        mj->skipped = 1;
        return;
    }
    mj->rc = maps_http_render(mj->r->s->maps, mj->path, job_arg, mj, job_went,
                              mj, (size_t)mj->r->s->cfg.request_memory,
                              &mj->rep);
}

/* went: has r's client (socket fd) closed, reset or half-closed its
 * connection while r was suspended (MHD reads no suspended socket: one
 * poll(2), no wait), or is that known already (gone: maps_work saw it)?
 * Then r is answered as one whose client went, logged and counted 499
 * (http.c), as a computation's is (sched.c). Loop thread. */
static int went(srv_req *r, int fd, int gone)
{
    if (!gone && !srv_client_went(fd))
        return 0;
    r->went = 1;
    srv_respond_error(r, 499, "client: closed its connection before the "
                              "answer");
    return 1;
}

/* maps_done: answer the render, then start the next in line; one whose
 * client went while it waited is not rendered (a page reloaded, or a
 * client's timeout, behind a queue of large maps, or behind inference
 * work on the pool: each was a render of ~50 ms, 15 MB of JSON for
 * 1024 x 1024, that no one read, before the next one's). Counted in
 * maps_skipped (attnd_maps_renders_skipped_total); one stopped part way
 * in maps_cut (attnd_maps_renders_cut_total). Loop thread. */
static void maps_done(uv_work_t *w, int status)
{
    maps_job *mj = w->data;
    srv *s = mj->r->s;
    (void)status;
    srv_pool_done(s);
    s->maps_skipped += mj->skipped;
    s->maps_cut += mj->rep.cut; /* set only with rc 0 (maps.h) */
    if (went(mj->r, mj->fd, mj->skipped || mj->rep.cut)) /* or as it ended */
        free(mj->rep.body);
    else
        maps_answer(mj->r, mj->rc, &mj->rep);
    if (!(s->maps_head = mj->next)) /* mj was the head: the one rendering */
        s->maps_tail = NULL;
    maps_job_free(mj);
    while (s->maps_head && went(s->maps_head->r, s->maps_head->fd, 0)) {
        s->maps_skipped++;
        mj = s->maps_head;
        if (!(s->maps_head = mj->next))
            s->maps_tail = NULL;
        maps_job_free(mj);
    }
    if (s->maps_head) /* the next in line */
        srv_pool_queue(s, &s->maps_head->work, maps_work, maps_done);
}

/* maps_on_pool: queues r's map for the pool; 0, or -1 when out of memory.
 * Loop thread. */
static int maps_on_pool(srv_req *r)
{
    maps_job *mj = calloc(1, sizeof *mj);
    const union MHD_ConnectionInfo *ci;
    int n = MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, NULL, NULL);
    if (!mj)
        return -1;
    mj->work.data = mj;
    mj->r = r;
    ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    mj->fd = ci ? ci->connect_fd : -1;
    mj->cap = n > 0 ? n : 0;
    mj->path = strdup(r->path);
    mj->kv = calloc((size_t)mj->cap * 2 + 1, sizeof *mj->kv);
    if (mj->path && mj->kv)
        MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, copy_arg, mj);
    if (!mj->path || !mj->kv || mj->rc < 0) {
        maps_job_free(mj);
        return -1;
    }
    srv_suspend(r);
    if (r->s->maps_tail) { /* one renders: wait behind it */
        r->s->maps_tail->next = mj;
        r->s->maps_tail = mj;
        return 0;
    }
    r->s->maps_head = r->s->maps_tail = mj;
    srv_pool_queue(r->s, &mj->work, maps_work, maps_done);
    return 0;
}

/* GET /v2/maps, /v2/maps/{id}, /v2/maps/{id}/attention: maps_http.c. */
static void h_maps(srv_req *r)
{
    maps_reply rep;
    if (!r->s->maps) {
        srv_respond_error(r, 404, "maps: this server keeps no maps (maps-bytes 0)");
        return;
    }
    if (strcmp(r->route->path, "/v2/maps/{}") == 0) {
        /* the query's names were checked (http_head.c): each at most once */
        const char *wait = query_arg(r->conn, "wait");
        const char *version = query_arg(r->conn, "version");
        const char *timeout = query_arg(r->conn, "timeout_ms");
        if (wait) { /* /v2/maps/{}?wait=: follow mode */
            srv_maps_wait(r, r->arg[0], wait, version, timeout);
            return;
        }
        if (version || timeout) {
            srv_respond_error(r, 400, "%s: only with wait= (the long poll "
                              "GET /v2/maps/{id}?wait=N)",
                              version ? "version" : "timeout_ms");
            return;
        }
    }
    if (strcmp(r->route->path, "/v2/maps/{}/attention") == 0 && !r->s->draining) {
        if (maps_on_pool(r) < 0)
            srv_respond_error(r, 503, "maps: out of memory");
        return;
    }
    memset(&rep, 0, sizeof rep);
    maps_answer(r, maps_http_render(r->s->maps, r->path, query_arg, r->conn,
                                    NULL, NULL,
                                    (size_t)r->s->cfg.request_memory, &rep),
                &rep);
}

/* etag_listed: does the If-None-Match value v list etag (a strong tag,
 * quoted)? RFC 9110 13.1.2: "*", or any entity-tag of the list by weak
 * comparison (its W/ aside: a proxy that compresses weakens tags, as
 * nginx's gzip does). A list that stops being one stops the search. */
static int etag_listed(const char *v, const char *etag)
{
    size_t n = strlen(etag);
    for (;;) {
        const char *end;
        v += strspn(v, " \t,");
        if (*v == '*')
            return 1;
        if (v[0] == 'W' && v[1] == '/')
            v += 2;
        if (*v != '"' || !(end = strchr(v + 1, '"')))
            return 0;
        if ((size_t)(end + 1 - v) == n && memcmp(v, etag, n) == 0)
            return 1;
        v = end + 1;
    }
}

/* inm_line: MHD_get_connection_values' iterator: an If-None-Match line
 * (there may be several: one list) that lists the etag in *cls clears it. */
static enum MHD_Result inm_line(void *cls, enum MHD_ValueKind kind,
                                const char *key, const char *value)
{
    const char **etag = cls;
    (void)kind;
    if (strcasecmp(key, "If-None-Match") == 0 && value &&
        etag_listed(value, *etag)) {
        *etag = NULL;
        return MHD_NO;
    }
    return MHD_YES;
}

/* The page names its files relatively (web/app.js), so that it works
 * under any prefix a proxy adds; opened at /web/index.html it would look
 * for them under /web/web/: that path answers 301 to the page, with a
 * Location relative to it (../), which keeps the prefix too. */
#define WEB_PAGE_MOVED "/web/index.html"

/* GET / and /web/{}: the visualiser's files, compiled in (web.h). An
 * If-None-Match that lists its ETag answers 304; http.c adds ETag,
 * Cache-Control and the page's Content-Security-Policy when r->web_etag
 * is set. /web/index.html answers 301 to the page (WEB_PAGE_MOVED). */
static void h_web(srv_req *r)
{
    const web_asset *a = web_asset_find(r->path);
    const char *unmatched;
    char *body;

    if (strcmp(r->path, WEB_PAGE_MOVED) == 0) {
        snprintf(r->extra_hdr, sizeof r->extra_hdr, "Location: ../");
        srv_respond(r, 301, NULL, NULL, 0);
        return;
    }
    if (!a) {
        srv_respond_error(r, 404, "path: the visualiser has no file %s",
                          r->path);
        return;
    }
    r->web_etag = unmatched = a->etag;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, inm_line, &unmatched);
    if (!unmatched) {
        /* given the file, libmicrohttpd sends no body with a 304 and says
         * the 200's Content-Length; given none, it said 0, which RFC
         * 9110 8.6 does not allow */
        srv_respond_static(r, 304, NULL, (const char *)a->data, a->len);
        return;
    }
    body = malloc(a->len + 1);
    if (!body) {
        srv_respond_error(r, 503, "web: out of memory");
        return;
    }
    memcpy(body, a->data, a->len);
    srv_respond(r, 200, a->content_type, body, a->len);
}

/* method, path, handler, needs the key, body accepted, query parameters
 * read (NULL: the query is not checked), answer from the head with
 * Expect: 100-continue (NULL: none) (srv.h) */
const srv_route srv_routes[] = {
    {SRV_GET, "/v2/health/live", h_live, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/health/ready", h_ready, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2", h_server_meta, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/models/stats", srv_h_stats, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/models/{}", h_model_meta, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/models/{}/ready", h_model_ready, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/models/{}/config", h_model_config, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/models/{}/stats", srv_h_stats, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_POST, "/v2/models/{}/infer", srv_h_infer, 1, SRV_BODY_INFER, NULL,
     srv_sched_head_refused},
    {SRV_POST, "/v2/repository/index", srv_h_index, 1, SRV_BODY_SMALL, NULL, NULL},
    {SRV_POST, "/v2/repository/models/{}/load", srv_h_load, 1, SRV_BODY_UPLOAD, NULL, NULL},
    {SRV_POST, "/v2/repository/models/{}/unload", srv_h_unload, 1, SRV_BODY_SMALL, NULL,
     srv_registry_unload_refused},
    {SRV_GET, "/metrics", srv_h_metrics, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/v2/maps", h_maps, 1, SRV_BODY_NONE, "", NULL},
    {SRV_GET, "/v2/maps/{}", h_maps, 1, SRV_BODY_NONE, "wait version timeout_ms", NULL},
    {SRV_GET, "/v2/maps/{}/attention", h_maps, 1, SRV_BODY_NONE, "b h max format what", NULL},
    {SRV_GET, "/v2/sequences", srv_seq_h_list, 1, SRV_BODY_NONE, "", NULL},
    {SRV_GET, "/v2/sequences/{}", srv_seq_h_get, 1, SRV_BODY_NONE, "", NULL},
    {SRV_DELETE, "/v2/sequences/{}", srv_seq_h_delete, 1, SRV_BODY_NONE, "", NULL},
    {SRV_GET, "/", h_web, 0, SRV_BODY_NONE, NULL, NULL},
    {SRV_GET, "/web/{}", h_web, 0, SRV_BODY_NONE, NULL, NULL},
};
const size_t srv_n_routes = sizeof srv_routes / sizeof srv_routes[0];

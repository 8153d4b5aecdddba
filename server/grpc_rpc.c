/*
 * grpc_rpc.c - the methods of inference.GRPCInferenceService: each turns
 * its request message into the input of the REST handler of the same
 * operation (route table) and that handler's answer into its response
 * message. ModelInfer's messages go to the pool as they are (the request's
 * door is proto/oip_pb.h), every other answer is REST's JSON read back
 * with jansson: small, rare, and then the two doors cannot disagree.
 * Health, metadata and the model configuration are grpc_meta.c's.
 * Loop thread.
 */
#include "server/grpc_rpc_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/kserve.pb-c.h"
#include "core/json_mem.h"
#include "proto/oip_pb.h"

static const srv_door pb_door = {oip_pb_decode, oip_pb_encode,
                                  oip_pb_peek_seq_id};

/* ---- shared ------------------------------------------------------------------ */

int srv_grpc_code(int http_status)
{
    switch (http_status) {
    case 200: return GRPC_OK;
    case 400: return GRPC_INVALID_ARGUMENT;
    /* over request-memory: a limit, as a message over max-body is (and
     * grpc-core's own message size limit), not a malformed request */
    case 413: return GRPC_RESOURCE_EXHAUSTED;
    case 401: return GRPC_UNAUTHENTICATED;
    case 404: return GRPC_NOT_FOUND;
    case 409: return GRPC_FAILED_PRECONDITION;
    case 405: return GRPC_UNIMPLEMENTED;
    case 503: return GRPC_UNAVAILABLE;
    case 504: return GRPC_DEADLINE_EXCEEDED;
    default: return GRPC_INTERNAL;
    }
}

int srv_grpc_http_status(int code)
{
    switch (code) {
    case GRPC_OK: return 200;
    case GRPC_CANCELLED: return 499;
    case GRPC_INVALID_ARGUMENT: return 400;
    case GRPC_DEADLINE_EXCEEDED: return 504;
    case GRPC_NOT_FOUND:
    case GRPC_UNIMPLEMENTED: return 404;
    case GRPC_RESOURCE_EXHAUSTED: return 413;
    case GRPC_FAILED_PRECONDITION: return 409;
    case GRPC_UNAVAILABLE: return 503;
    case GRPC_UNAUTHENTICATED: return 401;
    default: return 500;
    }
}

const char *srv_grpc_code_name(int code)
{
    static const char *const names[GRPC_N_CODES] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
        "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return code >= 0 && code < GRPC_N_CODES ? names[code] : "UNKNOWN";
}

int srv_grpc_error_text(const srv_req *r, char *err)
{
    int nomem = 0, lost;
    json_t *o = r->resp ? attn_json_parse(r->resp, r->resp_len, 0, NULL, &nomem) : NULL;
    const char *m = json_string_value(json_object_get(o, "error"));
    /* no message: its body could not be allocated (http.c) or read */
    lost = !m && (r->resp_oom || nomem);
    snprintf(err, GRPC_ERRMAX, "%s",
             m ? m : lost || r->resp ? GRPC_OOM_MSG : "request failed");
    json_decref(o);
    return lost;
}

/* UNAVAILABLE when memory took the error's words: the status alone would
 * misname the failure. */
int srv_grpc__fail(const srv_req *r, char *err)
{
    return srv_grpc_error_text(r, err) ? GRPC_UNAVAILABLE : srv_grpc_code(r->status);
}

/* route: the REST handler of (method, pattern) from the route table. */
static srv_handler route(int method, const char *pattern)
{
    size_t i;
    for (i = 0; i < srv_n_routes; i++)
        if (srv_routes[i].method == method && !strcmp(srv_routes[i].path, pattern))
            return srv_routes[i].fn;
    return NULL;
}

srv_handler srv_grpc_handler(const grpc_method *m, srv_req *r, char *msg,
                             size_t len, int *code, char *err)
{
    if (!m->start)
        free(msg);
    else if (m->start(r, msg, len, code, err) < 0)
        return NULL;
    return route(m->rest_method, m->rest_path);
}

int srv_grpc__pack(const ProtobufCMessage *m, char **out, size_t *len, char *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    *len = n + OIP_PB_HEADROOM;
    if (n == 0) { /* an empty message (a load's or unload's answer, made
                   * after the load): no allocation, grpc.c frames it in the
                   * slot's own room, so it cannot fail */
        *out = NULL;
        return GRPC_OK;
    }
    *out = malloc(n + OIP_PB_HEADROOM);
    if (!*out) {
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
        return GRPC_UNAVAILABLE;
    }
    protobuf_c_message_pack(m, (uint8_t *)*out + OIP_PB_HEADROOM);
    return GRPC_OK;
}

/* Not read: out of memory (UNAVAILABLE) or a bug (INTERNAL). */
json_t *srv_grpc__answer_json(const srv_req *r, int *code, char *err)
{
    int nomem = 0;
    json_t *o;
    if (r->status != 200) {
        *code = srv_grpc__fail(r, err);
        return NULL;
    }
    o = r->resp ? attn_json_parse(r->resp, r->resp_len, 0, NULL, &nomem) : NULL;
    if (!o && (nomem || r->resp_oom)) {
        *code = GRPC_UNAVAILABLE;
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
    } else if (!o) {
        *code = GRPC_INTERNAL;
        snprintf(err, GRPC_ERRMAX, "server: unreadable answer");
    }
    return o;
}

/* The allocator of the calls' parses (ModelInfer's is proto/pb.c's).
 * protobuf-c builds the whole message tree while it parses, and a small
 * message can make a large one: an empty map entry (2 bytes) is two
 * structs and a pointer, ~90 bytes of heap, so 8 MiB of them in a
 * RepositoryModelLoadRequest took 361 MB. Each parse is counted (a
 * header before each block keeps its size for the free) and refused past
 * its cap. Loop thread only: one parse at a time. */
typedef struct unpack_budget {
    size_t used, cap;
    int over;  /* the cap refused an allocation */
    int nomem; /* malloc did */
} unpack_budget;

static unpack_budget ub;

#define UB_HDR 16 /* keeps max_align_t alignment */

static void *unpack_alloc(void *ud, size_t n)
{
    unpack_budget *b = ud;
    size_t *p;
    if (n > SIZE_MAX - UB_HDR || b->used > b->cap ||
        n + UB_HDR > b->cap - b->used) {
        b->over = 1;
        return NULL;
    }
    p = malloc(n + UB_HDR);
    if (!p) {
        b->nomem = 1;
        return NULL;
    }
    p[0] = n + UB_HDR;
    b->used += n + UB_HDR;
    return (char *)p + UB_HDR;
}

static void unpack_free(void *ud, void *ptr)
{
    unpack_budget *b = ud;
    size_t *p;
    if (!ptr)
        return;
    p = (size_t *)(void *)((char *)ptr - UB_HDR);
    b->used -= p[0] < b->used ? p[0] : b->used;
    free(p);
}

ProtobufCAllocator srv_grpc__unpack_al = {unpack_alloc, unpack_free, &ub};

/* What a parse of a len-byte message (not ModelInfer's: proto/pb.c's)
 * may allocate: PARSE_SLACK and twice len (a name, a few parameters, a
 * model file cost about their size), at most --request-memory. */
#define PARSE_SLACK (64 * 1024)

ProtobufCMessage *srv_grpc__unpack(const ProtobufCMessageDescriptor *d,
                                   const srv_req *r, char *msg, size_t len,
                                   int *code, char *err)
{
    ProtobufCMessage *m = NULL;
    size_t cap = PARSE_SLACK, mem = (size_t)r->s->cfg.request_memory;
    cap += len <= (SIZE_MAX - cap) / 2 ? 2 * len : SIZE_MAX - cap;
    if (cap > mem)
        cap = mem;
    if (oip_pb_check_strings(d, msg, len, err)) {
        *code = GRPC_INVALID_ARGUMENT;
    } else {
        ub.used = 0;
        ub.cap = cap;
        ub.over = ub.nomem = 0;
        m = protobuf_c_message_unpack(d, &srv_grpc__unpack_al, len,
                                      (const uint8_t *)msg);
        if (!m && ub.nomem) {
            *code = GRPC_UNAVAILABLE;
            snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
        } else if (!m && ub.over) {
            *code = GRPC_RESOURCE_EXHAUSTED;
            snprintf(err, GRPC_ERRMAX, "request: parsing the %zu-byte %s "
                     "takes more than its limit of %zu bytes (64 KiB and "
                     "twice the message, at most --request-memory %lld)",
                     len, d->short_name, cap,
                     (long long)r->s->cfg.request_memory);
        } else if (!m) {
            *code = GRPC_INVALID_ARGUMENT;
            snprintf(err, GRPC_ERRMAX, "request: not a valid %s (protobuf "
                     "wire format)", d->short_name);
        }
    }
    free(msg);
    return m;
}

int srv_grpc__model_arg(srv_req *r, const char *name, const char *version,
                        int *code, char *err)
{
    if (!name[0] || strlen(name) >= SRV_NAME_MAX) {
        *code = GRPC_INVALID_ARGUMENT;
        snprintf(err, GRPC_ERRMAX, "name: must be 1 to %d bytes",
                 SRV_NAME_MAX - 1);
        return -1;
    }
    if (version[0] && strcmp(version, "1") != 0) {
        *code = GRPC_NOT_FOUND;
        snprintf(err, GRPC_ERRMAX, "version '%.64s' not found: only version 1 "
                 "exists", version);
        return -1;
    }
    snprintf(r->arg[0], sizeof r->arg[0], "%s", name);
    return 0;
}

/* ---- inference ------------------------------------------------------------------ */

/* The model comes from the message (the pool parses the rest): peek at
 * model_name/model_version; the message itself becomes the body. */
static int start_infer(srv_req *r, char *msg, size_t len, int *code,
                       char *err)
{
    char name[SRV_NAME_MAX], version[SRV_NAME_MAX];
    if (oip_pb_peek_model(msg, len, name, version, SRV_NAME_MAX, err) < 0) {
        free(msg);
        *code = GRPC_INVALID_ARGUMENT;
        return -1;
    }
    if (srv_grpc__model_arg(r, name, version, code, err) < 0) {
        free(msg);
        return -1;
    }
    r->body = msg;
    r->body_len = r->body_cap = len;
    r->door = &pb_door;
    return 0;
}

/* the pool encoded the ModelInferResponse already (oip_pb_encode) */
static int reply_infer(srv_req *r, char **out, size_t *len, char *err)
{
    if (r->status != 200)
        return srv_grpc__fail(r, err);
    *out = r->resp;
    *len = r->resp_len;
    r->resp = NULL;
    return GRPC_OK;
}

/* ---- statistics --------------------------------------------------------------- */

static int start_stats(srv_req *r, char *msg, size_t len, int *code,
                       char *err)
{
    Inference__ModelStatisticsRequest *m = (Inference__ModelStatisticsRequest *)srv_grpc__unpack(
        &inference__model_statistics_request__descriptor, r, msg, len, code, err);
    int rc = 0;
    if (!m)
        return -1;
    if (m->name[0] || m->version[0])
        rc = srv_grpc__model_arg(r, m->name, m->version, code, err);
    protobuf_c_message_free_unpacked(&m->base, &srv_grpc__unpack_al);
    return rc;
}

typedef Inference__StatisticDuration Dur;

static void dur(Dur *d, json_t *o)
{
    Dur init = INFERENCE__STATISTIC_DURATION__INIT;
    *d = init;
    d->count = (uint64_t)json_integer_value(json_object_get(o, "count"));
    d->ns = (uint64_t)json_integer_value(json_object_get(o, "ns"));
}

/* One model's statistics with everything it points to. */
typedef struct stat_blk {
    Inference__ModelStatistics ms;
    Inference__InferStatistics is;
    Dur d[6];
    Inference__InferBatchStatistics *bs;
    Inference__InferBatchStatistics **bsp;
    Dur *bd;
} stat_blk;

static int reply_stats(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__ModelStatisticsResponse m = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    static const char *const keys[6] = {"success", "fail", "queue", "compute_input",
                                        "compute_infer", "compute_output"};
    json_t *o, *arr;
    stat_blk *sb = NULL;
    Inference__ModelStatistics **msp = NULL;
    size_t n, i, k;
    int rc = GRPC_UNAVAILABLE; /* out of memory, unless set otherwise */
    if (!(o = srv_grpc__answer_json(r, &rc, err)))
        return rc;
    arr = json_object_get(o, "model_stats");
    n = json_array_size(arr);
    sb = calloc(n + 1, sizeof *sb);
    msp = calloc(n + 1, sizeof *msp);
    if (!sb || !msp)
        goto done;
    for (i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i), *inf = json_object_get(e, "inference_stats");
        json_t *b = json_object_get(e, "batch_stats");
        Inference__ModelStatistics mi = INFERENCE__MODEL_STATISTICS__INIT;
        Inference__InferStatistics ii = INFERENCE__INFER_STATISTICS__INIT;
        Dur *ds[6];
        size_t nb = json_array_size(b);
        for (k = 0; k < 6; k++) {
            dur(&sb[i].d[k], json_object_get(inf, keys[k]));
            ds[k] = &sb[i].d[k];
        }
        ii.success = ds[0], ii.fail = ds[1], ii.queue = ds[2];
        ii.compute_input = ds[3], ii.compute_infer = ds[4], ii.compute_output = ds[5];
        sb[i].is = ii;
        mi.name = (char *)json_string_value(json_object_get(e, "name"));
        mi.version = "1";
        mi.last_inference = (uint64_t)json_integer_value(json_object_get(e, "last_inference"));
        mi.inference_count = (uint64_t)json_integer_value(json_object_get(e, "inference_count"));
        mi.execution_count = (uint64_t)json_integer_value(json_object_get(e, "execution_count"));
        mi.inference_stats = &sb[i].is;
        sb[i].bs = calloc(nb + 1, sizeof *sb[i].bs);
        sb[i].bsp = calloc(nb + 1, sizeof *sb[i].bsp);
        sb[i].bd = calloc(nb + 1, sizeof *sb[i].bd);
        if (!sb[i].bs || !sb[i].bsp || !sb[i].bd)
            goto done;
        for (k = 0; k < nb; k++) {
            json_t *x = json_array_get(b, k);
            Inference__InferBatchStatistics bi = INFERENCE__INFER_BATCH_STATISTICS__INIT;
            bi.batch_size = (uint64_t)json_integer_value(json_object_get(x, "batch_size"));
            dur(&sb[i].bd[k], json_object_get(x, "compute_infer"));
            bi.compute_infer = &sb[i].bd[k];
            sb[i].bs[k] = bi;
            sb[i].bsp[k] = &sb[i].bs[k];
        }
        mi.n_batch_stats = nb;
        mi.batch_stats = sb[i].bsp;
        if (!mi.name)
            mi.name = "";
        sb[i].ms = mi;
        msp[i] = &sb[i].ms;
    }
    m.n_model_stats = n;
    m.model_stats = msp;
    rc = srv_grpc__pack(&m.base, out, len, err);
done:
    if (rc == GRPC_UNAVAILABLE && !err[0])
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
    for (i = 0; sb && i < n; i++) {
        free(sb[i].bs);
        free(sb[i].bsp);
        free(sb[i].bd);
    }
    free(sb);
    free(msp);
    json_decref(o);
    return rc;
}

/* ---- repository ------------------------------------------------------------------ */

static int start_index(srv_req *r, char *msg, size_t len, int *code,
                       char *err)
{
    Inference__RepositoryIndexRequest *m = (Inference__RepositoryIndexRequest *)srv_grpc__unpack(
        &inference__repository_index_request__descriptor, r, msg, len, code, err);
    if (!m)
        return -1;
    if (m->ready && !(r->body = strdup("{\"ready\":true}"))) {
        protobuf_c_message_free_unpacked(&m->base, &srv_grpc__unpack_al);
        *code = GRPC_UNAVAILABLE;
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
        return -1;
    }
    r->body_len = r->body ? strlen(r->body) : 0;
    protobuf_c_message_free_unpacked(&m->base, &srv_grpc__unpack_al);
    return 0;
}

typedef Inference__RepositoryIndexResponse__ModelIndex ModelIndex;

static int reply_index(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__RepositoryIndexResponse m = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    json_t *o;
    ModelIndex *mi;
    ModelIndex **mp;
    size_t n, i;
    int rc;
    if (!(o = srv_grpc__answer_json(r, &rc, err)))
        return rc;
    n = json_array_size(o);
    mi = calloc(n + 1, sizeof *mi);
    mp = calloc(n + 1, sizeof *mp);
    if (!mi || !mp) {
        snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
        rc = GRPC_UNAVAILABLE;
        goto done;
    }
    for (i = 0; i < n; i++) {
        json_t *e = json_array_get(o, i);
        ModelIndex init = INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
        static const char *const f[4] = {"name", "version", "state", "reason"};
        char **dst[4];
        int k;
        mi[i] = init;
        dst[0] = &mi[i].name, dst[1] = &mi[i].version;
        dst[2] = &mi[i].state, dst[3] = &mi[i].reason;
        for (k = 0; k < 4; k++) {
            const char *v = json_string_value(json_object_get(e, f[k]));
            *dst[k] = (char *)(v ? v : "");
        }
        mp[i] = &mi[i];
    }
    m.n_models = n;
    m.models = mp;
    rc = srv_grpc__pack(&m.base, out, len, err);
done:
    free(mi);
    free(mp);
    json_decref(o);
    return rc;
}

/* base64: for an upload's bytes_param (REST's load takes base64). */
static char *base64(const uint8_t *p, size_t n)
{
    static const char t[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    size_t i;
    if (!o)
        return NULL;
    for (i = 0; i + 2 < n; i += 3, q += 4) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        q[0] = t[v >> 18], q[1] = t[(v >> 12) & 63], q[2] = t[(v >> 6) & 63],
        q[3] = t[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        q[0] = t[v >> 18], q[1] = t[(v >> 12) & 63];
        q[2] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        q[3] = '=';
        q += 4;
    }
    *q = 0;
    return o;
}

/* repo_params: parameters as REST's load body {"parameters": {...}};
 * NULL with *code and err set when one cannot be carried (its key or
 * string is not UTF-8: INVALID_ARGUMENT) or memory ran out (UNAVAILABLE):
 * a load without the parameter would load something else. */
static char *repo_params(Inference__ModelRepositoryParameter *const *vals,
                         char *const *keys, size_t n, int *code, char *err)
{
    unsigned long mark = attn_json_mark();
    json_t *o = json_object(), *p = json_object();
    char *text;
    size_t i;
    json_object_set_new(o, "parameters", p);
    for (i = 0; i < n; i++) {
        const Inference__ModelRepositoryParameter *v = vals[i];
        json_t *j = NULL;
        if (!v)
            continue;
        switch (v->parameter_choice_case) {
        case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
            j = json_boolean(v->bool_param);
            break;
        case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
            j = json_integer(v->int64_param);
            break;
        case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
            j = json_string(v->string_param);
            break;
        case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BYTES_PARAM: {
            char *b = base64(v->bytes_param.data, v->bytes_param.len);
            if (!b) {
                json_decref(o);
                goto nomem;
            }
            j = json_string(b);
            free(b);
            break;
        }
        default: /* no value set */
            continue;
        }
        if (!j || json_object_set_new(p, keys[i], j)) {
            json_decref(o);
            if (attn_json_mark() != mark)
                goto nomem;
            *code = GRPC_INVALID_ARGUMENT;
            snprintf(err, GRPC_ERRMAX, "parameters: '%.64s': its key or its "
                     "string value is not valid UTF-8", keys[i]);
            return NULL;
        }
    }
    text = attn_json_dumps(o, JSON_COMPACT, mark);
    json_decref(o);
    if (text)
        return text;
nomem:
    *code = GRPC_UNAVAILABLE;
    snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
    return NULL;
}

static int start_load(srv_req *r, char *msg, size_t len, int *code,
                      char *err)
{
    Inference__RepositoryModelLoadRequest *m = (Inference__RepositoryModelLoadRequest *)srv_grpc__unpack(
        &inference__repository_model_load_request__descriptor, r, msg, len, code, err);
    Inference__ModelRepositoryParameter **vals = NULL;
    char **keys = NULL;
    size_t i;
    int rc;
    if (!m)
        return -1;
    rc = srv_grpc__model_arg(r, m->model_name, "", code, err);
    if (!rc && m->n_parameters) {
        vals = calloc(m->n_parameters, sizeof *vals);
        keys = calloc(m->n_parameters, sizeof *keys);
        for (i = 0; vals && keys && i < m->n_parameters; i++)
            vals[i] = m->parameters[i]->value, keys[i] = m->parameters[i]->key;
        if (!vals || !keys) {
            *code = GRPC_UNAVAILABLE;
            snprintf(err, GRPC_ERRMAX, GRPC_OOM_MSG);
        } else {
            r->body = repo_params(vals, keys, m->n_parameters, code, err);
        }
        if (!r->body)
            rc = -1;
        r->body_len = r->body ? strlen(r->body) : 0;
    }
    free(vals);
    free(keys);
    protobuf_c_message_free_unpacked(&m->base, &srv_grpc__unpack_al);
    return rc;
}

static int reply_empty(srv_req *r, const ProtobufCMessage *m, char **out,
                       size_t *len, char *err)
{
    if (r->status != 200)
        return srv_grpc__fail(r, err);
    return srv_grpc__pack(m, out, len, err);
}

static int reply_load(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__RepositoryModelLoadResponse m =
        INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
    return reply_empty(r, &m.base, out, len, err);
}

static int start_unload(srv_req *r, char *msg, size_t len, int *code,
                        char *err)
{
    Inference__RepositoryModelUnloadRequest *m = (Inference__RepositoryModelUnloadRequest *)srv_grpc__unpack(
        &inference__repository_model_unload_request__descriptor, r, msg, len, code, err);
    int rc;
    if (!m)
        return -1;
    rc = srv_grpc__model_arg(r, m->model_name, "", code, err);
    protobuf_c_message_free_unpacked(&m->base, &srv_grpc__unpack_al);
    return rc;
}

static int reply_unload(srv_req *r, char **out, size_t *len, char *err)
{
    Inference__RepositoryModelUnloadResponse m =
        INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
    return reply_empty(r, &m.base, out, len, err);
}

/* ---- the table -------------------------------------------------------------------- */

/* name, auth, stream, the REST route that serves it, start, reply (the
 * rest are grpc_meta.c's) */
static const grpc_method methods[] = {
    {"ModelInfer", 1, 0, SRV_POST, "/v2/models/{}/infer", start_infer,
     reply_infer},
    {"ModelStreamInfer", 1, 1, SRV_POST, "/v2/models/{}/infer", start_infer,
     reply_infer},
    {"ModelStatistics", 0, 0, SRV_GET, "/v2/models/stats", start_stats,
     reply_stats},
    {"RepositoryIndex", 1, 0, SRV_POST, "/v2/repository/index", start_index,
     reply_index},
    {"RepositoryModelLoad", 1, 0, SRV_POST, "/v2/repository/models/{}/load",
     start_load, reply_load},
    {"RepositoryModelUnload", 1, 0, SRV_POST,
     "/v2/repository/models/{}/unload", start_unload, reply_unload},
};

const grpc_method *srv_grpc_method(const char *path)
{
    static const char prefix[] = "/inference.GRPCInferenceService/";
    size_t i;
    if (strncmp(path, prefix, sizeof prefix - 1) != 0)
        return NULL;
    path += sizeof prefix - 1;
    for (i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(methods[i].name, path))
            return &methods[i];
    for (i = 0; i < srv_grpc__n_meta_methods; i++)
        if (!strcmp(srv_grpc__meta_methods[i].name, path))
            return &srv_grpc__meta_methods[i];
    return NULL;
}

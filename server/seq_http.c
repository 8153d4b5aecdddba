/*
 * seq_http.c - the `sequences` extension's routes (GET /v2/sequences,
 * DELETE /v2/sequences/{id}) and its Prometheus metrics. Loop thread.
 */
#include "server/seq.h"
#include "core/json_mem.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"

#define SEQ_OOM "sequences: out of memory"

/* info_json: one sequence as listed: {id, model, length, bytes, idle_ms,
 * idle_limit_ms, idle_sweep_ms, map_id?}; NULL when out of memory. */
static json_t *info_json(const srv_seq_info *i)
{
    json_t *o = json_pack("{s:s,s:s,s:i,s:I,s:I,s:I,s:I}", "id", i->id,
                          "model", i->model, "length", i->length, "bytes",
                          (json_int_t)i->bytes, "idle_ms", (json_int_t)i->idle_ms,
                          "idle_limit_ms", (json_int_t)i->idle_limit_ms,
                          "idle_sweep_ms", (json_int_t)i->idle_sweep_ms);
    if (o && i->map_id[0] &&
        json_object_set_new(o, "map_id", json_string(i->map_id)) < 0) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* GET /v2/sequences: {"sequences": [...], "count"}; the first 4096 when
 * there are more. */
void srv_seq_h_list(srv_req *r)
{
    enum { CAP = 4096 };
    unsigned long mark = attn_json_mark();
    srv_seq_info *info = malloc(CAP * sizeof *info);
    json_t *arr = json_array();
    size_t n, i;
    if (!info || !arr) {
        free(info);
        json_decref(arr);
        srv_respond_error(r, 503, SEQ_OOM);
        return;
    }
    n = srv_seq_list(r->s, info, CAP);
    for (i = 0; i < n && i < CAP; i++)
        json_array_append_new(arr, info_json(&info[i]));
    free(info);
    srv_respond_dump(r, json_pack("{s:o,s:I}", "sequences", arr, "count",
                                  (json_int_t)n), mark, SEQ_OOM);
}

/* header_differs: does r carry an Attnd-Sequence-Id header other than
 * the path's id? Then it is answered 400: a proxy routed it by the header
 * (README, "Sequences across replicas"), to the replica of another
 * sequence, as a step's header and parameters.sequence_id must agree. */
static int header_differs(srv_req *r)
{
    const char *h = r->has_seq_hdr ? r->seq_hdr : NULL; /* keep_seq_hdr */
    if (!h || strcmp(h, r->arg[0]) == 0)
        return 0;
    srv_respond_error(r, 400, "Attnd-Sequence-Id: header '%.200s' and the "
                      "path's sequence '%.200s' differ; send the same id in "
                      "both, or only one", h, r->arg[0]);
    return 1;
}

/* bad_path_id: is the path's id one no sequence can have? 400 then,
 * not 404 'unknown sequence' and its list of the ways a live one goes:
 * the client built the path wrong (a space, a byte past ASCII, past 128
 * bytes), and no retry or restart would find it. */
static int bad_path_id(srv_req *r)
{
    char err[OIP_ERRMAX];
    if (!oip_sequence_id_error(r->arg[0], strlen(r->arg[0]), "path", 1, err))
        return 0;
    srv_respond_error(r, 400, "%s", err);
    return 1;
}

/* GET /v2/sequences/{id}: the live sequence as listed; 404 saying how it
 * went when it is remembered (ended, dropped), or that it is unknown. */
void srv_seq_h_get(srv_req *r)
{
    unsigned long mark = attn_json_mark();
    srv_seq_info info;
    char msg[512];
    if (bad_path_id(r) || header_differs(r))
        return;
    if (srv_seq_get(r->s, r->arg[0], &info, msg, sizeof msg) < 0) {
        srv_respond_error(r, 404, "%s", msg);
        return;
    }
    srv_respond_dump(r, info_json(&info), mark, SEQ_OOM);
}

/* DELETE /v2/sequences/{id}: the sequence's pages go back now (or when its
 * running step ends); its later steps answer 400 unknown. 404 saying how
 * it went (as GET) when it is not live or already being dropped. */
void srv_seq_h_delete(srv_req *r)
{
    char name[SRV_NAME_MAX], msg[512];
    srv_seq_info info;
    if (bad_path_id(r) || header_differs(r))
        return;
    if (srv_seq_delete(r->s, r->arg[0], name) < 0) {
        srv_seq_get(r->s, r->arg[0], &info, msg, sizeof msg);
        srv_respond_error(r, 404, "%s", msg);
        return;
    }
    snprintf(r->model, sizeof r->model, "%s", name);
    r->changed = 1;
    srv_respond(r, 200, NULL, NULL, 0);
}

/* kv_used: the bytes of e's K/V pages in use: its instance's pool's and
 * those of earlier instances still held (a step that ran across a reload,
 * a start that arrived before it: they go when those end). */
static size_t kv_used(const srv_entry *e)
{
    const srv_inst *in;
    size_t n = e->inst && e->inst->kv_pool ? attn_kv_pool_used(e->inst->kv_pool)
                                           : 0;
    for (in = e->retired; in; in = in->rnext)
        n += in->kv_pool ? attn_kv_pool_used(in->kv_pool) : 0;
    return n;
}

/* kv_kept: the bytes of e's K/V pages kept for reuse, in every pool. */
static size_t kv_kept(const srv_entry *e)
{
    const srv_inst *in;
    size_t n = e->inst && e->inst->kv_pool ? attn_kv_pool_kept(e->inst->kv_pool)
                                           : 0;
    for (in = e->retired; in; in = in->rnext)
        n += in->kv_pool ? attn_kv_pool_kept(in->kv_pool) : 0;
    return n;
}

/* srv_seq_metrics_text: per weight-set model: live sequences, K/V bytes
 * used and the budget, sequences started, ended, dropped by reason. */
char *srv_seq_metrics_text(srv *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    srv_entry *e;
    int i;
    if (!f)
        return NULL;
#define FAMILY(name, type, help) \
    fprintf(f, "# HELP " name " " help "\n# TYPE " name " " type "\n")
    FAMILY("attnd_sequences_live", "gauge", "Sequences holding a K/V cache.");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            fprintf(f, "attnd_sequences_live{model=\"%s\",version=\"1\"} %d\n",
                    e->name, e->seq_stats.live);
    FAMILY("attnd_kv_bytes", "gauge",
           "K/V cache bytes held by the sequences of the model (an instance "
           "a reload replaced included, until its steps end).");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            fprintf(f, "attnd_kv_bytes{model=\"%s\",version=\"1\"} %zu\n", e->name,
                    kv_used(e));
    FAMILY("attnd_kv_kept_bytes", "gauge",
           "K/V pages sequences of the model freed, kept for reuse (resident, "
           "not in attnd_kv_bytes) until no sequence took them for 5 s.");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            fprintf(f, "attnd_kv_kept_bytes{model=\"%s\",version=\"1\"} %zu\n",
                    e->name, kv_kept(e));
    FAMILY("attnd_kv_bytes_limit", "gauge",
           "K/V cache budget per model (kv-bytes; 0 for a model that keeps no "
           "K/V cache).");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            fprintf(f, "attnd_kv_bytes_limit{model=\"%s\",version=\"1\"} %zu\n",
                    e->name, e->inst && e->inst->kv_pool
                                 ? attn_kv_pool_budget(e->inst->kv_pool) : 0);
#define COUNTER(metric, field, help)                                           \
    FAMILY(metric, "counter", help);                                           \
    for (e = s->models; e; e = e->next)                                        \
        if (!e->inst || !e->inst->builtin)                                     \
            fprintf(f, metric "{model=\"%s\",version=\"1\"} %llu\n", e->name,   \
                    (unsigned long long)e->seq_stats.field)
    COUNTER("attnd_sequences_started_total", started,
            "Sequences begun by a step with sequence_start.");
    COUNTER("attnd_sequences_ended_total", ended,
            "Sequences ended by a step with sequence_end.");
    COUNTER("attnd_sequence_rewinds_total", rewound,
            "Steps answered 200 at a sequence_position below the sequence's "
            "length (a step sent again, or a new branch).");
    COUNTER("attnd_sequence_rewound_tokens_total", rewound_tokens,
            "Tokens those steps took off their sequences' ends (the "
            "steps' own tokens took their place).");
#undef COUNTER
    FAMILY("attnd_sequence_steps_refused_total", "counter",
           "Sequence steps answered 503 (Retry-After) for the model's K/V "
           "cache full (kv_full: kv-bytes) or max-sequences live or "
           "starting (sequences_full).");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            for (i = 0; i < SRV_REFUSE_N; i++)
                fprintf(f, "attnd_sequence_steps_refused_total{model=\"%s\","
                           "version=\"1\",reason=\"%s\"} %llu\n", e->name,
                        i == SRV_REFUSE_KV_FULL ? "kv_full" : "sequences_full",
                        (unsigned long long)e->seq_stats.refused[i]);
    FAMILY("attnd_sequences_dropped_total", "counter",
           "Sequences dropped: idle (sequence-idle-ms), deleted, unloaded "
           "(model unloaded or reloaded), restarted (a new sequence_start).");
    for (e = s->models; e; e = e->next)
        if (!e->inst || !e->inst->builtin)
            for (i = 0; i < SRV_DROP_N; i++)
                fprintf(f, "attnd_sequences_dropped_total{model=\"%s\",version=\"1\","
                           "reason=\"%s\"} %llu\n", e->name, srv_drop_name[i],
                        (unsigned long long)e->seq_stats.dropped[i]);
#undef FAMILY
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

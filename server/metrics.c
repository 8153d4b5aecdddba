/*
 * metrics.c - /metrics (Prometheus text format, names modelled on Triton's
 * nv_inference_*; durations in seconds, counters end in _total) and
 * /v2/models/stats (Triton's statistics extension). Loop thread: the
 * counters are only touched there, so reading them needs no lock.
 */
#include "server/srv.h"
#include "core/json_mem.h"
#include "server/grpc.h"
#include "server/maps.h"
#include "server/maps_norm.h"
#include "server/seq.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int bucket_le[SRV_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 0};

/* more_of: st's entry for batches of n > SRV_BATCH_STATS sequences, made
 * (in size order) when new; NULL when out of memory. */
static srv_batch_stat *more_of(srv_stats *st, int n)
{
    size_t lo = 0, hi = st->n_more;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->more[mid].size < n)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < st->n_more && st->more[lo].size == n)
        return &st->more[lo];
    if (st->n_more == st->cap_more) {
        size_t cap = st->cap_more ? 2 * st->cap_more : 8;
        srv_batch_stat *p = realloc(st->more, cap * sizeof *p);
        if (!p)
            return NULL;
        st->more = p;
        st->cap_more = cap;
    }
    memmove(&st->more[lo + 1], &st->more[lo],
            (st->n_more - lo) * sizeof *st->more);
    st->n_more++;
    st->more[lo] = (srv_batch_stat){n, 0, 0};
    return &st->more[lo];
}

void srv_stats_free(srv_stats *st)
{
    free(st->more);
    st->more = NULL;
    st->n_more = st->cap_more = 0;
}

void srv_stats_batch(srv_stats *st, int n_seqs, int n_ok, uint64_t infer_ns)
{
    int i;
    /* Triton counts successful inferences and executions: a batch whose
     * every request failed on its outputs (non-finite) counts for neither;
     * one answered 504 while it ran, or whose client went, still counts */
    if (n_ok < 1)
        return;
    st->exec_count++;
    st->inference_count += (uint64_t)n_ok;
    st->infer_ns += infer_ns;
    /* batch_stats by the batch's own size, as Triton's (out of memory for
     * a new size past SRV_BATCH_STATS: that batch is left out of them) */
    if (n_seqs <= SRV_BATCH_STATS) {
        st->size_count[n_seqs - 1]++;
        st->size_infer_ns[n_seqs - 1] += infer_ns;
    } else {
        srv_batch_stat *m = more_of(st, n_seqs);
        if (m) {
            m->count++;
            m->infer_ns += infer_ns;
        }
    }
    for (i = 0; i < SRV_BATCH_BUCKETS - 1 && n_seqs > bucket_le[i]; i++)
        ;
    st->batch_le[i]++;
    st->batch_count++;
    st->batch_sum += (uint64_t)n_seqs;
}

/* A growable text buffer; on out of memory it stays failed. */
typedef struct buf {
    char *p;
    size_t len, cap;
    int failed;
} buf;

/* bprintf: append to b, growing it; after a failed allocation b->failed
 * is set and further calls do nothing. */
static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        {
            size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
            char *np = realloc(b->p, cap);
            if (!np) {
                b->failed = 1;
                return;
            }
            b->p = np;
            b->cap = cap;
        }
    }
}

/* A model's value in a family: get_<name>(e). */
typedef uint64_t (*entry_get)(const srv_entry *);
#define GETTER(name, v)                                                       \
    static uint64_t get_##name(const srv_entry *e) { return (uint64_t)(v); }
#define STAT_GETTER(f) GETTER(f, e->stats.f)
STAT_GETTER(success)
STAT_GETTER(inference_count)
STAT_GETTER(exec_count)
STAT_GETTER(inline_count)
STAT_GETTER(abandoned)
STAT_GETTER(undecoded)
STAT_GETTER(success_ns)
STAT_GETTER(queue_ns)
STAT_GETTER(input_ns)
STAT_GETTER(infer_ns)
STAT_GETTER(output_ns)
GETTER(pending, e->pending)
GETTER(ready, e->state == SRV_READY)
GETTER(waiting, srv_registry_waiting(e))
GETTER(norm_grams, e->inst ? maps_grams_held(e->inst->grams) : 0)

/* family: metric name's HELP and TYPE lines, then a line a model with
 * get(e) (ns: nanoseconds, printed as seconds). */
static void family(buf *b, srv *s, const char *name, const char *type,
                   const char *help, entry_get get, int ns)
{
    srv_entry *e;
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (e = s->models; e; e = e->next) {
        uint64_t v = get(e);
        if (ns)
            bprintf(b, "%s{model=\"%s\",version=\"1\"} %.9f\n", name, e->name,
                    (double)v / 1e9);
        else
            bprintf(b, "%s{model=\"%s\",version=\"1\"} %llu\n", name, e->name,
                    (unsigned long long)v);
    }
}

void srv_h_metrics(srv_req *r)
{
    srv *s = r->s;
    buf b = {0};
    srv_entry *e;
    int i;
    family(&b, s, "attnd_inference_request_success_total", "counter",
           "Inference requests answered 200.", get_success, 0);
    bprintf(&b, "# HELP attnd_inference_request_failure_total Inference requests "
                "that failed, by reason.\n"
                "# TYPE attnd_inference_request_failure_total counter\n");
    for (e = s->models; e; e = e->next) {
        static const char *reasons[] = {"bad_request", "rejected", "timeout", "other"};
        uint64_t v[4] = {e->stats.fail_bad, e->stats.fail_rejected,
                         e->stats.fail_timeout, e->stats.fail_other};
        for (i = 0; i < 4; i++)
            bprintf(&b, "attnd_inference_request_failure_total{model=\"%s\","
                        "version=\"1\",reason=\"%s\"} %llu\n",
                    e->name, reasons[i], (unsigned long long)v[i]);
    }
    family(&b, s, "attnd_inference_count_total", "counter",
           "Sequences computed, but not those of a request its outputs "
           "failed (a request of batch B counts B).",
           get_inference_count, 0);
    family(&b, s, "attnd_inference_exec_count_total", "counter",
           "Batches executed, but not those whose every request its "
           "outputs failed.",
           get_exec_count, 0);
    family(&b, s, "attnd_inference_inline_count_total", "counter",
           "Requests decoded, computed and encoded on the loop thread "
           "(inline-conns), not on the pool.", get_inline_count, 0);
    family(&b, s, "attnd_inference_batches_abandoned_total", "counter",
           "Batches whose remaining tiles were skipped: each of their "
           "requests had been answered 504 or its client had gone.",
           get_abandoned, 0);
    family(&b, s, "attnd_inference_requests_undecoded_total", "counter",
           "Requests answered 504, or whose client had gone, while they "
           "waited for a pool thread to decode their body: not decoded.",
           get_undecoded, 0);
    family(&b, s, "attnd_inference_request_duration_seconds_total", "counter",
           "Arrival to answer of successful requests.", get_success_ns, 1);
    family(&b, s, "attnd_inference_queue_duration_seconds_total", "counter",
           "Time successful requests waited for a batch.", get_queue_ns, 1);
    family(&b, s, "attnd_inference_compute_input_duration_seconds_total",
           "counter", "Decoding and checking requests (pool).", get_input_ns, 1);
    family(&b, s, "attnd_inference_compute_infer_duration_seconds_total",
           "counter", "Batch compute, once per batch.", get_infer_ns, 1);
    family(&b, s, "attnd_inference_compute_output_duration_seconds_total",
           "counter", "Encoding responses (pool).", get_output_ns, 1);
    family(&b, s, "attnd_inference_pending_requests", "gauge",
           "Requests admitted and not yet ended (one answered 504, or whose "
           "client went, counts until its work stops).", get_pending, 0);
    bprintf(&b, "# HELP attnd_inference_batch_size Sequences per executed batch.\n"
                "# TYPE attnd_inference_batch_size histogram\n");
    for (e = s->models; e; e = e->next) {
        uint64_t cum = 0;
        for (i = 0; i < SRV_BATCH_BUCKETS; i++) {
            char le[16];
            cum += e->stats.batch_le[i];
            if (bucket_le[i])
                snprintf(le, sizeof le, "%d", bucket_le[i]);
            else
                snprintf(le, sizeof le, "+Inf");
            bprintf(&b, "attnd_inference_batch_size_bucket{model=\"%s\",version=\"1\","
                        "le=\"%s\"} %llu\n", e->name, le, (unsigned long long)cum);
        }
        bprintf(&b, "attnd_inference_batch_size_sum{model=\"%s\",version=\"1\"} %llu\n"
                    "attnd_inference_batch_size_count{model=\"%s\",version=\"1\"} %llu\n",
                e->name, (unsigned long long)e->stats.batch_sum, e->name,
                (unsigned long long)e->stats.batch_count);
    }
    family(&b, s, "attnd_model_ready", "gauge",
           "1 when the model is loaded and ready.", get_ready, 0);
    family(&b, s, "attnd_model_norm_gram_bytes", "gauge",
           "Bytes of the loaded weight set's W_o Gram matrices, kept for "
           "what=norm's value norms: 0 until its first retained request.",
           get_norm_grams, 0);
    family(&b, s, "attnd_repository_calls_waiting", "gauge",
           "Load, upload and unload calls of the model waiting while a load "
           "of it runs: those queued (at most repository-waiters) and those "
           "that joined an identical one queued.", get_waiting, 0);
    bprintf(&b, "# HELP attnd_http_responses_total HTTP answers by status code.\n"
                "# TYPE attnd_http_responses_total counter\n");
    for (i = 100; i < 600; i++)
        if (s->http.by_status[i])
            bprintf(&b, "attnd_http_responses_total{code=\"%d\"} %llu\n", i,
                    (unsigned long long)s->http.by_status[i]);
    bprintf(&b, "# HELP attnd_grpc_calls_total gRPC calls by final status.\n"
                "# TYPE attnd_grpc_calls_total counter\n");
    for (i = 0; i < 17; i++)
        if (s->http.grpc_codes[i])
            bprintf(&b, "attnd_grpc_calls_total{code=\"%s\"} %llu\n",
                    srv_grpc_code_name(i), (unsigned long long)s->http.grpc_codes[i]);
    bprintf(&b, "# HELP attnd_grpc_connection_errors_total gRPC connections "
                "ended for HTTP/2 errors (protocol errors, stream resets over "
                "the HTTP/2 layer's limit).\n"
                "# TYPE attnd_grpc_connection_errors_total counter\n"
                "attnd_grpc_connection_errors_total %llu\n",
                (unsigned long long)s->http.grpc_h2_errors);
    bprintf(&b, "# HELP attnd_grpc_connections_refused_total gRPC connections "
                "closed at their accept because memory-budget had no room "
                "for their state.\n"
                "# TYPE attnd_grpc_connections_refused_total counter\n"
                "attnd_grpc_connections_refused_total %llu\n",
                (unsigned long long)s->http.grpc_conns_refused);
    bprintf(&b, "# HELP attnd_http_connections_refused_total REST "
                "connections answered 503 at their accept, unread, because "
                "memory-budget had no room for their state.\n"
                "# TYPE attnd_http_connections_refused_total counter\n"
                "attnd_http_connections_refused_total %llu\n",
                (unsigned long long)s->http.http_conns_refused);
    bprintf(&b, "# HELP attnd_log_lines_dropped_total Log lines dropped "
                "because stderr did not keep up (--log-buffer) or refused "
                "them (a closed pipe, a full disk).\n"
                "# TYPE attnd_log_lines_dropped_total counter\n"
                "attnd_log_lines_dropped_total %llu\n",
                (unsigned long long)srv_log_dropped(s));
    bprintf(&b, "# HELP attnd_grpc_stream_responses_total ModelStreamInfer "
                "responses by the status of the request they answer.\n"
                "# TYPE attnd_grpc_stream_responses_total counter\n");
    for (i = 0; i < 17; i++)
        if (s->http.grpc_msgs[i])
            bprintf(&b, "attnd_grpc_stream_responses_total{code=\"%s\"} %llu\n",
                    srv_grpc_code_name(i), (unsigned long long)s->http.grpc_msgs[i]);
    bprintf(&b, "# HELP attnd_draining 1 after SIGTERM/SIGINT/SIGHUP.\n"
                "# TYPE attnd_draining gauge\nattnd_draining %d\n"
                "# HELP attnd_open_requests HTTP requests in progress.\n"
                "# TYPE attnd_open_requests gauge\nattnd_open_requests %d\n"
                "# HELP attnd_pool_jobs Request work queued on the compute "
                "pool or running there.\n"
                "# TYPE attnd_pool_jobs gauge\nattnd_pool_jobs %d\n"
                "# HELP attnd_open_connections Connections open (REST and gRPC).\n"
                "# TYPE attnd_open_connections gauge\nattnd_open_connections %d\n"
                "# HELP attnd_grpc_open_connections gRPC connections open, "
                "each holding 80 KiB of memory-budget.\n"
                "# TYPE attnd_grpc_open_connections gauge\n"
                "attnd_grpc_open_connections %d\n"
                "# HELP attnd_http_open_connections REST connections open, "
                "each holding 36 KiB of memory-budget.\n"
                "# TYPE attnd_http_open_connections gauge\n"
                "attnd_http_open_connections %d\n"
                "# HELP attnd_memory_budget_used_bytes Bytes of memory-budget "
                "held by bodies, decoded requests, unsent answers and "
                "connections (REST and gRPC).\n"
                "# TYPE attnd_memory_budget_used_bytes gauge\n"
                "attnd_memory_budget_used_bytes %zu\n",
            s->draining, s->live_reqs, s->pool_jobs, s->n_conns,
            srv_grpc_open_conns(s), s->n_http_conns, s->mem_used);
    bprintf(&b, "# HELP attnd_memory_trims_total Times freed memory was given "
                "back to the kernel (malloc_trim) after a burst.\n"
                "# TYPE attnd_memory_trims_total counter\n"
                "attnd_memory_trims_total %llu\n"
                "# HELP attnd_memory_trim_seconds_total Time those trims took "
                "on a pool thread.\n"
                "# TYPE attnd_memory_trim_seconds_total counter\n"
                "attnd_memory_trim_seconds_total %.6f\n"
                "# HELP attnd_memory_trim_running 1 while a trim is queued on "
                "the compute pool or runs there, holding one of its threads "
                "(attnd_pool_jobs does not count it).\n"
                "# TYPE attnd_memory_trim_running gauge\n"
                "attnd_memory_trim_running %d\n"
                "# HELP attnd_memory_trim_checks_total Times the trim looked "
                "at the memory held (once a second), whether it trimmed or "
                "not.\n"
                "# TYPE attnd_memory_trim_checks_total counter\n"
                "attnd_memory_trim_checks_total %llu\n",
            (unsigned long long)s->trims, (double)s->trim_ns_total / 1e9,
            s->trimming, (unsigned long long)s->trim_checks);
    {
        int lingering;
        unsigned long long kept, cut;
        srv_linger_counts(s, &lingering, &kept, &cut);
        bprintf(&b, "# HELP attnd_lingering_connections Connections attnd "
                    "closed whose last bytes it still reads (linger-ms).\n"
                    "# TYPE attnd_lingering_connections gauge\n"
                    "attnd_lingering_connections %d\n"
                    "# HELP attnd_lingered_connections_total Connections closed "
                    "while their client could still send, read until the client "
                    "ended its side or reset it (client) or linger-ms or max-body "
                    "was reached (limit).\n"
                    "# TYPE attnd_lingered_connections_total counter\n"
                    "attnd_lingered_connections_total{end=\"client\"} %llu\n"
                    "attnd_lingered_connections_total{end=\"limit\"} %llu\n",
                lingering, kept - cut - (unsigned long long)lingering, cut);
    }
    if (s->maps) {
        size_t used, max_bytes, n;
        uint64_t evicted;
        maps_stats(s->maps, &used, &max_bytes, &n, &evicted);
        bprintf(&b,
                "# HELP attnd_maps_bytes Bytes held by retained attention maps.\n"
                "# TYPE attnd_maps_bytes gauge\nattnd_maps_bytes %zu\n"
                "# HELP attnd_maps_bytes_limit The retained-map budget (maps-bytes).\n"
                "# TYPE attnd_maps_bytes_limit gauge\nattnd_maps_bytes_limit %zu\n"
                "# HELP attnd_maps_retained Retained attention maps held.\n"
                "# TYPE attnd_maps_retained gauge\nattnd_maps_retained %zu\n"
                "# HELP attnd_maps_evicted_total Retained maps evicted, oldest "
                "first, to make room.\n"
                "# TYPE attnd_maps_evicted_total counter\n"
                "attnd_maps_evicted_total %llu\n"
                "# HELP attnd_maps_waiters Connections waiting on GET "
                "/v2/maps/{id}?wait= (at most maps-waiters).\n"
                "# TYPE attnd_maps_waiters gauge\nattnd_maps_waiters %d\n"
                "# HELP attnd_maps_renders_skipped_total Map renders (GET "
                "/v2/maps/{id}/attention) not done: their client went while "
                "they waited their turn (answered 499).\n"
                "# TYPE attnd_maps_renders_skipped_total counter\n"
                "attnd_maps_renders_skipped_total %llu\n"
                "# HELP attnd_maps_renders_cut_total Map renders (GET "
                "/v2/maps/{id}/attention) stopped part way: their client "
                "went while they rendered (answered 499).\n"
                "# TYPE attnd_maps_renders_cut_total counter\n"
                "attnd_maps_renders_cut_total %llu\n",
                used, max_bytes, n, (unsigned long long)evicted, s->n_waiters,
                (unsigned long long)s->maps_skipped,
                (unsigned long long)s->maps_cut);
    }
    {
        char *seq = srv_seq_metrics_text(s);
        if (!seq)
            b.failed = 1;
        else
            bprintf(&b, "%s", seq);
        free(seq);
    }
    if (b.failed) {
        free(b.p);
        srv_respond_error(r, 503, "metrics: out of memory");
        return;
    }
    srv_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
}

static json_t *dur(uint64_t count, uint64_t ns)
{
    return json_pack("{s:I,s:I}", "count", (json_int_t)count, "ns", (json_int_t)ns);
}

/* model_stats: e's entry of Triton's statistics extension (counts and
 * summed ns for success, fail, queue, compute input/infer/output, and
 * compute_infer per batch size). As Triton's, inference_stats counts each
 * successful request, compute_infer too: a batch of k requests adds its
 * time k times there, once in batch_stats. Triton's response cache
 * (cache_hit, cache_miss) attnd has not: always 0, but there, as clients
 * such as perf_analyzer read them. NULL when out of memory. */
static json_t *model_stats(const srv_entry *e)
{
    const srv_stats *st = &e->stats;
    uint64_t fail = st->fail_bad + st->fail_rejected + st->fail_timeout + st->fail_other;
    json_t *bs = json_array();
    size_t k;
    /* Triton's batch_stats, by size; a request's decode and encode are its
     * own (inference_stats), not its batch's, so only compute_infer is
     * measured per batch size: compute_input/output are there, at 0 */
    for (k = 0; bs && k < SRV_BATCH_STATS + st->n_more; k++) {
        const srv_batch_stat *m =
            k < SRV_BATCH_STATS ? NULL : &st->more[k - SRV_BATCH_STATS];
        uint64_t n = m ? m->count : st->size_count[k];
        if (n)
            json_array_append_new(
                bs, json_pack("{s:i,s:o,s:o,s:o}", "batch_size",
                              m ? m->size : (int)k + 1, "compute_input",
                              dur(0, 0), "compute_infer",
                              dur(n, m ? m->infer_ns : st->size_infer_ns[k]),
                              "compute_output", dur(0, 0)));
    }
    return json_pack(
        "{s:s,s:s,s:I,s:I,s:I,s:{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o},s:o}",
        "name", e->name,
        "version", "1", "last_inference", (json_int_t)st->last_inference_ms,
        "inference_count", (json_int_t)st->inference_count, "execution_count",
        (json_int_t)st->exec_count, "inference_stats", "success",
        dur(st->success, st->success_ns), "fail", dur(fail, st->fail_ns), "queue",
        dur(st->success, st->queue_ns), "compute_input",
        dur(st->success, st->input_ns), "compute_infer",
        dur(st->success, st->req_infer_ns), "compute_output",
        dur(st->success, st->output_ns), "cache_hit", dur(0, 0), "cache_miss",
        dur(0, 0), "batch_stats", bs);
}

/* GET /v2/models/stats and /v2/models/{m}/stats. */
void srv_h_stats(srv_req *r)
{
    unsigned long mark = attn_json_mark();
    json_t *arr = json_array();
    srv_entry *e;
    if (r->arg[0][0]) {
        e = srv_registry_find(r->s, r->arg[0]);
        if (!e) {
            json_decref(arr);
            srv_respond_no_model(r, r->arg[0], NULL);
            return;
        }
        json_array_append_new(arr, model_stats(e));
    } else {
        for (e = r->s->models; e; e = e->next)
            json_array_append_new(arr, model_stats(e));
    }
    srv_respond_dump(r, json_pack("{s:o}", "model_stats", arr), mark,
                     "stats: out of memory");
}

/*
 * seq_fixture.h - what test_seq.c and test_seq_drops.c share: seq.c's and
 * seq_drops.c's stand-ins, the two models and their instances, jobs built
 * from real requests, and the helpers that drive them (header-only: each
 * tests/server/test_*.c is its own binary, so each gets its own copy).
 *
 * Requests are real: JSON bodies through oip_decode and srv_seq_prepare
 * (seq_prep.c), so a step carries the prep and request seq.c binds. What
 * seq.c calls outside itself is stood in for here, at link time (the
 * definitions below come before libattnd.a, so sched.o, registry.o, http.o
 * and log.o are never pulled in; a new call from seq.c into one of them
 * shows as a multiple-definition link error of these binaries):
 *   srv__sched_queue   records that the job went onto its model's queue;
 *   srv__sched_fail    records the answer and ends the job, as sched.c's
 *                      does (srv_seq_step_end of a step seq.c let go);
 *   srv_now_ns         a clock the tests move by hand;
 *   srv_log            keeps the last line;
 *   srv_inst_unref     counts the reference down (instances are static);
 *   srv_mem_take/give  memory-budget, counted with no budget.
 * The idle sweep is seq_drops.c's own uv timer on a private loop: the tests set
 * the clock, then run the loop until the timer has fired once.
 *
 * Sizes: models "m1" and "m2" have d_model 8, 2 heads of 4, one kv head:
 * 32 bytes a token in FP32, pages of 4 tokens (128 bytes), 8 pages
 * (kv-bytes 1024) per instance. Expected numbers are worked out in the
 * comments, never taken from the code under test.
 */
#ifndef ATTND_TEST_SEQ_FIXTURE_H
#define ATTND_TEST_SEQ_FIXTURE_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "server/grpc.h"
#include "server/seq.h"
#include "tests/check_main.h"

#define PAGE 128   /* bytes of a page of 4 tokens */
#define BUDGET 1024

/* ---- the stand-ins ------------------------------------------------------ */

/* A job as far as seq.c sees it: its step and what the step points at,
 * and what the scheduler was asked to do with it. */
struct srv_job {
    srv_step st;
    srv_prep prep;
    oip_request in;
    int queued;             /* srv__sched_queue calls */
    int status;             /* its answer from seq.c or a failed bind */
    size_t mem;             /* its share of memory-budget (bind sets it) */
    char msg[OIP_ERRMAX];
};

static uint64_t g_now;      /* ns, the clock seq.c reads */
static char g_log[1024];    /* the last srv_log line */
static int g_n_fail_ends;   /* srv_seq_step_end calls of failed jobs */

uint64_t srv_now_ns(void)
{
    return g_now;
}

void srv_log(srv *s, const char *level, const char *fmt, ...)
{
    va_list ap;
    (void)s, (void)level;
    va_start(ap, fmt);
    vsnprintf(g_log, sizeof g_log, fmt, ap);
    va_end(ap);
}

/* memory-budget as guard.c counts it, with no budget (g_s.cfg's 0) */
int srv_mem_take(srv *s, size_t n)
{
    s->mem_used += n;
    return 0;
}

void srv_mem_give(srv *s, size_t n)
{
    s->mem_used = n > s->mem_used ? 0 : s->mem_used - n;
}

void srv_inst_unref(srv_inst *in)
{
    in->refs--;
}

/* no gRPC door here (g_s.grpc NULL): no message on its way */
int srv_grpc_step_coming(const srv *s, const char *id, uint64_t before)
{
    (void)s, (void)id, (void)before;
    return 0;
}

void srv__sched_queue(srv_job *j)
{
    j->queued++;
}

void srv__sched_fail(srv_job *j, int status, const char *msg)
{
    j->status = status;
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    g_n_fail_ends++;
    srv_seq_step_end(&j->st, 0); /* sched.c's job_end */
}

/* ---- the fixture -------------------------------------------------------- */

static const attn_config g_cfg = {.d_model = 8, .d_model_ctx = 8,
                                  .n_heads = 2, .n_kv_heads = 1,
                                  .head_dim = 4, .v_head_dim = 4};
static srv g_s;
static uv_loop_t g_loop;
/* g_inst[0]: m1's instance, [1]: m2's, [2]: m1 after a reload,
 * [3]: an instance with no cache (kv-bytes 0) */
static srv_inst g_inst[4];
static srv_entry g_e[2];
#define M1 (&g_e[0])
#define M2 (&g_e[1])

static inline void setup(void)
{
    char err[ATTN_ERRMAX];
    int i;
    memset(&g_s, 0, sizeof g_s);
    memset(g_inst, 0, sizeof g_inst);
    memset(g_e, 0, sizeof g_e);
    g_now = 1000ull * 1000000u; /* 1 s */
    g_log[0] = 0;
    g_n_fail_ends = 0;
    g_s.cfg.kv_bytes = BUDGET;
    g_s.cfg.max_sequences = 4;
    g_s.cfg.sequence_idle_ms = 40; /* the sweep runs every 10 ms */
    g_s.cfg.request_memory = 1 << 20;
    g_s.cfg.max_tokens = 1024;
    ck_assert_int_eq(uv_loop_init(&g_loop), 0);
    g_s.loop = &g_loop;
    ck_assert_int_eq(maps_store_create(&g_s.maps, 1 << 20), 0);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(attn_kv_pool_create(&g_inst[i].kv_pool, &g_cfg,
                                             ATTN_KV_F32, 4, BUDGET, err), 0);
        g_inst[i].refs = 1; /* the registry's */
    }
    g_inst[3].refs = 1;
    for (i = 0; i < 2; i++) {
        g_e[i].s = &g_s;
        snprintf(g_e[i].name, sizeof g_e[i].name, "m%d", i + 1);
        g_e[i].inst = &g_inst[i];
    }
    ck_assert_int_eq(srv_seq_init(&g_s), 0);
}

static inline void teardown(void)
{
    int i;
    srv_seq_stop(&g_s);
    uv_run(&g_loop, UV_RUN_DEFAULT); /* the timer's close */
    srv_seq_free(&g_s);
    ck_assert_ptr_null(g_s.seqs);
    for (i = 0; i < 4; i++) {
        ck_assert_int_eq(g_inst[i].refs, 1); /* every sequence's ref back */
        if (g_inst[i].kv_pool)
            ck_assert_uint_eq(attn_kv_pool_used(g_inst[i].kv_pool), 0);
        attn_kv_pool_destroy(g_inst[i].kv_pool);
    }
    maps_store_destroy(g_s.maps);
    ck_assert_int_eq(uv_loop_close(&g_loop), 0);
}

/* make: a request to model e of t new tokens with the given "parameters"
 * members (and "outputs", when outs is not NULL; an Attnd-Sequence-Id
 * header when hdr is not NULL), decoded and prepared as sched.c's
 * decode_work does; the job holds e's current instance. */
static inline srv_job *make(srv_entry *e, int t, const char *hdr, const char *outs,
                     const char *params)
{
    srv_job *j = calloc(1, sizeof *j);
    srv_infer_limits lim = {1 << 20, 1024, g_s.maps};
    char body[4096], err[OIP_ERRMAX];
    size_t n;
    int i;
    ck_assert_ptr_nonnull(j);
    n = (size_t)snprintf(body, sizeof body, "{\"inputs\":[{\"name\":\"x\","
                         "\"datatype\":\"FP32\",\"shape\":[1,%d,8],\"data\":[",
                         t);
    for (i = 0; i < t * 8; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s0.5", i ? "," : "");
    n += (size_t)snprintf(body + n, sizeof body - n, "]}],%s%s%s"
                          "\"parameters\":{%s}}", outs ? "\"outputs\":" : "",
                          outs ? outs : "", outs ? "," : "", params);
    ck_assert_uint_lt(n, sizeof body);
    ck_assert_msg(oip_decode(&j->in, body, n, 0, NULL, err) == 0, "%s", err);
    snprintf(j->st.hdr_id, sizeof j->st.hdr_id, "%s", hdr ? hdr : "");
    ck_assert(srv_seq_wants(&j->st, &j->in));
    ck_assert_msg(srv_seq_prepare(&j->st, &j->prep, &j->in, e->name, &g_cfg, 1,
                                  0, &lim, err) == 0, "%s", err);
    j->st.job = j;
    j->st.e = e;
    j->st.inst = e->inst;
    j->st.prep = &j->prep;
    j->st.in = &j->in;
    return j;
}

static inline srv_job *job(srv_entry *e, int t, const char *params)
{
    return make(e, t, NULL, NULL, params);
}

static inline srv_job *jobo(srv_entry *e, int t, const char *outs, const char *params)
{
    return make(e, t, NULL, outs, params);
}

static inline void job_free(srv_job *j)
{
    srv_prep_free(&j->prep);
    oip_request_free(&j->in);
    free(j);
}

/* submit: j arrives and is decoded at once (a good step). */
static inline void submit(srv_job *j)
{
    srv_seq_arrive(&g_s, &j->st);
    srv_seq_decoded(&g_s, &j->st, 1);
}

/* launch: j leaves its model's queue for a batch (batch.c): bind; a
 * refused bind answers and ends the job there. Returns the bind's status. */
static inline int launch(srv_job *j)
{
    char err[OIP_ERRMAX];
    int status;
    ck_assert_int_eq(j->queued, 1);
    ck_assert_int_eq(j->st.where, SRV_STEP_ACTIVE);
    status = srv_seq_bind(&j->st, &j->mem, err);
    if (status) {
        j->status = status;
        snprintf(j->msg, sizeof j->msg, "%s", err);
        srv_seq_step_end(&j->st, 0);
    }
    return status;
}

/* end: j's batch is over; ok = it was answered 200. */
static inline void end(srv_job *j, int ok)
{
    srv_seq_step_end(&j->st, ok);
    j->status = ok ? 200 : 500;
}

/* run: launch, then end (when bound) with ok. Returns the bind's status. */
static inline int run(srv_job *j, int ok)
{
    int status = launch(j);
    if (!status)
        end(j, ok);
    return status;
}

/* go: a request that runs through at once and succeeds; freed. */
static inline void go(srv_entry *e, int t, const char *params)
{
    srv_job *j = job(e, t, params);
    submit(j);
    ck_assert_msg(j->status == 0, "%d %s", j->status, j->msg);
    ck_assert_int_eq(run(j, 1), 0);
    job_free(j);
}

/* refused: a request answered at once, not queued, with status and msg;
 * freed. */
static inline void refused(srv_entry *e, int t, const char *params,
                           int status, const char *msg)
{
    srv_job *j = job(e, t, params);
    submit(j);
    ck_assert_int_eq(j->queued, 0);
    ck_assert_int_eq(j->status, status);
    ck_assert_str_eq(j->msg, msg);
    job_free(j);
}

/* info: the listing of id; 0 when it is not listed. */
static inline int info(const char *id, srv_seq_info *out)
{
    srv_seq_info all[16];
    size_t i, n = srv_seq_list(&g_s, all, 16);
    ck_assert_uint_le(n, 16);
    for (i = 0; i < n; i++)
        if (strcmp(all[i].id, id) == 0) {
            if (out)
                *out = all[i];
            return 1;
        }
    return 0;
}

static inline int length(const char *id)
{
    srv_seq_info i;
    return info(id, &i) ? i.length : -1;
}

static inline size_t used(int inst)
{
    return attn_kv_pool_used(g_inst[inst].kv_pool);
}

/* sweep: let seq.c's idle timer fire once (it fires every 10 ms). */
static inline void sweep(void)
{
    uv_run(&g_loop, UV_RUN_ONCE);
}

#define MS 1000000ull

/* A sequence's whole state as the outside sees it. */
typedef struct snap {
    int listed;
    srv_seq_info info;
    size_t used;
    int refs;
    srv_seq_stats stats;
} snap;

static inline snap take_snap(const char *id, srv_entry *e, int inst)
{
    snap s;
    memset(&s, 0, sizeof s);
    s.listed = info(id, &s.info);
    s.used = used(inst);
    s.refs = g_inst[inst].refs;
    s.stats = e->seq_stats;
    return s;
}

static inline void assert_same(const snap *a, const snap *b)
{
    ck_assert_int_eq(a->listed, b->listed);
    ck_assert_str_eq(a->info.id, b->info.id);
    ck_assert_str_eq(a->info.model, b->info.model);
    ck_assert_int_eq(a->info.length, b->info.length);
    ck_assert_uint_eq(a->info.bytes, b->info.bytes);
    ck_assert_uint_eq(b->info.idle_ms, 0); /* a step came, failed or not */
    ck_assert_str_eq(a->info.map_id, b->info.map_id);
    ck_assert_uint_eq(a->used, b->used);
    ck_assert_int_eq(a->refs, b->refs);
    ck_assert_mem_eq(&a->stats, &b->stats, sizeof a->stats);
}


#endif

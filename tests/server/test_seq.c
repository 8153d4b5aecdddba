/*
 * test_seq.c - the server's sequence table (server/seq.c) on its own: ids,
 * start / step / end / restart, the arrival order of steps, one step of a
 * sequence at a time, the K/V pages reserved at launch, advanced on success
 * and given back on failure, the limits (max-sequences, kv-bytes), idle
 * expiry, drops (DELETE, unload, reload), listing, the per-model
 * counters and the batcher's count of expected steps.
 *
 * Requests are real: JSON bodies through oip_decode and srv_seq_prepare
 * (seq_prep.c), so a step carries the prep and request seq.c binds. What
 * seq.c calls outside itself is stood in for here, at link time (the
 * definitions below come before libattnd.a, so sched.o, registry.o, http.o
 * and log.o are never pulled in; a new call from seq.c into one of them
 * shows as a multiple-definition link error of this binary):
 *   srv__sched_queue   records that the job went onto its model's queue;
 *   srv__sched_fail    records the answer and ends the job, as sched.c's
 *                      does (srv_seq_step_end of a step seq.c let go);
 *   srv_now_ns         a clock the tests move by hand;
 *   srv_log            keeps the last line;
 *   srv_inst_unref     counts the reference down (instances are static).
 * The idle sweep is seq.c's own uv timer on a private loop: the tests set
 * the clock, then run the loop until the timer has fired once.
 *
 * Sizes: models "m1" and "m2" have d_model 8, 2 heads of 4, one kv head:
 * 32 bytes a token in FP32, pages of 4 tokens (128 bytes), 8 pages
 * (kv-bytes 1024) per instance. Expected numbers are worked out in the
 * comments, never taken from the code under test.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
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

void srv_inst_unref(srv_inst *in)
{
    in->refs--;
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

static void setup(void)
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

static void teardown(void)
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
static srv_job *make(srv_entry *e, int t, const char *hdr, const char *outs,
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

static srv_job *job(srv_entry *e, int t, const char *params)
{
    return make(e, t, NULL, NULL, params);
}

static srv_job *jobo(srv_entry *e, int t, const char *outs, const char *params)
{
    return make(e, t, NULL, outs, params);
}

static void job_free(srv_job *j)
{
    srv_prep_free(&j->prep);
    oip_request_free(&j->in);
    free(j);
}

/* submit: j arrives and is decoded at once (a good step). */
static void submit(srv_job *j)
{
    srv_seq_arrive(&g_s, &j->st);
    srv_seq_decoded(&g_s, &j->st, 1);
}

/* launch: j leaves its model's queue for a batch (batch.c): bind; a
 * refused bind answers and ends the job there. Returns the bind's status. */
static int launch(srv_job *j)
{
    char err[OIP_ERRMAX];
    int status;
    ck_assert_int_eq(j->queued, 1);
    ck_assert_int_eq(j->st.where, SRV_STEP_ACTIVE);
    status = srv_seq_bind(&j->st, err);
    if (status) {
        j->status = status;
        snprintf(j->msg, sizeof j->msg, "%s", err);
        srv_seq_step_end(&j->st, 0);
    }
    return status;
}

/* end: j's batch is over; ok = it was answered 200. */
static void end(srv_job *j, int ok)
{
    srv_seq_step_end(&j->st, ok);
    j->status = ok ? 200 : 500;
}

/* run: launch, then end (when bound) with ok. Returns the bind's status. */
static int run(srv_job *j, int ok)
{
    int status = launch(j);
    if (!status)
        end(j, ok);
    return status;
}

/* go: a request that runs through at once and succeeds; freed. */
static void go(srv_entry *e, int t, const char *params)
{
    srv_job *j = job(e, t, params);
    submit(j);
    ck_assert_msg(j->status == 0, "%d %s", j->status, j->msg);
    ck_assert_int_eq(run(j, 1), 0);
    job_free(j);
}

/* info: the listing of id; 0 when it is not listed. */
static int info(const char *id, srv_seq_info *out)
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

static int length(const char *id)
{
    srv_seq_info i;
    return info(id, &i) ? i.length : -1;
}

static size_t used(int inst)
{
    return attn_kv_pool_used(g_inst[inst].kv_pool);
}

/* sweep: let seq.c's idle timer fire once (it fires every 10 ms). */
static void sweep(void)
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

static snap take_snap(const char *id, srv_entry *e, int inst)
{
    snap s;
    memset(&s, 0, sizeof s);
    s.listed = info(id, &s.info);
    s.used = used(inst);
    s.refs = g_inst[inst].refs;
    s.stats = e->seq_stats;
    return s;
}

static void assert_same(const snap *a, const snap *b)
{
    ck_assert_int_eq(a->listed, b->listed);
    ck_assert_str_eq(a->info.id, b->info.id);
    ck_assert_str_eq(a->info.model, b->info.model);
    ck_assert_int_eq(a->info.length, b->info.length);
    ck_assert_uint_eq(a->info.bytes, b->info.bytes);
    ck_assert_uint_eq(a->info.idle_ms, b->info.idle_ms);
    ck_assert_str_eq(a->info.map_id, b->info.map_id);
    ck_assert_uint_eq(a->used, b->used);
    ck_assert_int_eq(a->refs, b->refs);
    ck_assert_mem_eq(&a->stats, &b->stats, sizeof a->stats);
}

/* ---- start, steps, end -------------------------------------------------- */

/* A start of 3 tokens, a step of 1 (with attention over 4 keys), a step of
 * 2 that ends it: lengths 3, 4, then gone; pages of 4 tokens are taken at
 * bind and kept between steps; the instance reference is held while live. */
START_TEST(start_step_end)
{
    srv_seq_info i;
    srv_job *a = job(M1, 3, "\"sequence_id\":42,\"sequence_start\":true");
    srv_job *b, *c, *d;
    submit(a);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(a->status, 0);
    ck_assert_int_eq(info("42", NULL), 0); /* not live before it ran */
    ck_assert_int_eq(launch(a), 0);
    ck_assert_uint_eq(used(0), PAGE); /* 3 tokens: one page, at bind */
    ck_assert_int_eq(a->prep.seqs[0].s, 3);
    ck_assert_int_eq(info("42", NULL), 0);
    end(a, 1);
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_int_eq(i.length, 3);
    ck_assert_uint_eq(i.bytes, PAGE);
    ck_assert_str_eq(i.model, "m1");
    ck_assert_str_eq(i.map_id, "");
    ck_assert_uint_eq(i.idle_ms, 0);
    ck_assert_int_eq(g_inst[0].refs, 2);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.live, 1);

    g_now += 25 * MS;
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 25);
    b = jobo(M1, 1, "[{\"name\":\"attention\"}]", "\"sequence_id\":42");
    submit(b);
    ck_assert_int_eq(b->queued, 1);
    ck_assert_int_eq(info("42", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 0); /* a step is on its way */
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(b->st.t0, 3);
    ck_assert_int_eq(b->prep.seqs[0].s, 4);
    ck_assert_int_eq(b->prep.seqs[0].s_valid, 4);
    ck_assert_ptr_nonnull(b->prep.seqs[0].kv);
    ck_assert_int_eq(b->prep.shape[SRV_O_ATT][2], 1); /* [1, 2, 1, 4] */
    ck_assert_int_eq(b->prep.shape[SRV_O_ATT][3], 4);
    ck_assert_ptr_nonnull(b->prep.out[SRV_O_ATT]);
    ck_assert_uint_eq(used(0), PAGE); /* 4 tokens still fit one page */
    end(b, 1);
    ck_assert_int_eq(length("42"), 4);

    c = job(M1, 2, "\"sequence_id\":42,\"sequence_end\":true");
    submit(c);
    ck_assert_int_eq(launch(c), 0);
    ck_assert_uint_eq(used(0), 2 * PAGE); /* 6 tokens: a second page */
    ck_assert_int_eq(c->prep.seqs[0].s, 6);
    end(c, 1);
    ck_assert_int_eq(info("42", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.ended, 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_mem_eq(M1->seq_stats.dropped, (uint64_t[SRV_DROP_N]){0},
                     sizeof M1->seq_stats.dropped);

    /* ended: a step is unknown, and says how to begin again */
    d = job(M1, 1, "\"sequence_id\":42");
    submit(d);
    ck_assert_int_eq(d->queued, 0);
    ck_assert_int_eq(d->status, 400);
    ck_assert_str_eq(d->msg, "parameters.sequence_id: unknown sequence '42' "
                     "(never started, ended, idle past sequence-idle-ms, "
                     "deleted, its model reloaded, or held by another replica "
                     "or a restarted server); send sequence_start: true with "
                     "the whole history to begin it again");
    ck_assert_int_eq(g_n_fail_ends, 1);
    job_free(a), job_free(b), job_free(c), job_free(d);
}
END_TEST

/* A start that is also the end: computed, counted, nothing kept. */
START_TEST(start_and_end_at_once)
{
    go(M1, 5, "\"sequence_id\":\"one\",\"sequence_start\":true,"
              "\"sequence_end\":true");
    ck_assert_int_eq(info("one", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.started, 1);
    ck_assert_int_eq(M1->seq_stats.ended, 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
}
END_TEST

/* The number 7, the string "7" and the Attnd-Sequence-Id header 7 name one
 * sequence; "07", "x7" and 2^64 - 1 are others. */
START_TEST(ids_number_string_header)
{
    srv_job *h;
    go(M1, 2, "\"sequence_id\":7,\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"7\"");
    ck_assert_int_eq(length("7"), 3);
    h = make(M1, 1, "7", NULL, ""); /* only the header */
    ck_assert_str_eq(h->st.id, "7");
    submit(h);
    ck_assert_int_eq(run(h, 1), 0);
    ck_assert_int_eq(length("7"), 4);
    job_free(h);

    go(M1, 1, "\"sequence_id\":\"07\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"x7\",\"sequence_start\":true");
    go(M1, 2, "\"sequence_id\":18446744073709551615,\"sequence_start\":true");
    ck_assert_int_eq(length("7"), 4);
    ck_assert_int_eq(length("07"), 1);
    ck_assert_int_eq(length("x7"), 1);
    ck_assert_int_eq(length("18446744073709551615"), 2);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 4);
    ck_assert_int_eq(M1->seq_stats.live, 4);
}
END_TEST

/* ---- order ------------------------------------------------------------- */

/* Steps leave in arrival order whatever order they finish decoding in: a
 * start, then two steps of its sequence, decoded last-first. The held
 * steps wait; then the start runs alone, the steps one at a time after it,
 * each seeing the tokens of the one before. */
START_TEST(steps_keep_arrival_order)
{
    srv_job *a = job(M1, 3, "\"sequence_id\":5,\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":5");
    srv_job *c = job(M1, 2, "\"sequence_id\":5");
    srv_seq_arrive(&g_s, &a->st);
    srv_seq_arrive(&g_s, &b->st);
    srv_seq_arrive(&g_s, &c->st);
    srv_seq_decoded(&g_s, &c->st, 1);
    srv_seq_decoded(&g_s, &b->st, 1);
    ck_assert_int_eq(c->st.where, SRV_STEP_HELD);
    ck_assert_int_eq(b->st.where, SRV_STEP_HELD);
    ck_assert_int_eq(b->queued + c->queued + b->status + c->status, 0);
    srv_seq_decoded(&g_s, &a->st, 1);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(c->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(b->queued + c->queued + b->status + c->status, 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(b->queued, 1); /* b, not c: it arrived first */
    ck_assert_int_eq(c->queued, 0);
    ck_assert_int_eq(run(b, 1), 0);
    ck_assert_int_eq(b->st.t0, 3);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(c->st.t0, 4);
    ck_assert_int_eq(length("5"), 6);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A step waits for every earlier arrival's decode, a stateless request's
 * too (decoded with take = 0); an arrival that is answered while decoding
 * (deadline, client gone: srv_seq_abandon, or its job ending) no longer
 * holds anyone. Steps of different sequences run side by side. */
START_TEST(held_until_earlier_arrivals_decode)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *y = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *z = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":1,\"sequence_start\":true");
    srv_job *b = job(M1, 2, "\"sequence_id\":2,\"sequence_start\":true");
    srv_job *c = job(M1, 2, "\"sequence_id\":3,\"sequence_start\":true");
    srv_seq_arrive(&g_s, &x->st); /* stand-ins for stateless requests */
    srv_seq_arrive(&g_s, &a->st);
    srv_seq_arrive(&g_s, &y->st);
    srv_seq_arrive(&g_s, &b->st);
    srv_seq_arrive(&g_s, &z->st);
    srv_seq_arrive(&g_s, &c->st);
    srv_seq_decoded(&g_s, &a->st, 1);
    srv_seq_decoded(&g_s, &b->st, 1);
    srv_seq_decoded(&g_s, &c->st, 1);
    ck_assert_int_eq(a->queued + b->queued + c->queued, 0);
    srv_seq_decoded(&g_s, &x->st, 0); /* not a step: a may go */
    ck_assert_int_eq(x->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->queued + c->queued, 0);
    srv_seq_abandon(&g_s, &y->st); /* answered while decoding: b may go */
    ck_assert_int_eq(b->queued, 1);
    ck_assert_int_eq(c->queued, 0);
    srv_seq_abandon(&g_s, &y->st); /* twice is harmless */
    srv_seq_step_end(&z->st, 0);   /* its job ends while decoding */
    ck_assert_int_eq(z->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(c->queued, 1);
    /* three sequences' starts active at once */
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(run(b, 1), 0);
    ck_assert_int_eq(length("1") + length("2") + length("3"), 6);
    ck_assert_int_eq(a->status + b->status + c->status, 600);
    job_free(x), job_free(y), job_free(z);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A step whose job ends while it is held (its client went away) is never
 * routed; one that ends while waiting behind its sequence's active step
 * leaves the queue, and the next one goes in its place. */
START_TEST(steps_that_end_early_leave_no_trace)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":8,\"sequence_start\":true");
    srv_job *h = job(M1, 1, "\"sequence_id\":8");
    srv_job *b, *c;
    srv_seq_arrive(&g_s, &x->st);
    submit(a);
    submit(h);
    ck_assert_int_eq(h->st.where, SRV_STEP_HELD);
    srv_seq_step_end(&h->st, 0);
    ck_assert_int_eq(h->st.where, SRV_STEP_NONE);
    srv_seq_decoded(&g_s, &x->st, 0);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(h->queued + h->status, 0);
    b = job(M1, 1, "\"sequence_id\":8");
    c = job(M1, 3, "\"sequence_id\":8");
    submit(b);
    submit(c);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    srv_seq_step_end(&b->st, 0);
    ck_assert_int_eq(b->st.where, SRV_STEP_NONE);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(b->queued, 0);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(length("8"), 5);
    job_free(a), job_free(b), job_free(c);
    /* two starts of one id: the second's job ends while it waits, the
     * first fails: nothing is left of the id */
    a = job(M1, 2, "\"sequence_id\":9,\"sequence_start\":true");
    b = job(M1, 2, "\"sequence_id\":9,\"sequence_start\":true");
    submit(a);
    submit(b);
    srv_seq_step_end(&b->st, 0);
    ck_assert_int_eq(run(a, 0), 0);
    ck_assert_int_eq(info("9", NULL), 0);
    ck_assert_int_eq(g_n_fail_ends, 0);
    job_free(x), job_free(a), job_free(h), job_free(b);
}
END_TEST

/* ---- failures change nothing ------------------------------------------- */

/* A live, retained sequence of 5 tokens (2 pages). A step of 4 tokens needs
 * a third page: it is reserved at bind, and the step failing gives it back;
 * a step refused at bind (request-memory, kv-bytes) reserves nothing. In
 * every case the sequence is exactly as before (length, bytes, map, time of
 * its last step, pages, references, counters), and the next step works. */
START_TEST(failed_step_changes_nothing)
{
    srv_job *a = job(M1, 5, "\"sequence_id\":\"s\",\"sequence_start\":true,"
                            "\"retain\":true");
    srv_job *b, *c, *d, *f;
    snap before, after;
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_ptr_nonnull(a->prep.out[SRV_O_ATT]); /* retained: the map */
    snprintf(a->st.map_id, sizeof a->st.map_id, "map-s"); /* srv_seq_encode */
    end(a, 1);
    g_now += 7 * MS;
    before = take_snap("s", M1, 0);
    ck_assert_int_eq(before.info.length, 5);
    ck_assert_uint_eq(before.info.bytes, 2 * PAGE);
    ck_assert_str_eq(before.info.map_id, "map-s");
    ck_assert_uint_eq(before.info.idle_ms, 7);

    /* the computation fails after the reservation */
    b = job(M1, 4, "\"sequence_id\":\"s\"");
    submit(b);
    ck_assert_str_eq(b->st.map_id, "map-s"); /* the map it would grow */
    ck_assert_int_eq(launch(b), 0);
    ck_assert_uint_eq(used(0), 3 * PAGE);
    ck_assert_ptr_nonnull(b->prep.out[SRV_O_ATT]);
    b->st.map_id[0] = 0; /* as if its encode had lost the map */
    end(b, 0);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* an end step that fails ends nothing */
    c = job(M1, 1, "\"sequence_id\":\"s\",\"sequence_end\":true");
    submit(c);
    ck_assert_int_eq(run(c, 0), 0);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* refused at bind: its outputs are y (4 x 8 floats, at prepare) and,
     * at bind, attention [1, 2, 4, 9] (288 bytes); request-memory is one
     * byte short of the request with both */
    d = jobo(M1, 4, "[{\"name\":\"y\"},{\"name\":\"attention\"}]",
             "\"sequence_id\":\"s\"");
    ck_assert_uint_eq(d->prep.bytes, 4 * 8 * 4);
    g_s.cfg.request_memory = (long long)(d->in.bytes + d->prep.bytes + 288 - 1);
    submit(d);
    ck_assert_int_eq(launch(d), 413);
    ck_assert_msg(strstr(d->msg, "outputs.attention: this step needs more "
                         "than") && strstr(d->msg, "request-memory"),
                  "%s", d->msg);
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);
    g_s.cfg.request_memory = 1 << 20;

    /* refused at bind: 5 + 28 tokens need 9 pages of a budget of 8 */
    f = job(M1, 28, "\"sequence_id\":\"s\"");
    submit(f);
    ck_assert_int_eq(launch(f), 503);
    ck_assert_str_eq(f->msg, "sequences: the K/V cache of model 'm1' is full "
                     "(256 of 1024 bytes, kv-bytes) and cannot take 28 more "
                     "tokens of sequence 's'; end sequences or retry later");
    after = take_snap("s", M1, 0);
    assert_same(&before, &after);

    /* and it goes on from 5 tokens */
    job_free(b);
    b = job(M1, 2, "\"sequence_id\":\"s\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(b->st.t0, 5);
    ck_assert_int_eq(b->prep.seqs[0].s, 7);
    end(b, 1);
    ck_assert_int_eq(length("s"), 7);
    ck_assert_int_eq(info("s", &after.info), 1);
    ck_assert_str_eq(after.info.map_id, "map-s");
    ck_assert_uint_eq(after.info.idle_ms, 0);
    job_free(a), job_free(b), job_free(c), job_free(d), job_free(f);
}
END_TEST

/* A restart (sequence_start on a live id) that fails, at bind or after,
 * keeps the old sequence whole; one that succeeds replaces it (counted as
 * dropped "restarted" and started again, still one live sequence). */
START_TEST(failed_restart_keeps_the_old_one)
{
    srv_job *a, *b, *c;
    snap before, after;
    go(M1, 6, "\"sequence_id\":\"r\",\"sequence_start\":true");
    before = take_snap("r", M1, 0);
    ck_assert_uint_eq(before.used, 2 * PAGE);

    a = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_int_eq(a->st.t0, 0);           /* its own new cache */
    ck_assert_int_eq(a->prep.seqs[0].s, 2);
    ck_assert_uint_eq(used(0), 3 * PAGE);    /* old 2 + new 1 */
    end(a, 0);
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);

    /* 7 pages for the new one next to the old 2: over 8 */
    b = job(M1, 25, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 503);
    after = take_snap("r", M1, 0);
    assert_same(&before, &after);

    c = job(M1, 2, "\"sequence_id\":\"r\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(length("r"), 2);
    ck_assert_uint_eq(used(0), PAGE);
    ck_assert_int_eq(g_inst[0].refs, 2);
    ck_assert_int_eq(M1->seq_stats.started, 2);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_RESTARTED], 1);
    ck_assert_int_eq(M1->seq_stats.live, 1);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 1);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* A failed start leaves no sequence: a step queued behind it finds none. */
START_TEST(failed_start_then_step_is_unknown)
{
    srv_job *a = job(M1, 2, "\"sequence_id\":\"n\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"n\"");
    submit(a);
    submit(b);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(run(a, 0), 0);
    ck_assert_int_eq(b->queued, 0);
    ck_assert_int_eq(b->status, 400);
    ck_assert_ptr_nonnull(strstr(b->msg, "unknown sequence 'n'"));
    ck_assert_int_eq(info("n", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(M1->seq_stats.started, 0);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    job_free(a), job_free(b);
}
END_TEST

/* ---- limits ------------------------------------------------------------ */

/* max-sequences 2 counts live sequences and starts on their way; a restart
 * of a live one is not a new one; a start refused leaves nothing behind. */
START_TEST(max_sequences)
{
    srv_job *b, *c, *d, *r;
    g_s.cfg.max_sequences = 2;
    go(M1, 1, "\"sequence_id\":\"a\",\"sequence_start\":true");
    b = job(M2, 1, "\"sequence_id\":\"b\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(b->queued, 1); /* starting: counts */
    c = job(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(c->queued, 0);
    ck_assert_int_eq(c->status, 503);
    ck_assert_str_eq(c->msg, "sequences: 2 live or starting (max-sequences 2); "
                     "end some or retry later");
    ck_assert_int_eq(info("c", NULL), 0);
    r = job(M1, 1, "\"sequence_id\":\"a\",\"sequence_start\":true");
    submit(r);
    ck_assert_int_eq(r->queued, 1); /* a restart takes no new place */
    ck_assert_int_eq(run(r, 1), 0);
    ck_assert_int_eq(run(b, 0), 0); /* b fails: its place is free again */
    d = job(M1, 1, "\"sequence_id\":\"d\",\"sequence_start\":true");
    submit(d);
    ck_assert_int_eq(d->queued, 1);
    ck_assert_int_eq(run(d, 1), 0);
    job_free(c);
    c = job(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true");
    submit(c); /* a and d are live */
    ck_assert_int_eq(c->status, 503);
    go(M1, 1, "\"sequence_id\":\"d\",\"sequence_end\":true");
    job_free(c);
    c = job(M1, 1, "\"sequence_id\":\"c\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(c->queued, 1);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 2);

    /* max-sequences 0: no start at all */
    g_s.cfg.max_sequences = 0;
    job_free(d);
    d = job(M2, 1, "\"sequence_id\":\"e\",\"sequence_start\":true");
    submit(d);
    ck_assert_int_eq(d->status, 503);
    ck_assert_str_eq(d->msg, "sequences: 2 live or starting (max-sequences 0); "
                     "end some or retry later");
    job_free(b), job_free(c), job_free(d), job_free(r);
}
END_TEST

/* kv-bytes: a model without a cache refuses starts; a full cache refuses a
 * start that does not fit and keeps the others. */
START_TEST(kv_bytes)
{
    srv_job *a, *b;
    srv_seq_info i;
    M2->inst = &g_inst[3]; /* kv-bytes 0 */
    a = job(M2, 1, "\"sequence_id\":1,\"sequence_start\":true");
    submit(a);
    ck_assert_int_eq(a->status, 400);
    ck_assert_str_eq(a->msg, "sequences: model 'm2' keeps no K/V cache "
                     "(kv-bytes 0)");
    ck_assert_int_eq(info("1", NULL), 0);
    M2->inst = &g_inst[1];

    go(M1, 20, "\"sequence_id\":\"big\",\"sequence_start\":true"); /* 5 pages */
    b = job(M1, 13, "\"sequence_id\":\"more\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 503); /* 4 pages: 9 > 8 */
    ck_assert_str_eq(b->msg, "sequences: the K/V cache of model 'm1' is full "
                     "(640 of 1024 bytes, kv-bytes) and cannot take 13 more "
                     "tokens of sequence 'more'; end sequences or retry later");
    ck_assert_int_eq(info("more", NULL), 0);
    ck_assert_uint_eq(used(0), 5 * PAGE);
    ck_assert_int_eq(info("big", &i), 1);
    ck_assert_int_eq(i.length, 20);
    /* each model's budget is its own: m2 takes 3 pages, m1 fills up */
    go(M2, 12, "\"sequence_id\":\"more\",\"sequence_start\":true");
    go(M1, 12, "\"sequence_id\":\"big2\",\"sequence_start\":true");
    ck_assert_uint_eq(used(0), BUDGET);
    ck_assert_uint_eq(used(1), 3 * PAGE);
    job_free(a), job_free(b);
}
END_TEST

/* ---- wrong model, retain ------------------------------------------------ */

START_TEST(step_on_another_model_or_instance)
{
    srv_job *a, *b, *c;
    go(M1, 2, "\"sequence_id\":\"w\",\"sequence_start\":true");
    a = job(M2, 1, "\"sequence_id\":\"w\"");
    submit(a);
    ck_assert_int_eq(a->status, 400);
    ck_assert_str_eq(a->msg, "parameters.sequence_id: sequence 'w' belongs to "
                     "model 'm1'; send sequence_start: true to begin it on "
                     "'m2'");
    /* a step holding another instance of m1 than the sequence's */
    b = job(M1, 1, "\"sequence_id\":\"w\"");
    b->st.inst = &g_inst[2];
    submit(b);
    ck_assert_int_eq(b->status, 400);
    ck_assert_str_eq(b->msg, "parameters.sequence_id: sequence 'w' belongs to "
                     "model 'm1' as it was before a reload; send "
                     "sequence_start: true to begin it on 'm1'");
    ck_assert_int_eq(length("w"), 2);
    /* a start on m2 moves it there */
    c = job(M2, 3, "\"sequence_id\":\"w\",\"sequence_start\":true");
    submit(c);
    ck_assert_int_eq(run(c, 1), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(g_inst[1].refs, 2);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_uint_eq(used(1), PAGE);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_RESTARTED], 1);
    ck_assert_int_eq(M2->seq_stats.live, 1);
    ck_assert_int_eq(M2->seq_stats.started, 1);
    ck_assert_int_eq(info("w", NULL), 1);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* retain is decided by the start: a retained sequence's steps grow its map
 * (attention allocated even when not asked for); a step asking to retain
 * on a sequence that keeps no map is refused; the map is forgotten with
 * the sequence. */
START_TEST(retain_follows_the_start)
{
    srv_job *a, *b, *c;
    srv_seq_info i;
    go(M1, 2, "\"sequence_id\":\"plain\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"plain\",\"retain\":true");
    submit(a);
    ck_assert_int_eq(a->status, 400);
    ck_assert_str_eq(a->msg, "parameters.retain: sequence 'plain' keeps no map "
                     "(retain is decided by its sequence_start step)");
    b = job(M1, 1, "\"sequence_id\":\"plain\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_ptr_null(b->prep.out[SRV_O_ATT]); /* nobody wants it */
    end(b, 1);

    job_free(a);
    a = job(M1, 2, "\"sequence_id\":\"kept\",\"sequence_start\":true,"
                   "\"retain\":true");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    ck_assert_ptr_nonnull(a->prep.out[SRV_O_ATT]);
    snprintf(a->st.map_id, sizeof a->st.map_id, "map-k");
    end(a, 1);
    c = job(M1, 1, "\"sequence_id\":\"kept\",\"retain\":true");
    submit(c);
    ck_assert_str_eq(c->st.map_id, "map-k");
    ck_assert_int_eq(launch(c), 0);
    ck_assert_ptr_nonnull(c->prep.out[SRV_O_ATT]);
    end(c, 1);
    ck_assert_int_eq(info("kept", &i), 1);
    ck_assert_str_eq(i.map_id, "map-k");
    go(M1, 1, "\"sequence_id\":\"kept\",\"sequence_end\":true");
    ck_assert_int_eq(info("kept", NULL), 0);
    job_free(a), job_free(b), job_free(c);
}
END_TEST

/* ---- drops --------------------------------------------------------------- */

/* DELETE: unknown ids are -1; a live sequence goes at once (counted,
 * logged) unless a bound step of it runs, then when that step ends; a step
 * already on the model queue but not bound finds it gone at bind. */
START_TEST(delete_now_or_after_the_running_step)
{
    char owner[SRV_NAME_MAX];
    srv_job *a, *b;
    ck_assert_int_eq(srv_seq_delete(&g_s, "nope", owner), -1);
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_str_eq(owner, "m1");
    ck_assert_str_eq(g_log, "sequence 'd' of model 'm1' dropped (deleted, 3 "
                     "tokens)");
    ck_assert_int_eq(info("d", NULL), 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), -1);

    /* queued, not bound: dropped now, the step is refused at bind */
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"d\"");
    submit(a);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 2);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(launch(a), 400);
    ck_assert_str_eq(a->msg, "parameters.sequence_id: sequence 'd' was dropped "
                     "(deleted, idle or model unloaded) before this step ran; "
                     "send sequence_start: true with the whole history to "
                     "begin it again");
    ck_assert_int_eq(info("d", NULL), 0);

    /* bound and running: it goes when the step ends, even a good one */
    go(M1, 3, "\"sequence_id\":\"d\",\"sequence_start\":true");
    b = job(M1, 2, "\"sequence_id\":\"d\"");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    ck_assert_int_eq(srv_seq_delete(&g_s, "d", owner), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 2);
    ck_assert_int_eq(info("d", NULL), 0); /* not listed any more */
    ck_assert_uint_eq(used(0), 2 * PAGE); /* its pages are in the plan */
    end(b, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_DELETED], 3);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_str_eq(g_log, "sequence 'd' of model 'm1' dropped (deleted, 5 "
                     "tokens)");
    job_free(a), job_free(b);
}
END_TEST

/* Unload / reload (srv_seq_drop_model) drops the model's sequences, the
 * other model's stay; one whose step is running goes when it ends; one
 * whose step finished on the old instance after a reload goes too. */
START_TEST(unload_and_reload)
{
    srv_job *a, *b;
    go(M1, 1, "\"sequence_id\":\"u1\",\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":\"u2\",\"sequence_start\":true");
    go(M2, 1, "\"sequence_id\":\"v\",\"sequence_start\":true");
    a = job(M1, 1, "\"sequence_id\":\"u2\"");
    submit(a);
    ck_assert_int_eq(launch(a), 0);
    M1->inst = &g_inst[2]; /* reloaded */
    srv_seq_drop_model(M1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 1);
    ck_assert_int_eq(info("u1", NULL), 0);
    ck_assert_int_eq(info("u2", NULL), 0); /* going */
    ck_assert_int_eq(length("v"), 1);
    ck_assert_int_eq(g_inst[0].refs, 2);   /* u2 still holds it */
    end(a, 1);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 2);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(M2->seq_stats.live, 1);

    /* a start running on the old instance when the model is reloaded
     * (without a drop): it ends as the sequence's first step, and goes */
    M1->inst = &g_inst[0];
    b = job(M1, 2, "\"sequence_id\":\"late\",\"sequence_start\":true");
    submit(b);
    ck_assert_int_eq(launch(b), 0);
    M1->inst = &g_inst[2];
    end(b, 1);
    ck_assert_int_eq(info("late", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.started, 3);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_UNLOADED], 3);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_uint_eq(used(0), 0);
    /* the reloaded model takes new sequences */
    go(M1, 2, "\"sequence_id\":\"late\",\"sequence_start\":true");
    ck_assert_int_eq(g_inst[2].refs, 2);
    ck_assert_uint_eq(used(2), PAGE);
    job_free(a), job_free(b);
}
END_TEST

/* Idle: a sequence with no step for sequence-idle-ms (40) is dropped by the
 * sweep, not a moment before; never while a step of it is queued. */
START_TEST(idle_drop)
{
    srv_job *a;
    srv_seq_info i;
    go(M1, 3, "\"sequence_id\":\"i\",\"sequence_start\":true");
    g_now += 39 * MS;
    sweep();
    ck_assert_int_eq(info("i", &i), 1);
    ck_assert_uint_eq(i.idle_ms, 39);
    g_now += 1 * MS;
    sweep();
    ck_assert_int_eq(info("i", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 1);
    ck_assert_int_eq(M1->seq_stats.live, 0);
    ck_assert_uint_eq(used(0), 0);
    ck_assert_int_eq(g_inst[0].refs, 1);
    ck_assert_str_eq(g_log, "sequence 'i' of model 'm1' dropped (idle, 3 "
                     "tokens)");

    /* a step restarts the clock; a queued step holds the sequence */
    go(M1, 3, "\"sequence_id\":\"i\",\"sequence_start\":true");
    g_now += 30 * MS;
    go(M1, 1, "\"sequence_id\":\"i\"");
    g_now += 30 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 4);
    a = job(M1, 1, "\"sequence_id\":\"i\"");
    submit(a);
    g_now += 1000 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 4);
    ck_assert_int_eq(launch(a), 0);
    sweep();
    end(a, 1); /* its end is the last step */
    g_now += 39 * MS;
    sweep();
    ck_assert_int_eq(length("i"), 5);
    g_now += 1 * MS;
    sweep();
    ck_assert_int_eq(info("i", NULL), 0);
    ck_assert_int_eq(M1->seq_stats.dropped[SRV_DROP_IDLE], 2);
    job_free(a);
}
END_TEST

/* Drain timeout (srv_seq_expire): held and waiting steps answer 503; the
 * active one is left to its batch. */
START_TEST(expire_fails_held_and_waiting)
{
    srv_job *x = job(M1, 1, "\"sequence_id\":\"plain\"");
    srv_job *a = job(M1, 2, "\"sequence_id\":\"e\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"e\"");
    srv_job *h = job(M1, 1, "\"sequence_id\":\"f\",\"sequence_start\":true");
    submit(a);
    submit(b);
    srv_seq_arrive(&g_s, &x->st);
    submit(h);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    ck_assert_int_eq(h->st.where, SRV_STEP_HELD);
    srv_seq_expire(&g_s);
    ck_assert_int_eq(b->status, 503);
    ck_assert_str_eq(b->msg, "server: shut down before this request ran");
    ck_assert_int_eq(h->status, 503);
    ck_assert_str_eq(h->msg, "server: shut down before this request ran");
    ck_assert_int_eq(a->status, 0);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(length("e"), 2);
    srv_seq_decoded(&g_s, &x->st, 0);
    ck_assert_int_eq(h->queued, 0);
    job_free(x), job_free(a), job_free(b), job_free(h);
}
END_TEST

/* The batcher's hint (--sequence-wait-us, batch.c): a sequence answered
 * 200 and going on is expected to send its next step soon; it counts in
 * its model's seq_expected until that step arrives, it ends or goes. A
 * step answered while the next one already waits, or a failed one, expects
 * nothing. batch.c forgets every flag at once with a new generation; an
 * old flag then counts no more, and a new one does. */
START_TEST(expected_next_steps)
{
    char owner[SRV_NAME_MAX];
    srv_job *a, *b;
    go(M1, 2, "\"sequence_id\":\"p\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    go(M1, 2, "\"sequence_id\":\"q\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 2);
    a = job(M1, 1, "\"sequence_id\":\"p\"");
    b = job(M1, 1, "\"sequence_id\":\"p\"");
    submit(a);
    ck_assert_int_eq(M1->seq_expected, 1); /* p's step came */
    submit(b);
    ck_assert_int_eq(run(a, 1), 0);
    ck_assert_int_eq(M1->seq_expected, 1); /* its next one is there */
    ck_assert_int_eq(run(b, 0), 0);
    ck_assert_int_eq(M1->seq_expected, 1); /* failed: nothing expected */
    go(M1, 1, "\"sequence_id\":\"p\",\"sequence_end\":true");
    ck_assert_int_eq(M1->seq_expected, 1); /* ended */
    ck_assert_int_eq(srv_seq_delete(&g_s, "q", owner), 0);
    ck_assert_int_eq(M1->seq_expected, 0); /* gone */

    go(M1, 1, "\"sequence_id\":\"r\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    M1->expect_gen++, M1->seq_expected = 0; /* batch.c gives up on them */
    go(M1, 1, "\"sequence_id\":\"s\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1); /* s, of the new generation */
    go(M1, 1, "\"sequence_id\":\"r\""); /* r's old flag is not s's */
    ck_assert_int_eq(M1->seq_expected, 2);
    /* a restart on m2: expected there, no longer on m1 */
    go(M2, 1, "\"sequence_id\":\"r\",\"sequence_start\":true");
    ck_assert_int_eq(M1->seq_expected, 1);
    ck_assert_int_eq(M2->seq_expected, 1);
    /* idle drops forget it too */
    g_now += 40 * MS;
    sweep();
    ck_assert_int_eq(M1->seq_expected, 0);
    ck_assert_int_eq(M2->seq_expected, 0);
    job_free(a), job_free(b);
}
END_TEST

/* srv_seq_list counts every live sequence and fills at most cap. */
START_TEST(list_counts_past_cap)
{
    srv_seq_info i[2];
    go(M1, 1, "\"sequence_id\":1,\"sequence_start\":true");
    go(M1, 1, "\"sequence_id\":2,\"sequence_start\":true");
    go(M2, 1, "\"sequence_id\":3,\"sequence_start\":true");
    memset(i, 0, sizeof i);
    ck_assert_uint_eq(srv_seq_list(&g_s, i, 2), 3);
    ck_assert_int_eq(i[0].length, 1);
    ck_assert_int_eq(i[1].length, 1);
    ck_assert_uint_eq(srv_seq_list(&g_s, NULL, 0), 3);
}
END_TEST

/* The server stops with live sequences, an active (unbound) and a waiting
 * step: srv_seq_free gives every page and reference back (teardown checks)
 * and never touches the steps (freed here first: ASan would see it). */
START_TEST(free_with_everything_live)
{
    srv_job *a = job(M1, 2, "\"sequence_id\":\"z\",\"sequence_start\":true");
    srv_job *b = job(M1, 1, "\"sequence_id\":\"z\"");
    go(M2, 9, "\"sequence_id\":\"y\",\"sequence_start\":true");
    go(M1, 2, "\"sequence_id\":\"z\",\"sequence_start\":true");
    submit(a);
    submit(b);
    ck_assert_int_eq(a->queued, 1);
    ck_assert_int_eq(b->st.where, SRV_STEP_WAITING);
    job_free(a), job_free(b);
}
END_TEST

static Suite *seq_suite(void)
{
    Suite *s = suite_create("seq");
    TCase *tc = tcase_create("seq");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, start_step_end);
    tcase_add_test(tc, start_and_end_at_once);
    tcase_add_test(tc, ids_number_string_header);
    tcase_add_test(tc, steps_keep_arrival_order);
    tcase_add_test(tc, held_until_earlier_arrivals_decode);
    tcase_add_test(tc, steps_that_end_early_leave_no_trace);
    tcase_add_test(tc, failed_step_changes_nothing);
    tcase_add_test(tc, failed_restart_keeps_the_old_one);
    tcase_add_test(tc, failed_start_then_step_is_unknown);
    tcase_add_test(tc, max_sequences);
    tcase_add_test(tc, kv_bytes);
    tcase_add_test(tc, step_on_another_model_or_instance);
    tcase_add_test(tc, retain_follows_the_start);
    tcase_add_test(tc, delete_now_or_after_the_running_step);
    tcase_add_test(tc, unload_and_reload);
    tcase_add_test(tc, idle_drop);
    tcase_add_test(tc, expire_fails_held_and_waiting);
    tcase_add_test(tc, expected_next_steps);
    tcase_add_test(tc, list_counts_past_cap);
    tcase_add_test(tc, free_with_everything_live);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_suite)

/*
 * batch.c - batches, on the loop thread: a model's queue becomes a batch
 * (max_batch sequences, or the oldest waited batch_delay_us; the
 * microsecond timer is a timerfd polled by the loop), the batch's attn_plan
 * runs stage by stage with every tile of a stage on the pool, then the
 * same pool jobs check and encode its requests (or, when small, one pool
 * job does it all), and the loop answers them. The life of one request around it is sched.c's.
 */
#include "server/srv.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "server/infer.h"
#include "server/sched_int.h"
#include "server/seq.h"

typedef struct batch batch;
typedef struct tile_work {
    uv_work_t work;
    batch *b;
    uint64_t t_ran; /* when this job began checking and encoding */
} tile_work;

struct batch {
    srv *s;
    srv_entry *e;
    srv_job **jobs;
    int n_jobs, n_seqs;
    attn_seq *seqs;
    attn_raw *raws;
    attn_plan *plan;
    int stage, n_stages; /* stage n_stages: checking and encoding the jobs */
    size_t n_tiles;
    atomic_size_t next_tile;
    atomic_int next_job; /* the next job to check and encode */
    int outstanding;   /* tile_work items on the pool */
    tile_work *workers; /* (s->threads) */
    int whole;         /* small batch: one work item runs it all */
};

/* ---- batches -------------------------------------------------------------- */

/* finish_jobs: after every stage ran, before the plan is freed, on the
 * batch's pool jobs: each takes jobs in turn, gives one whose sequences
 * came out non-finite (its inputs overflow float32) a 400 instead of
 * meaningless numbers (the other jobs of the batch are not affected), and
 * encodes its answer. Touches only the batch's own jobs. */
static void finish_jobs(batch *b, tile_work *me)
{
    int i, n;
    me->t_ran = srv_now_ns();
    /* (encoding frees a job's prep: the items' offsets were set before) */
    while ((i = atomic_fetch_add(&b->next_job, 1)) < b->n_jobs) {
        srv_job *j = b->jobs[i];
        for (n = 0; n < j->prep.n; n++)
            if (attn_plan_nonfinite(b->plan, j->item0 + n)) {
                j->status = 400;
                snprintf(j->err, sizeof j->err,
                         "inputs: a projection, score or output of sequence "
                         "%d is not finite (the inputs overflow float32); "
                         "scale them down", n);
                break;
            }
        srv__job_encode(j);
    }
}

/* tile_run: one of the batch's pool jobs for its current stage: takes
 * that stage's tiles until none is left; after the last stage, its jobs. */
static void tile_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    size_t i;
    if (b->stage == b->n_stages) {
        finish_jobs(b, w->data);
        return;
    }
    while ((i = atomic_fetch_add(&b->next_tile, 1)) < b->n_tiles)
        attn_plan_run_tile(b->plan, b->stage, i);
}

static void batch_finish(batch *b, int status, const char *msg);
static void tile_done(uv_work_t *w, int status);

static void batch_free(batch *b)
{
    free(b->jobs);
    free(b->seqs);
    free(b->raws);
    free(b->workers);
    free(b);
}

/* whole_run: a small batch on one pool job: every stage in order, then
 * its jobs' checks and encodings. */
static void whole_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    int st;
    for (st = 0; st < b->n_stages; st++) {
        size_t t, n = attn_plan_n_tiles(b->plan, st);
        for (t = 0; t < n; t++)
            attn_plan_run_tile(b->plan, st, t);
    }
    finish_jobs(b, w->data);
}

static void whole_done(uv_work_t *w, int status)
{
    (void)status;
    batch_finish(((tile_work *)w->data)->b, 0, NULL);
}

/* submit_stage: put the next non-empty stage's tiles on the pool, one
 * job per thread up to the number of tiles; after the last stage, jobs
 * that check and encode the batch's requests (on the pool, so a stage's
 * tiles never wait for each other and the loop thread never encodes). */
static void submit_stage(batch *b)
{
    int i, n;
    for (; b->stage < b->n_stages; b->stage++) {
        b->n_tiles = attn_plan_n_tiles(b->plan, b->stage);
        if (b->n_tiles)
            break;
    }
    if (b->stage > b->n_stages) {
        batch_finish(b, 0, NULL);
        return;
    }
    if (b->stage == b->n_stages)
        b->n_tiles = (size_t)b->n_jobs;
    atomic_store(&b->next_tile, 0);
    n = b->n_tiles < (size_t)b->s->threads ? (int)b->n_tiles : b->s->threads;
    b->outstanding = n;
    for (i = 0; i < n; i++) {
        b->workers[i].b = b;
        b->workers[i].work.data = &b->workers[i];
        uv_queue_work(b->s->loop, &b->workers[i].work, tile_run, tile_done);
    }
}

static void tile_done(uv_work_t *w, int status)
{
    batch *b = ((tile_work *)w->data)->b;
    (void)status;
    if (--b->outstanding)
        return;
    b->stage++;
    submit_stage(b);
}

/* batch_finish: the plan ran (status 0) or could not start: hand every job
 * to encoding, or answer it with the error. */
static void batch_finish(batch *b, int status, const char *msg)
{
    srv_entry *e = b->e;
    uint64_t now = 0;
    int i;
    attn_plan_destroy(b->plan);
    e->running--;
    for (i = 0; i < b->s->threads; i++) /* the first job to see it done */
        if (b->workers[i].t_ran && (!now || b->workers[i].t_ran < now))
            now = b->workers[i].t_ran;
    if (!now)
        now = srv_now_ns();
    if (!status) {
        e->last_run_ns = now - b->jobs[0]->t_run;
        srv_stats_batch(&e->stats, b->n_seqs, e->last_run_ns);
    }
    for (i = 0; i < b->n_jobs; i++) { /* computed and encoded, or failed */
        srv_job *j = b->jobs[i];
        j->t_ran = now;
        if (status)
            srv__job_answer(j, status, msg ? msg : "");
        else
            srv__job_answer(j, j->status ? j->status : 200, j->err);
        srv__job_end(j);
    }
    batch_free(b);
    srv__pump(e);
}

/* compatible: may job j share a batch with the head h? */
static int compatible(const srv_job *h, const srv_job *j)
{
    if (h->inst != j->inst)
        return 0;
    if (h->prep.raw)
        return h->prep.cfg.head_dim == j->prep.cfg.head_dim &&
               h->prep.cfg.v_head_dim == j->prep.cfg.v_head_dim;
    return 1;
}

/* launch: take a batch off e's queue (head first, then every compatible
 * job that still fits in max_batch) and start its plan. Returns -1 when
 * out of memory before anything left the queue (nothing changed). */
static int launch(srv_entry *e)
{
    srv *s = e->s;
    srv_job *h = e->qhead, **pp, *failed = NULL;
    batch *b = calloc(1, sizeof *b);
    char err[ATTN_ERRMAX];
    int i, k, rc, max = (int)s->cfg.max_batch;
    uint64_t now = srv_now_ns();
    if (!b)
        goto oom;
    b->s = s;
    b->e = e;
    b->jobs = malloc(sizeof *b->jobs * (size_t)(e->q_seqs < 1 ? 1 : e->q_seqs));
    b->workers = calloc((size_t)s->threads, sizeof *b->workers);
    if (!b->jobs || !b->workers)
        goto oom;
    /* the head always goes, even when larger than max_batch alone */
    for (pp = &e->qhead; *pp;) {
        srv_job *j = *pp;
        if (b->n_jobs && (!compatible(h, j) || b->n_seqs + j->prep.n > max)) {
            pp = &j->next;
            continue;
        }
        srv__job_unqueue(j);
        /* a sequence step takes its pages now; one that cannot leaves */
        if (j->step.is_step && (j->status = srv_seq_bind(&j->step, j->err))) {
            j->next = failed;
            failed = j;
            continue;
        }
        if (!b->n_jobs)
            h = j;
        b->jobs[b->n_jobs++] = j;
        b->n_seqs += j->prep.n;
        j->state = J_RUN;
        j->t_run = now;
        if (b->n_seqs >= max)
            break;
    }
    while (failed) {
        srv_job *j = failed;
        failed = j->next;
        j->next = NULL;
        srv__job_answer(j, j->status, j->err);
        srv__job_end(j);
    }
    if (!b->n_jobs) {
        batch_free(b);
        return 0;
    }
    for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++) {
        b->jobs[i]->batch = b->n_seqs;
        b->jobs[i]->item0 = k;
    }
    if (h->prep.raw) {
        b->raws = malloc(sizeof *b->raws * (size_t)b->n_seqs);
        if (!b->raws)
            goto oom_taken;
        for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++)
            memcpy(b->raws + k, b->jobs[i]->prep.raws,
                   sizeof *b->raws * (size_t)b->jobs[i]->prep.n);
        rc = attn_plan_create_raw(&b->plan, &h->prep.cfg, b->raws, b->n_seqs, err);
    } else {
        b->seqs = malloc(sizeof *b->seqs * (size_t)b->n_seqs);
        if (!b->seqs)
            goto oom_taken;
        for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++)
            memcpy(b->seqs + k, b->jobs[i]->prep.seqs,
                   sizeof *b->seqs * (size_t)b->jobs[i]->prep.n);
        rc = attn_plan_create(&b->plan, model_config(h->inst->m),
                              model_weights(h->inst->m), b->seqs, b->n_seqs, err);
    }
    e->running++;
    if (rc < 0) {
        char msg[ATTN_ERRMAX + 32];
        srv_log(s, "error", "model '%s': plan: %s", e->name, err);
        snprintf(msg, sizeof msg, "engine: %s", err);
        batch_finish(b, rc == ATTN_ENOMEM ? 503 : 400, msg);
        return 0;
    }
    b->n_stages = attn_plan_n_stages(b->plan);
    if (attn_plan_flops(b->plan) < SMALL_BATCH_FLOPS) {
        b->whole = 1;
        b->workers[0].b = b;
        b->workers[0].work.data = &b->workers[0];
        uv_queue_work(s->loop, &b->workers[0].work, whole_run, whole_done);
        return 0;
    }
    submit_stage(b);
    return 0;
oom_taken:
    e->running++;
    batch_finish(b, 503, "server: out of memory");
    return 0;
oom:
    if (b)
        batch_free(b);
    srv_log(s, "error", "model '%s': out of memory forming a batch", e->name);
    return -1;
}

/* The batch delay is timed by a timerfd polled by the loop, because libuv
 * timers count whole milliseconds and batch delays are microseconds. */
static void on_batch_fd(uv_poll_t *p, int status, int events)
{
    srv_entry *e = p->data;
    uint64_t expirations;
    (void)status;
    (void)events;
    if (read(e->batch_fd, &expirations, sizeof expirations) < 0) {
        /* EAGAIN: disarmed or re-armed meanwhile; pump checks anyway */
    }
    srv__pump(e);
}

/* batch_wake: pump e after ns nanoseconds (0: disarm). */
void srv__batch_wake(srv_entry *e, uint64_t ns)
{
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(ns / 1000000000u);
    its.it_value.tv_nsec = (long)(ns % 1000000000u);
    timerfd_settime(e->batch_fd, 0, &its, NULL);
}

int srv_sched_entry_init(srv_entry *e)
{
    e->batch_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (e->batch_fd < 0)
        return -1;
    uv_poll_init(e->s->loop, &e->batch_poll, e->batch_fd);
    e->batch_poll.data = e;
    uv_poll_start(&e->batch_poll, UV_READABLE, on_batch_fd);
    return 0;
}

void srv_sched_entry_free(srv_entry *e)
{
    if (e->batch_fd >= 0)
        close(e->batch_fd);
    e->batch_fd = -1;
}

/* expect_wait: how long the queue head may wait for the sequences answered
 * lately to send their next steps (ns). Decoder clients step in lockstep
 * with their answers: the first of a batch's sequences to come back would
 * otherwise find the model idle and run alone, reading every weight for
 * one row while the others queue behind it. The wait is at most
 * --sequence-wait-us and at most the last batch's run time (so it can
 * cost a step at most that much latency, and nothing when the model is
 * small). */
static uint64_t expect_wait(const srv_entry *e)
{
    uint64_t cap = (uint64_t)e->s->cfg.sequence_wait_us * 1000u;
    if (e->seq_expected <= 0)
        return 0;
    return e->last_run_ns < cap ? e->last_run_ns : cap;
}

/* pump: start batches while e may run more and its queue is ready: full
 * (max_batch sequences), old enough (batch_delay_us, or the wait for
 * expected sequence steps), or draining. */
void srv__pump(srv_entry *e)
{
    srv *s = e->s;
    while (e->qhead && e->running < (int)s->cfg.instances) {
        uint64_t waited = srv_now_ns() - e->qhead->t_queued;
        uint64_t delay = (uint64_t)s->cfg.batch_delay_us * 1000u;
        uint64_t expect = expect_wait(e);
        if (expect > delay)
            delay = expect;
        if (e->q_seqs < (int)s->cfg.max_batch && waited < delay && !s->draining) {
            srv__batch_wake(e, delay - waited);
            return;
        }
        if (expect && waited >= expect) {
            /* the ones still expected did not come in time: stop waiting
             * for them until they are answered again */
            e->expect_gen++;
            e->seq_expected = 0;
        }
        srv__batch_wake(e, 0);
        if (launch(e) < 0) { /* out of memory: retry when a batch ends */
            if (!e->running)
                srv__batch_wake(e, 10000000u);
            return;
        }
    }
}

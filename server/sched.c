/*
 * sched.c - the life of an infer request, on the loop thread.
 *
 *   admit (queue bound, deadline timer) -> decode+check on the pool ->
 *   model queue -> batch (max_batch sequences, or the oldest waited
 *   batch_delay_us) -> the batch's attn_plan, stage by stage: every tile of
 *   a stage goes to the pool, completions are counted here, then the next
 *   stage -> encode on the pool -> answer.
 *
 * Solo: a request that finds its model's queue empty and an instance free
 * (and no batch delay to wait for company) is decoded, computed and encoded
 * by one pool job: one loop <-> pool hand-off instead of two. It holds an
 * instance from admission, so requests arriving meanwhile queue and batch
 * as above; when it turns out too large for one job (SMALL_BATCH_FLOPS) it
 * joins the queue after its decode like any other request.
 *
 * A job is freed when its pipeline is over and its HTTP request is gone or
 * answered; a deadline answers 504 at once and detaches the request, the
 * pipeline then ends on its own (a queued job leaves the queue at once, a
 * running batch is never interrupted: no tile ever waits or is cancelled).
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
#include "server/seq.h"

/* J_HELD: a sequence step waiting for its turn (seq.c's lists). */
enum { J_DECODE, J_HELD, J_QUEUED, J_RUN, J_ENCODE, J_DONE };

struct srv_job {
    srv *s;
    srv_req *req;      /* NULL once answered early or gone */
    srv_entry *e;
    srv_inst *inst;    /* reference held by the job */
    char *body;        /* request body, freed after decode */
    size_t len, header_len;
    size_t mem;        /* bytes it holds of memory-budget (guard.c) */
    int state;
    uv_work_t work;
    uv_timer_t deadline;
    oip_request in;
    srv_prep prep;
    int status;        /* error status from the pool, 0 = fine */
    char err[OIP_ERRMAX];
    char *resp;
    size_t resp_len, resp_hlen;
    int batch;         /* sequences in its batch */
    int solo;          /* 1: decode+compute+encode in one pool job */
    int solo_ran;      /* solo job computed and encoded it */
    char id[64];       /* the request's id for the log (solo_ran) */
    uint64_t t_arrive, t_queued, t_run, t_ran, decode_ns, encode_ns;
    const srv_door *door; /* wire format, NULL = JSON (srv.h) */
    long long deadline_ms;
    int answered;      /* status its request was answered with, 0 = none */
    srv_step step;     /* sequence state (seq.h) */
    srv_job *next;     /* queue link */
};

typedef struct batch batch;
typedef struct tile_work {
    uv_work_t work;
    batch *b;
} tile_work;

struct batch {
    srv *s;
    srv_entry *e;
    srv_job **jobs;
    int n_jobs, n_seqs;
    attn_seq *seqs;
    attn_raw *raws;
    attn_plan *plan;
    int stage, n_stages;
    size_t n_tiles;
    atomic_size_t next_tile;
    int outstanding;   /* tile_work items on the pool */
    tile_work *workers; /* (s->threads) */
    int whole;         /* small batch: one work item runs it all + encodes */
    uint64_t t_ran;    /* compute end (whole batches) */
};

/* Below this many flops (attn_plan_flops) a batch runs as one pool work
 * item (all stages, then the encoding of its requests): spreading a small
 * batch over the pool, stage by stage through the loop thread, costs more
 * hand-offs than it saves (demo T=16 is 0.6 MFLOP). */
#define SMALL_BATCH_FLOPS 8e6

/* A solo job's body is at most this long: a longer one would hold an
 * instance through a long decode. */
#define SOLO_BODY_BYTES (64u << 10)

static void pump(srv_entry *e);
static void job_end(srv_job *j);

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- answering and ending ------------------------------------------------ */

/* answer: give the job's request its answer and detach it. */
static void answer(srv_job *j, int status, const char *msg)
{
    srv_req *r = j->req;
    srv_stats *st = &j->e->stats;
    uint64_t dt = srv_now_ns() - j->t_arrive;
    if (!r)
        return;
    j->answered = status;
    r->job = NULL;
    j->req = NULL;
    r->batch = j->batch;
    if (j->t_run)
        r->queue_us = (j->t_run - j->t_queued) / 1000;
    else if (j->t_queued) /* still queued (deadline, drain timeout) */
        r->queue_us = (srv_now_ns() - j->t_queued) / 1000;
    if (j->t_ran)
        r->compute_us = (j->t_ran - j->t_run) / 1000;
    if (status == 200) {
        r->resp_header_len = j->resp_hlen;
        srv_respond(r, 200, j->resp_hlen ? "application/octet-stream"
                                         : "application/json",
                    j->resp, j->resp_len);
        j->resp = NULL;
        st->success++;
        st->success_ns += dt;
        st->queue_ns += j->t_run - j->t_queued;
        st->input_ns += j->decode_ns;
        st->output_ns += j->encode_ns;
        st->last_inference_ms = wall_ms();
        return;
    }
    srv_respond_error(r, status, "%s", msg);
    st->fail_ns += dt;
    if (status == 400 || status == 413)
        st->fail_bad++;
    else if (status == 503)
        st->fail_rejected++;
    else if (status == 504)
        st->fail_timeout++;
    else
        st->fail_other++;
}

static void job_closed(uv_handle_t *h)
{
    srv_job *j = h->data;
    srv *s = j->s;
    free(j);
    s->live_jobs--;
    srv_check_stop(s);
}

/* job_end: the pipeline is over. Loop thread. */
static void job_end(srv_job *j)
{
    srv_entry *e = j->e;
    if (j->req)
        answer(j, 500, "internal: request ended without an answer");
    srv_seq_step_end(&j->step, j->answered == 200);
    j->state = J_DONE;
    e->pending--;
    srv_inst_unref(j->inst);
    oip_request_free(&j->in);
    srv_prep_free(&j->prep);
    free(j->body);
    free(j->resp);
    srv_mem_give(j->s, j->mem);
    j->mem = 0;
    uv_timer_stop(&j->deadline);
    uv_close((uv_handle_t *)&j->deadline, job_closed);
}

/* unqueue: take queued job j out of its model's queue. Loop thread. */
static void unqueue(srv_job *j)
{
    srv_entry *e = j->e;
    srv_job **pp, *prev = NULL;
    for (pp = &e->qhead; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            if (e->qtail == j)
                e->qtail = prev;
            break;
        }
    e->q_seqs -= j->prep.n;
    j->next = NULL;
}

static void on_deadline(uv_timer_t *t)
{
    srv_job *j = t->data;
    char msg[160];
    snprintf(msg, sizeof msg, "deadline: no answer within %lld ms (%s)",
             j->deadline_ms, j->deadline_ms < j->s->cfg.deadline_ms
                                 ? "the client's deadline" : "deadline-ms");
    answer(j, 504, msg);
    if (j->state == J_QUEUED) {
        unqueue(j);
        job_end(j);
    } else if (j->state == J_HELD) {
        job_end(j);
    } else if (j->state == J_DECODE) { /* later steps need not wait for it */
        srv_seq_abandon(j->s, &j->step);
    }
}

/* srv_sched_detach: r is being freed while its job runs (the connection
 * went away): the job finishes without it. */
void srv_sched_detach(srv_req *r)
{
    srv_job *j = r->job;
    r->job = NULL;
    j->req = NULL;
    if (j->state == J_QUEUED) {
        unqueue(j);
        job_end(j);
    } else if (j->state == J_HELD) {
        job_end(j);
    } else if (j->state == J_DECODE) {
        srv_seq_abandon(j->s, &j->step);
    }
}

/* ---- encode --------------------------------------------------------------- */

/* encode_job: the response of a computed job, unless check_finite already
 * turned it into a 400. Pool thread. */
static void encode_job(srv_job *j)
{
    uint64_t t0 = srv_now_ns();
    if (!j->status && j->step.is_step)
        j->status = srv_seq_encode(&j->step, j->e->name, j->s->maps,
                                   j->door ? j->door->encode : NULL, &j->resp,
                                   &j->resp_len, &j->resp_hlen, j->err);
    else if (!j->status)
        j->status = srv_infer_encode(&j->prep, &j->in, j->e->name, j->s->maps,
                                     j->door ? j->door->encode : NULL,
                                     &j->resp, &j->resp_len, &j->resp_hlen,
                                     j->err);
    srv_prep_free(&j->prep);
    oip_request_free(&j->in);
    j->encode_ns = srv_now_ns() - t0;
}

static void encode_work(uv_work_t *w) { encode_job(w->data); }

static void encode_done(uv_work_t *w, int status)
{
    srv_job *j = w->data;
    (void)status;
    answer(j, j->status ? j->status : 200, j->err);
    job_end(j);
}

/* ---- batches -------------------------------------------------------------- */

/* check_finite: after the plan ran, before it is freed: a job one of whose
 * sequences came out non-finite (its inputs overflow float32) gets a 400
 * instead of meaningless numbers; the other jobs of the batch are not
 * affected. Whichever thread owns the finished batch. */
static void check_finite(batch *b)
{
    int i, k, n;
    for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++)
        for (n = 0; n < b->jobs[i]->prep.n; n++)
            if (attn_plan_nonfinite(b->plan, k + n)) {
                srv_job *j = b->jobs[i];
                j->status = 400;
                snprintf(j->err, sizeof j->err,
                         "inputs: a projection, score or output of sequence "
                         "%d is not finite (the inputs overflow float32); "
                         "scale them down", n);
                break;
            }
}

static void tile_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    size_t i;
    while ((i = atomic_fetch_add(&b->next_tile, 1)) < b->n_tiles)
        attn_plan_run_tile(b->plan, b->stage, i);
}

static void batch_finish(batch *b, int status, const char *msg);
static void tile_done(uv_work_t *w, int status);

/* whole_run: a small batch on one pool thread: every stage in order, then
 * each request's encoding. Touches only the batch's own jobs. */
static void whole_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    int st, i;
    for (st = 0; st < b->n_stages; st++) {
        size_t t, n = attn_plan_n_tiles(b->plan, st);
        for (t = 0; t < n; t++)
            attn_plan_run_tile(b->plan, st, t);
    }
    b->t_ran = srv_now_ns();
    check_finite(b);
    for (i = 0; i < b->n_jobs; i++)
        encode_job(b->jobs[i]);
}

static void whole_done(uv_work_t *w, int status)
{
    (void)status;
    batch_finish(((tile_work *)w->data)->b, 0, NULL);
}

/* submit_stage: put the next non-empty stage's tiles on the pool, or
 * finish the batch when there is none. */
static void submit_stage(batch *b)
{
    int i, n;
    for (; b->stage < b->n_stages; b->stage++) {
        b->n_tiles = attn_plan_n_tiles(b->plan, b->stage);
        if (b->n_tiles)
            break;
    }
    if (b->stage >= b->n_stages) {
        batch_finish(b, 0, NULL);
        return;
    }
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
    uint64_t now = srv_now_ns();
    int i;
    if (!status && !b->whole)
        check_finite(b);
    attn_plan_destroy(b->plan);
    e->running--;
    if (b->whole)
        now = b->t_ran;
    if (!status)
        srv_stats_batch(&e->stats, b->n_seqs, now - b->jobs[0]->t_run);
    for (i = 0; i < b->n_jobs; i++) {
        srv_job *j = b->jobs[i];
        j->t_ran = now;
        if (b->whole && !status) { /* computed and encoded already */
            answer(j, j->status ? j->status : 200, j->err);
            job_end(j);
            continue;
        }
        if (status || !j->req) {
            answer(j, status ? status : 500, msg ? msg : "");
            job_end(j);
            continue;
        }
        j->state = J_ENCODE;
        j->work.data = j;
        uv_queue_work(b->s->loop, &j->work, encode_work, encode_done);
    }
    free(b->jobs);
    free(b->seqs);
    free(b->raws);
    free(b->workers);
    free(b);
    pump(e);
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
        unqueue(j);
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
        answer(j, j->status, j->err);
        job_end(j);
    }
    if (!b->n_jobs) {
        free(b->jobs);
        free(b->workers);
        free(b);
        return 0;
    }
    for (i = 0; i < b->n_jobs; i++)
        b->jobs[i]->batch = b->n_seqs;
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
    if (b) {
        free(b->jobs);
        free(b->workers);
        free(b);
    }
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
    pump(e);
}

/* batch_wake: pump e after ns nanoseconds (0: disarm). */
static void batch_wake(srv_entry *e, uint64_t ns)
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

/* pump: start batches while e may run more and its queue is ready: full
 * (max_batch sequences), old enough (batch_delay_us), or draining. */
static void pump(srv_entry *e)
{
    srv *s = e->s;
    while (e->qhead && e->running < (int)s->cfg.instances) {
        uint64_t waited = srv_now_ns() - e->qhead->t_queued;
        uint64_t delay = (uint64_t)s->cfg.batch_delay_us * 1000u;
        if (e->q_seqs < (int)s->cfg.max_batch && waited < delay && !s->draining) {
            batch_wake(e, delay - waited);
            return;
        }
        batch_wake(e, 0);
        if (launch(e) < 0) { /* out of memory: retry when a batch ends */
            if (!e->running)
                batch_wake(e, 10000000u);
            return;
        }
    }
}

/* ---- admission and decode ------------------------------------------------- */

/* decode_work: pool thread. Decodes the body (then frees it) and checks
 * and lays out the request for its model; sets j->status on failure. */
static void decode_work(uv_work_t *w)
{
    srv_job *j = w->data;
    srv *s = j->s;
    uint64_t t0 = srv_now_ns();
    srv_infer_limits lim = {(size_t)s->cfg.request_memory, s->cfg.max_tokens,
                            s->maps};
    int rc = (j->door ? j->door->decode : oip_decode)(
        &j->in, j->body, j->len, j->header_len, &s->limits, j->err);
    free(j->body);
    j->body = NULL;
    if (rc < 0) {
        j->status = rc == ATTN_ENOMEM ? 503 : 400;
    } else if (srv_seq_wants(&j->step, &j->in)) {
        j->status = srv_seq_prepare(&j->step, &j->prep, &j->in, j->e->name,
                                    j->inst->builtin ? NULL : model_config(j->inst->m),
                                    j->inst->builtin ? 0 : model_causal(j->inst->m),
                                    j->inst->builtin, &lim, j->err);
        if (j->status)
            srv_prep_free(&j->prep);
    } else if (j->inst->builtin) {
        j->status = srv_infer_prepare(&j->prep, &j->in, j->e->name, NULL, 0, 1,
                                      &lim, j->err);
    } else {
        j->status = srv_infer_prepare(&j->prep, &j->in, j->e->name,
                                      model_config(j->inst->m),
                                      model_causal(j->inst->m), 0, &lim, j->err);
    }
    j->decode_ns = srv_now_ns() - t0;
}

/* decode_done: loop thread. Answers a failed or abandoned request and
 * ends its job; otherwise appends it to the model's queue and pumps. */
static void decode_done(uv_work_t *w, int status)
{
    srv_job *j = w->data;
    srv_entry *e = j->e;
    int take = !j->status && j->req && j->step.is_step;
    (void)status;
    if (j->req && j->in.id)
        snprintf(j->req->id, sizeof j->req->id, "%s", j->in.id);
    if (take) { /* a sequence step: seq.c queues it in its turn */
        j->state = J_HELD;
        srv_seq_decoded(j->s, &j->step, 1);
        return;
    }
    srv_seq_decoded(j->s, &j->step, 0);
    if (j->status || !j->req) {
        answer(j, j->status ? j->status : 500, j->err);
        job_end(j);
        return;
    }
    /* the body is gone: the decoded request and its outputs are held now */
    srv_mem_give(j->s, j->mem);
    j->mem = 0;
    if (srv_mem_take(j->s, j->in.bytes + j->prep.bytes) < 0) {
        snprintf(j->err, sizeof j->err, "server: the memory for decoded "
                 "requests (%lld bytes, memory-budget) is in use; retry shortly",
                 j->s->cfg.memory_budget);
        answer(j, 503, j->err);
        job_end(j);
        return;
    }
    j->mem = j->in.bytes + j->prep.bytes;
    j->state = J_QUEUED;
    j->t_queued = srv_now_ns();
    if (e->qtail)
        e->qtail->next = j;
    else
        e->qhead = j;
    e->qtail = j;
    e->q_seqs += j->prep.n;
    pump(e);
}

/* solo_work: pool thread. decode_work, then, when the request is small
 * enough for one job, its plan, every stage, the finite check and the
 * encoding, all on this thread (j->solo_ran). */
static void solo_work(uv_work_t *w)
{
    srv_job *j = w->data;
    attn_plan *plan = NULL;
    char err[ATTN_ERRMAX];
    int rc, st, n;
    decode_work(w);
    if (j->status || j->step.is_step) /* a step takes its turn (seq.c) */
        return;
    if (j->prep.raw)
        rc = attn_plan_create_raw(&plan, &j->prep.cfg, j->prep.raws, j->prep.n, err);
    else
        rc = attn_plan_create(&plan, model_config(j->inst->m),
                              model_weights(j->inst->m), j->prep.seqs, j->prep.n, err);
    if (rc < 0) /* the batch path reports it */
        return;
    if (attn_plan_flops(plan) >= SMALL_BATCH_FLOPS) {
        attn_plan_destroy(plan);
        return;
    }
    j->t_queued = j->t_run = srv_now_ns();
    for (st = 0; st < attn_plan_n_stages(plan); st++) {
        size_t t, nt = attn_plan_n_tiles(plan, st);
        for (t = 0; t < nt; t++)
            attn_plan_run_tile(plan, st, t);
    }
    j->t_ran = srv_now_ns();
    for (n = 0; n < j->prep.n; n++)
        if (attn_plan_nonfinite(plan, n)) {
            j->status = 400;
            snprintf(j->err, sizeof j->err,
                     "inputs: a projection, score or output of sequence %d is "
                     "not finite (the inputs overflow float32); scale them down",
                     n);
            break;
        }
    attn_plan_destroy(plan);
    j->batch = j->prep.n;
    if (j->in.id) /* the log's copy: encoding frees the request */
        snprintf(j->id, sizeof j->id, "%s", j->in.id);
    encode_job(j);
    j->solo_ran = 1;
}

/* solo_done: loop thread. Gives the instance back; a computed job is
 * answered, a failed or abandoned one too, and one too large for a solo
 * run joins the queue as decode_done does. */
static void solo_done(uv_work_t *w, int status)
{
    srv_job *j = w->data;
    srv_entry *e = j->e;
    e->running--;
    if (j->solo_ran) {
        srv_stats_batch(&e->stats, j->batch, j->t_ran - j->t_run);
        if (j->req)
            memcpy(j->req->id, j->id, sizeof j->id);
        answer(j, j->status ? j->status : 200, j->err);
        job_end(j);
        pump(e);
        return;
    }
    decode_done(w, status);
    pump(e); /* the instance it held is free (decode_done pumps only when
                it queued) */
}

/* solo_ok: may a job of len body bytes for e run solo? Loop thread. */
static int solo_ok(const srv_entry *e, size_t len)
{
    const srv *s = e->s;
    return !e->qhead && e->running < (int)s->cfg.instances &&
           s->cfg.batch_delay_us == 0 && len <= SOLO_BODY_BYTES;
}

/* srv_h_infer: POST /v2/models/{m}/infer. Admits the request (or answers
 * 404/503 at once), then decodes it on the pool. */
void srv_h_infer(srv_req *r)
{
    srv *s = r->s;
    srv_entry *e = srv_registry_find(s, r->arg[0]);
    srv_job *j;
    const char *hdr_id = r->conn ? MHD_lookup_connection_value(
                                       r->conn, MHD_HEADER_KIND, "Attnd-Sequence-Id")
                                 : NULL;
    snprintf(r->model, sizeof r->model, "%.128s", r->arg[0]);
    if (hdr_id && !oip_sequence_id_valid(hdr_id, strlen(hdr_id))) {
        srv_respond_error(r, 400, "Attnd-Sequence-Id: '%.200s' is not a "
                          "sequence id (1 to %d bytes of printable ASCII "
                          "other than space, '/', '\"' and '\\')", hdr_id,
                          OIP_MAX_SEQ_ID - 1);
        return;
    }
    if (e && !e->inst && e->state == SRV_LOADING) {
        srv_respond_error(r, 503, "model '%s': still loading; retry shortly",
                          r->arg[0]);
        return;
    }
    if (!e || !e->inst) {
        srv_respond_error(r, 404, "model '%s': %s", r->arg[0],
                          !e ? "not found" : "not loaded");
        return;
    }
    if (s->draining && r->late) { /* begun before the signal: served */
        srv_respond_error(r, 503, "server: draining (shutting down); retry "
                                  "on another replica");
        e->stats.fail_rejected++;
        return;
    }
    if (e->pending >= (int)s->cfg.queue_size) {
        srv_respond_error(r, 503, "queue: model '%s' has %d requests waiting "
                          "(queue-size); retry later", e->name, e->pending);
        e->stats.fail_rejected++;
        return;
    }
    j = calloc(1, sizeof *j);
    if (!j) {
        srv_respond_error(r, 503, "server: out of memory");
        return;
    }
    j->s = s;
    j->req = r;
    j->e = e;
    j->inst = e->inst;
    j->inst->refs++;
    j->body = r->body;
    j->len = r->body_len;
    j->header_len = r->header_len;
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    j->mem = r->mem; /* the body's reservation goes with it */
    r->mem = 0;
    j->t_arrive = r->t0_ns;
    j->door = r->door;
    j->deadline_ms = r->deadline_ms && r->deadline_ms < s->cfg.deadline_ms
                         ? r->deadline_ms : s->cfg.deadline_ms;
    j->state = J_DECODE;
    j->solo = solo_ok(e, j->len);
    r->job = j;
    e->pending++;
    s->live_jobs++;
    uv_timer_init(s->loop, &j->deadline);
    j->deadline.data = j;
    uv_timer_start(&j->deadline, on_deadline, (uint64_t)j->deadline_ms, 0);
    j->step.job = j;
    j->step.e = e;
    j->step.inst = j->inst;
    j->step.prep = &j->prep;
    j->step.in = &j->in;
    snprintf(j->step.hdr_id, sizeof j->step.hdr_id, "%s", hdr_id ? hdr_id : "");
    srv_seq_arrive(s, &j->step);
    srv_suspend(r);
    j->work.data = j;
    if (j->solo) {
        e->running++;
        uv_queue_work(s->loop, &j->work, solo_work, solo_done);
        return;
    }
    uv_queue_work(s->loop, &j->work, decode_work, decode_done);
}

/* srv__sched_queue: a sequence step's turn: onto its model's queue; the
 * model is pumped from the loop soon (never inside the caller, which may
 * be forming or finishing a batch). */
void srv__sched_queue(srv_job *j)
{
    srv_entry *e = j->e;
    j->state = J_QUEUED;
    j->t_queued = srv_now_ns();
    j->next = NULL;
    if (e->qtail)
        e->qtail->next = j;
    else
        e->qhead = j;
    e->qtail = j;
    e->q_seqs += j->prep.n;
    batch_wake(e, 1);
}

/* srv__sched_fail: a sequence step that cannot run answers status now. */
void srv__sched_fail(srv_job *j, int status, const char *msg)
{
    answer(j, status, msg);
    job_end(j);
}

/* ---- shutdown ------------------------------------------------------------- */

/* srv_sched_drain: SIGTERM: what is queued runs now, without batch delay. */
void srv_sched_drain(srv *s)
{
    srv_entry *e;
    for (e = s->models; e; e = e->next)
        pump(e);
}

/* srv_sched_expire: the drain timeout passed: every request still waiting
 * gets 503 now; running batches finish unobserved. */
void srv_sched_expire(srv *s)
{
    srv_entry *e;
    srv_seq_expire(s);
    for (e = s->models; e; e = e->next)
        while (e->qhead) {
            srv_job *j = e->qhead;
            unqueue(j);
            answer(j, 503, "server: shut down before this request ran");
            job_end(j);
        }
}

int srv_sched_idle(const srv *s) { return s->live_jobs == 0; }

/*
 * batch.c - batches, on the loop thread: a model's queue becomes a batch
 * (max_batch sequences, or the oldest waited batch_delay_us; the
 * microsecond timer is a timerfd polled by the loop), the batch's attn_plan
 * runs stage by stage with every tile of a stage on the pool, then the
 * same pool jobs check and encode its requests (or, when small, one pool
 * job does it all), and the loop answers them. The life of one request
 * around it is sched.c's.
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
    int busy; /* loop: queued or running */
} tile_work;

struct batch {
    srv *s;
    srv_entry *e;
    srv_job **jobs;
    int n_jobs, n_seqs;
    attn_seq *seqs;
    attn_raw *raws;
    attn_plan *plan;
    int n_stages;
    /* the phase being run: a stage, n_stages (checking and encoding the
     * jobs) or n_stages + 1 (done); per phase, the next tile (or job) to
     * take and the number finished (n_stages + 1 of each) */
    atomic_int cur;
    atomic_size_t *next, *done;
    atomic_int want;     /* a new phase began: the loop adds pool jobs */
    atomic_int dead;     /* no job left to answer: skip the rest (loop sets) */
    atomic_int skipped;  /* a tile was skipped for it (pool sets) */
    uint64_t t_ran;      /* the plan's end (written once, by a pool job) */
    int outstanding;     /* loop: tile_work items queued or running */
    tile_work *workers;  /* (s->threads) */
    batch *next_running; /* loop: e's staged batches (e->staged) */
};

/* ---- batches -------------------------------------------------------------- */

void srv__job_nonfinite(srv_job *j, int n)
{
    const attn_kv *kv = j->prep.seqs ? j->prep.seqs[n].kv : NULL;
    attn_kv_dtype dt = kv ? attn_kv_pool_dtype(kv->pool) : ATTN_KV_F32;
    const char *why =
        dt == ATTN_KV_F16
            ? ": a key or value of 65520 or more, which FP16 rounds to "
              "infinity (its largest is 65504; the K/V cache is FP16: "
              "--kv-dtype f16), or inputs that overflow float32"
        : dt == ATTN_KV_BF16
            ? ": a key or value of 3.3962e38 or more, which BF16 rounds to "
              "infinity (its largest is 3.3895e38; the K/V cache is BF16: "
              "--kv-dtype bf16), or inputs that overflow float32"
            : " (the inputs overflow float32)";
    j->status = 400;
    /* a raw request's own scale may be what overflowed its scores */
    snprintf(j->err, sizeof j->err,
             "inputs: a projection, score or output of sequence %d is not "
             "finite%s; scale them down%s", n, why,
             j->prep.raw && j->prep.cfg.scale > 0 ? ", or parameters.scale"
                                                   : "");
}

/* finish_job: after every stage ran, before the plan is freed, on a pool
 * job: gives job i a 400 when one of its sequences came out non-finite
 * (its inputs overflow float32; the other jobs of the batch are not
 * affected) instead of meaningless numbers, and encodes its answer. */
static void finish_job(batch *b, int i)
{
    srv_job *j = b->jobs[i];
    if (atomic_load_explicit(&b->dead, memory_order_relaxed))
        return; /* answered already (504) or gone: nothing to encode */
    /* (encoding frees a job's prep: the items' offsets were set before) */
    for (int n = 0; n < j->prep.n; n++)
        if (attn_plan_nonfinite(b->plan, j->item0 + n)) {
            srv__job_nonfinite(j, n);
            break;
        }
    srv__job_encode(j);
}

/* The tiles (or, for the last phase, jobs) of phase ph. */
static size_t phase_size(const batch *b, int ph)
{
    return ph < b->n_stages ? attn_plan_n_tiles(b->plan, ph) : (size_t)b->n_jobs;
}

/* The first phase from ph on with something to do (stages may be empty;
 * the jobs' phase, n_stages, never is). */
static int first_phase(const batch *b, int ph)
{
    while (ph < b->n_stages && !phase_size(b, ph))
        ph++;
    return ph;
}

/* linger: a pool job found no tile left in phase ph while others run its
 * last ones. Rather than end and be queued again through the loop when
 * the next phase starts (a thread woken on an idle virtual CPU started up
 * to 1.8 ms late here, against tiles of ~0.4 ms), it watches for the next
 * phase for at most --pool-spin-us. Returns 1 when that phase began. It
 * waits for no job that has not started (those running the last tiles
 * are running), and gives up on its own. */
static int linger(batch *b, int ph)
{
    uint64_t end = srv_now_ns() + (uint64_t)b->s->cfg.pool_spin_us * 1000u;
    while (atomic_load(&b->cur) == ph) {
        srv_spin_pause();
        if (srv_now_ns() >= end)
            return atomic_load(&b->cur) != ph;
    }
    return 1;
}

/* tile_run: one of the batch's pool jobs. Takes the tiles of the current
 * stage (after the last, the jobs to check and encode) until none is left.
 * The job that finishes a phase's last one starts the next phase itself
 * and asks the loop for more pool jobs to join it; one that finds nothing
 * left while others still run the last ones lingers for the next phase
 * (at most --pool-spin-us), then ends. Only the start of a phase's extra
 * jobs goes through the loop. */
static void tile_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    int ph;
    srv_pool_thread_enter(b->s, "running a batch", b->e->name);
    while ((ph = atomic_load(&b->cur)) <= b->n_stages) {
        size_t i, n = phase_size(b, ph);
        int moved = 0;
        while (!moved && (i = atomic_fetch_add(&b->next[ph], 1)) < n) {
            if (ph < b->n_stages) {
                if (!atomic_load_explicit(&b->dead, memory_order_relaxed))
                    attn_plan_run_tile(b->plan, ph, i);
                else
                    atomic_store_explicit(&b->skipped, 1, memory_order_relaxed);
            } else
                finish_job(b, (int)i);
            if (atomic_fetch_add(&b->done[ph], 1) + 1 < n)
                continue;
            int nx = first_phase(b, ph + 1); /* this was the last */
            if (nx == b->n_stages)
                b->t_ran = srv_now_ns();
            atomic_store(&b->cur, nx);
            if (nx <= b->n_stages) {
                atomic_store(&b->want, 1);
                uv_async_send(&b->e->helpers);
            }
            moved = 1;
        }
        if (!moved && !linger(b, ph))
            return; /* the jobs running this phase's last ones go on */
    }
}

static void batch_finish(batch *b, int status, const char *msg);
static void tile_done(uv_work_t *w, int status);

static void batch_free(batch *b)
{
    free(b->next);
    free(b->done);
    free(b->jobs);
    free(b->seqs);
    free(b->raws);
    free(b->workers);
    free(b);
}

/* run_whole: every stage of b in order, then its jobs' checks and
 * encodings, on this thread. */
static void run_whole(batch *b)
{
    int st, i;
    for (st = 0; st < b->n_stages; st++) {
        size_t t, n = attn_plan_n_tiles(b->plan, st);
        for (t = 0; t < n; t++)
            attn_plan_run_tile(b->plan, st, t);
    }
    b->t_ran = srv_now_ns();
    for (i = 0; i < b->n_jobs; i++)
        finish_job(b, i);
}

/* whole_run: a small batch on one pool job. */
static void whole_run(uv_work_t *w)
{
    batch *b = ((tile_work *)w->data)->b;
    srv_pool_thread_enter(b->s, "running a batch", b->e->name);
    run_whole(b);
}

static void whole_done(uv_work_t *w, int status)
{
    batch *b = ((tile_work *)w->data)->b;
    (void)status;
    srv_pool_done(b->s);
    batch_finish(b, 0, NULL);
}

/* add_workers: pool jobs for b's current phase, one per idle slot up to
 * the tiles (or jobs) not yet taken. Loop thread. */
static void add_workers(batch *b)
{
    int ph = atomic_load(&b->cur), i;
    if (ph > b->n_stages)
        return;
    size_t n = phase_size(b, ph), taken = atomic_load(&b->next[ph]);
    size_t left = taken < n ? n - taken : 0;
    for (i = 0; i < b->s->threads && left; i++) {
        tile_work *tw = &b->workers[i];
        if (tw->busy)
            continue;
        tw->busy = 1;
        tw->b = b;
        tw->work.data = tw;
        b->outstanding++;
        left--;
        srv_pool_queue(b->s, &tw->work, tile_run, tile_done);
    }
}

/* batch_helpers: e->helpers: a pool job began a new phase of one of e's
 * staged batches; others may join it. Loop thread. */
static void batch_helpers(uv_async_t *h)
{
    srv_entry *e = h->data;
    for (batch *b = e->staged; b; b = b->next_running)
        if (atomic_exchange(&b->want, 0))
            add_workers(b);
}

static void tile_done(uv_work_t *w, int status)
{
    tile_work *tw = w->data;
    batch *b = tw->b;
    (void)status;
    srv_pool_done(b->s);
    tw->busy = 0;
    if (--b->outstanding)
        return;
    /* the last pool job ends only when every phase is done: the job that
     * finishes a phase's last tile goes on to the next */
    batch_finish(b, 0, NULL);
}

/* batch_finish: the plan ran (status 0) or could not start: hand every job
 * to encoding, or answer it with the error. */
static void batch_finish(batch *b, int status, const char *msg)
{
    srv_entry *e = b->e;
    uint64_t now = b->t_ran ? b->t_ran : srv_now_ns();
    int i;
    for (batch **pp = &e->staged; *pp; pp = &(*pp)->next_running)
        if (*pp == b) {
            *pp = b->next_running;
            break;
        }
    attn_plan_destroy(b->plan);
    e->running--;
    if (atomic_load(&b->skipped)) {
        e->stats.abandoned++; /* not computed: no execution, no inference */
    } else if (!status) {
        int ok = 0;
        for (i = 0; i < b->n_jobs; i++)
            ok += b->jobs[i]->status ? 0 : b->jobs[i]->seqs;
        e->last_run_ns = now - b->jobs[0]->t_run;
        srv_stats_batch(&e->stats, b->n_seqs, ok, e->last_run_ns);
    }
    for (i = 0; i < b->n_jobs; i++) { /* computed and encoded, or failed */
        srv_job *j = b->jobs[i];
        j->in_batch = NULL;
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

/* srv__batch_job_gone: j's request went while j ran. When its batch has
 * no request left to answer and no sequence step (whose K/V and position
 * the batch moves on; a step's batch always runs to its end), the tiles
 * not yet begun are skipped: a large request answered 504 at its deadline,
 * or whose gRPC call was cancelled (a REST client that went is seen only
 * at its answer), stops taking the pool within a tile's time instead of
 * running to its end (T = 65536 on sdpa: 12 s of both cores). A tile
 * already begun ends as usual; the batch then counts as abandoned, not
 * as an execution (batch_finish). Loop thread. */
void srv__batch_job_gone(srv_job *j)
{
    batch *b = j->in_batch;
    int i;
    if (!b)
        return;
    for (i = 0; i < b->n_jobs; i++)
        if (b->jobs[i]->req || b->jobs[i]->step.is_step)
            return;
    atomic_store(&b->dead, 1);
}

/* compatible: may job j share a batch with the head h? */
static int compatible(const srv_job *h, const srv_job *j)
{
    if (h->inst != j->inst)
        return 0;
    if (h->prep.raw) /* one plan, one cfg: its scale too */
        return h->prep.cfg.head_dim == j->prep.cfg.head_dim &&
               h->prep.cfg.v_head_dim == j->prep.cfg.v_head_dim &&
               h->prep.cfg.scale == j->prep.cfg.scale;
    return 1;
}

/* plan_jobs: b's plan for its jobs as they are now (their items laid out
 * one after the other). 0, or an ATTN_ error with err (ATTN_ENOMEM when
 * the items' array or the plan had no memory). */
static int plan_jobs(batch *b, srv_job *h, char *err)
{
    int i, k;
    free(b->seqs);
    free(b->raws);
    b->seqs = NULL;
    b->raws = NULL;
    for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++) {
        b->jobs[i]->batch = b->n_seqs;
        b->jobs[i]->item0 = k;
    }
    if (h->prep.raw) {
        b->raws = malloc(sizeof *b->raws * (size_t)b->n_seqs);
        if (!b->raws)
            return snprintf(err, ATTN_ERRMAX, "out of memory"), ATTN_ENOMEM;
        for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++)
            memcpy(b->raws + k, b->jobs[i]->prep.raws,
                   sizeof *b->raws * (size_t)b->jobs[i]->prep.n);
        return attn_plan_create_raw(&b->plan, &h->prep.cfg, b->raws,
                                    b->n_seqs, err);
    }
    b->seqs = malloc(sizeof *b->seqs * (size_t)b->n_seqs);
    if (!b->seqs)
        return snprintf(err, ATTN_ERRMAX, "out of memory"), ATTN_ENOMEM;
    for (i = 0, k = 0; i < b->n_jobs; k += b->jobs[i]->prep.n, i++)
        memcpy(b->seqs + k, b->jobs[i]->prep.seqs,
               sizeof *b->seqs * (size_t)b->jobs[i]->prep.n);
    return attn_plan_create(&b->plan, model_config(h->inst->m),
                            model_weights(h->inst->m), b->seqs, b->n_seqs, err);
}

/* requeue_half: b's plan had no memory: the later half of its jobs goes
 * back to its model's queue, in its place (a step keeps its pages: bound,
 * it is not bound again), for a later batch; b tries again with the rest. */
static void requeue_half(batch *b)
{
    srv_entry *e = b->e;
    int keep = b->n_jobs / 2;
    while (b->n_jobs > keep) {
        srv_job *j = b->jobs[--b->n_jobs], **pp;
        b->n_seqs -= j->prep.n;
        for (pp = &e->qhead; *pp && (*pp)->t_queued <= j->t_queued;
             pp = &(*pp)->next)
            ;
        j->next = *pp;
        *pp = j;
        if (!j->next)
            e->qtail = j;
        e->q_seqs += j->prep.n;
        j->state = J_QUEUED;
        j->t_run = 0;
        j->batch = j->item0 = 0;
    }
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
    int i, rc, max = (int)s->cfg.max_batch;
    uint64_t now = srv_now_ns();
    if (!b)
        goto oom;
    b->s = s;
    b->e = e;
    /* room for every queued job: at most one per sequence, so fewer
     * than q_seqs when requests bring several (sized by q_seqs, a queue
     * of a few requests of 2^30 sequences asked for gigabytes) */
    for (i = 0, h = e->qhead; h; h = h->next)
        i++;
    h = e->qhead;
    b->jobs = malloc(sizeof *b->jobs * (size_t)(i < 1 ? 1 : i));
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
        /* a sequence step takes its pages now (unless it kept them from a
         * batch whose plan had no memory: requeue_half); one that cannot
         * leaves */
        if (j->step.is_step && !j->step.bound &&
            (j->status = srv_seq_bind(&j->step, &j->mem, j->err))) {
            j->next = failed;
            failed = j;
            continue;
        }
        if (!b->n_jobs)
            h = j;
        b->jobs[b->n_jobs++] = j;
        j->seqs = j->prep.n;
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
    /* a batch whose plan has no memory runs as smaller ones: only a
     * request that cannot get it alone fails (503) */
    i = b->n_jobs;
    while ((rc = plan_jobs(b, h, err)) == ATTN_ENOMEM && b->n_jobs > 1)
        requeue_half(b);
    if (b->n_jobs < i)
        srv_log(s, "warn", "model '%s': no memory for the plan of a batch of "
                "%d requests (%s); it runs as smaller batches (%d now)",
                e->name, i, err, b->n_jobs);
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
        if (b->n_jobs == 1 && h->inline_batch && h->prep.bytes <= INLINE_OUT_BYTES &&
            srv_seq_map_bytes(&h->step) <= INLINE_MAP_BYTES) {
            /* a lone client's sequence step, inside its handler (sched.c) */
            run_whole(b);
            s->inline_last = 1;
            e->stats.inline_count++;
            h->t_ran = b->t_ran; /* for the log, should it answer 504 now */
            srv__job_late(h);
            batch_finish(b, 0, NULL);
            return 0;
        }
        b->workers[0].b = b;
        b->workers[0].work.data = &b->workers[0];
        srv_pool_queue(s, &b->workers[0].work, whole_run, whole_done);
        return 0;
    }
    b->next = calloc((size_t)b->n_stages + 1, sizeof *b->next);
    b->done = calloc((size_t)b->n_stages + 1, sizeof *b->done);
    if (!b->next || !b->done) {
        batch_finish(b, 503, "server: out of memory");
        return 0;
    }
    for (i = 0; i <= b->n_stages; i++) {
        atomic_init(&b->next[i], 0);
        atomic_init(&b->done[i], 0);
    }
    atomic_init(&b->cur, first_phase(b, 0));
    atomic_init(&b->want, 0);
    atomic_init(&b->dead, 0);
    atomic_init(&b->skipped, 0);
    for (i = 0; i < b->n_jobs; i++)
        b->jobs[i]->in_batch = b;
    b->next_running = e->staged;
    e->staged = b;
    add_workers(b);
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
    e->wake_at = 0; /* one-shot: it fired */
    srv__pump(e);
}

/* arm_wake: pump e at time `at` (srv_now_ns; 0: disarm): batch_fd. The
 * pump asks for the same deadline (the queue head's) at every step that
 * joins the queue; setting a timer costs a system call that, in a VM,
 * reprograms the host's timer (it was 29% of the loop thread's time with
 * 32 decoder clients), so an unchanged deadline is not set again. */
static void arm_wake(srv_entry *e, uint64_t at)
{
    struct itimerspec its;
    if (at == e->wake_at)
        return;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(at / 1000000000u);
    its.it_value.tv_nsec = (long)(at % 1000000000u);
    if (at && !its.it_value.tv_sec && !its.it_value.tv_nsec)
        its.it_value.tv_nsec = 1; /* (0 would disarm) */
    timerfd_settime(e->batch_fd, TFD_TIMER_ABSTIME, &its, NULL);
    e->wake_at = at;
}

static void on_pump_idle(uv_idle_t *h)
{
    uv_idle_stop(h);
    srv__pump(h->data);
}

/* srv__pump_soon: an idle handle rather than a timer: no system call, and
 * the loop does not block in its poll while it is active. */
void srv__pump_soon(srv_entry *e)
{
    uv_idle_start(&e->pump_idle, on_pump_idle);
}

int srv_sched_entry_init(srv_entry *e)
{
    e->batch_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (e->batch_fd < 0)
        return -1;
    uv_poll_init(e->s->loop, &e->batch_poll, e->batch_fd);
    e->batch_poll.data = e;
    uv_poll_start(&e->batch_poll, UV_READABLE, on_batch_fd);
    uv_idle_init(e->s->loop, &e->pump_idle);
    e->pump_idle.data = e;
    uv_async_init(e->s->loop, &e->helpers, batch_helpers);
    e->helpers.data = e;
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
 * expected sequence steps), or draining. Once the drain is cut short
 * nothing starts: what reaches the queue then (a request decoded after
 * the cut, a step whose turn came) answers 503 as the queued ones did. */
static void pump(srv_entry *e)
{
    srv *s = e->s;
    if (s->drain_expired) {
        arm_wake(e, 0);
        srv__sched_expire_queue(e);
        return;
    }
    while (e->qhead && e->running < (int)s->cfg.instances) {
        uint64_t waited = srv_now_ns() - e->qhead->t_queued;
        uint64_t delay = (uint64_t)s->cfg.batch_delay_us * 1000u;
        /* a lone client's step, pumped from its own handler, waits for
         * no expected step: they are its own (srv__alone) */
        uint64_t expect = e->qhead->inline_batch && srv__alone(s) ? 0 : expect_wait(e);
        if (expect > delay)
            delay = expect;
        if (e->q_seqs < s->cfg.max_batch && waited < delay && !s->draining) {
            arm_wake(e, e->qhead->t_queued + delay);
            return;
        }
        if (expect && waited >= expect) {
            /* the ones still expected did not come in time: stop waiting
             * for them until they are answered again */
            e->expect_gen++;
            e->seq_expected = 0;
        }
        arm_wake(e, 0);
        if (launch(e) < 0) { /* out of memory: retry when a batch ends */
            if (!e->running)
                arm_wake(e, srv_now_ns() + 10000000u);
            return;
        }
    }
}

/* srv__pump: pump, never inside itself: a batch that ends inside launch
 * (its plan failed, or it ran inline) pumps again from batch_finish, and
 * each such level would hold a stack frame of launch's until the queue
 * was done (a thousand queued requests whose plans found no memory, one
 * level each, overflowed a 400 KiB stack); the loop already under way
 * goes on instead. */
void srv__pump(srv_entry *e)
{
    if (e->pumping)
        return;
    e->pumping = 1;
    pump(e);
    e->pumping = 0;
}

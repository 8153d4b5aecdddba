/*
 * busy_poll.c - after network activity or a finished pool job, the loop
 * thread polls for its next event instead of sleeping, and warm jobs keep
 * the pool's idle threads awake, for at most --busy-poll-us, while a core
 * is left over by the pool's request work.
 *
 * Why: in a virtual machine a thread woken on an idle virtual CPU starts
 * late (~40 us on the machine this was measured on, up to milliseconds),
 * and a lone client's small request crosses threads four times (client ->
 * loop -> pool -> loop -> client). With the loop awake, the pool's answer
 * and the client's next request reach a running thread; with a pool
 * thread awake in a warm job, request work queued for the pool is taken
 * at once: the warm job ends (one per queued job, srv_pool_queue counts
 * them in warm_want) and libuv's worker takes the next work from its
 * queue without sleeping. Both yield their CPU (sched_yield) at every
 * turn, so any other runnable thread on that core runs first; the loop
 * stops polling once the pool's jobs take every core, and warm jobs are
 * only started for the threads request work leaves free, on one core
 * fewer than the machine has (the loop's poll takes one: with a warm job
 * on every core as well, two cores held three spinning threads, and on a
 * VM whose threads wake quickly a lone client's request took 122-160 us
 * at the median instead of 107-139). An idle server sleeps. Loop thread,
 * except warm_run and srv_pool_thread_enter.
 *
 * Pool threads run under SCHED_BATCH (srv_pool_thread_enter): a woken
 * batch thread does not preempt the thread running on its CPU. Under load
 * (16-64 connections of small requests on two cores) the loop thread was
 * preempted 0.7-0.8 times a request by the pool threads it had just
 * woken, each switch costly in a VM; as batch threads they wait for the
 * loop to sleep or its slice to end (bench/ROUNDS.md, "Sixth round").
 */
#include "server/srv.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A warm job: holds an idle pool thread awake (spinning, yielding its CPU)
 * until request work is queued for it or the busy window ends. */
struct srv_warm {
    uv_work_t work;
    srv *s;
    int busy; /* loop: queued or running */
};

static int pool_has_room(const srv *s)
{
    return s->pool_jobs < s->cores;
}

static void on_busy_idle(uv_idle_t *h)
{
    srv *s = h->data;
    if (s->stopping || !pool_has_room(s) ||
        srv_now_ns() - atomic_load_explicit(&s->busy_at, memory_order_relaxed) >
            (uint64_t)s->cfg.busy_poll_us * 1000u) {
        uv_idle_stop(h);
        return;
    }
    sched_yield();
}

void srv_spin_pause(void)
{
    for (int k = 0; k < 64; k++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* warm_run: pool thread. Ends as soon as request work was queued for a
 * warm thread (taking one unit of s->warm_want: libuv's worker then takes
 * that work from its queue without sleeping), or the busy window ended. */
static void warm_run(uv_work_t *w)
{
    srv *s = ((struct srv_warm *)w->data)->s;
    srv_pool_thread_enter(s, NULL, NULL); /* waiting is no job */
    uint64_t span = (uint64_t)s->cfg.busy_poll_us * 1000u;
    for (;;) {
        int want = atomic_load(&s->warm_want);
        if (want > 0 && atomic_compare_exchange_weak(&s->warm_want, &want, want - 1))
            return;
        if (srv_now_ns() - atomic_load_explicit(&s->busy_at, memory_order_relaxed) > span)
            return;
        srv_spin_pause();
        sched_yield();
    }
}

static void warm_done(uv_work_t *w, int status)
{
    struct srv_warm *wm = w->data;
    srv *s = wm->s;
    (void)status;
    wm->busy = 0;
    if (--s->warm_live == 0)
        atomic_store(&s->warm_want, 0); /* nobody left to take it */
}

/* warm_up: a warm job for every pool thread that request work leaves
 * free, up to one fewer than the cores (the loop polls on one). Loop
 * thread. */
static void warm_up(srv *s)
{
    int spare = s->cores - 1;
    int free_threads = (s->threads < spare ? s->threads : spare) - s->pool_jobs;
    for (int i = 0; i < s->threads && s->warm_live < free_threads; i++) {
        struct srv_warm *wm = &s->warm[i];
        if (wm->busy)
            continue;
        wm->busy = 1;
        s->warm_live++;
        uv_queue_work(s->loop, &wm->work, warm_run, warm_done);
    }
}

void srv_busy_poll_init(srv *s)
{
    uv_idle_init(s->loop, &s->busy_idle);
    s->busy_idle.data = s;
    s->warm = calloc((size_t)s->threads, sizeof *s->warm);
    for (int i = 0; s->warm && i < s->threads; i++) {
        s->warm[i].s = s;
        s->warm[i].work.data = &s->warm[i];
    }
    atomic_init(&s->warm_want, 0);
    atomic_init(&s->pool_sched_errno, 0);
    atomic_init(&s->busy_at, 0);
}

void srv_busy_poll_touch(srv *s)
{
    if (!s->cfg.busy_poll_us || s->stopping)
        return;
    atomic_store_explicit(&s->busy_at, srv_now_ns(), memory_order_relaxed);
    if (pool_has_room(s)) {
        uv_idle_start(&s->busy_idle, on_busy_idle); /* no-op when active */
        /* a lone client's inline requests need no pool */
        if (s->warm && !(s->inline_last && srv_conns_at_most(s, (int)s->cfg.inline_conns)))
            warm_up(s);
    }
}

void srv_busy_poll_close(srv *s)
{
    uv_close((uv_handle_t *)&s->busy_idle, NULL);
}

void srv_busy_poll_free(srv *s)
{
    free(s->warm);
    s->warm = NULL;
}

void srv_pool_queue(srv *s, uv_work_t *w, uv_work_cb work, uv_after_work_cb done)
{
    s->pool_jobs++;
    uv_queue_work(s->loop, w, work, done);
    if (atomic_load(&s->warm_want) < s->warm_live)
        atomic_fetch_add(&s->warm_want, 1); /* a warm thread takes it */
}

void srv_pool_job(const char *what, const char *name)
{
    static _Thread_local int named;
    if (what)
        srv_crash_job(what, name);
    if (named)
        return;
    named = 1;
    srv_crash_role("a pool thread");
    pthread_setname_np(pthread_self(), "attnd-pool"); /* top -H, gdb, perf */
}

void srv_pool_thread_enter(srv *s, const char *what, const char *name)
{
    static _Thread_local int entered;
    struct sched_param sp = {0};
    srv_pool_job(what, name);
    if (entered || !s->cfg.pool_batch)
        return;
    entered = 1;
    int none = 0;
    if (sched_setscheduler(0, SCHED_BATCH, &sp) < 0) /* this thread only */
        atomic_compare_exchange_strong(&s->pool_sched_errno, &none, errno);
}

void srv_pool_done(srv *s)
{
    int e = atomic_load_explicit(&s->pool_sched_errno, memory_order_relaxed);
    if (e > 0) { /* once: the loop logs what a pool thread could not do */
        atomic_store(&s->pool_sched_errno, -1);
        srv_log(s, "warn", "pool: a pool thread cannot run as SCHED_BATCH "
                "(%s); the pool keeps the default policy", strerror(e));
    }
    s->pool_jobs--;
    srv_busy_poll_touch(s);
}

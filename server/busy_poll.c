/*
 * busy_poll.c - after network activity or a finished pool job, the loop
 * thread polls for its next event instead of sleeping, for at most
 * --busy-poll-us, while a core is left over by the pool.
 *
 * Why: in a virtual machine a thread woken on an idle virtual CPU starts
 * late (~40 us on the machine this was measured on, up to milliseconds),
 * and a lone client's small request crosses threads four times (client ->
 * loop -> pool -> loop -> client). With the loop awake, the pool's answer
 * and the client's next request reach a running thread. The poll yields
 * the CPU (sched_yield) at every turn, so any other runnable thread on its
 * core runs first, and it stops once the pool's jobs take every core: it
 * only ever spends time nobody else wants. Loop thread only.
 */
#include "server/srv.h"

#include <sched.h>
#include <unistd.h>

static int pool_has_room(const srv *s)
{
    return s->pool_jobs < s->cores;
}

static void on_busy_idle(uv_idle_t *h)
{
    srv *s = h->data;
    if (s->stopping || !pool_has_room(s) ||
        srv_now_ns() - s->busy_since > (uint64_t)s->cfg.busy_poll_us * 1000u) {
        uv_idle_stop(h);
        return;
    }
    sched_yield();
}

void srv_busy_poll_init(srv *s)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    s->cores = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    uv_idle_init(s->loop, &s->busy_idle);
    s->busy_idle.data = s;
}

void srv_busy_poll_touch(srv *s)
{
    if (!s->cfg.busy_poll_us || s->stopping)
        return;
    s->busy_since = srv_now_ns();
    if (pool_has_room(s))
        uv_idle_start(&s->busy_idle, on_busy_idle); /* no-op when active */
}

void srv_busy_poll_close(srv *s)
{
    uv_close((uv_handle_t *)&s->busy_idle, NULL);
}

void srv_pool_queue(srv *s, uv_work_t *w, uv_work_cb work, uv_after_work_cb done)
{
    s->pool_jobs++;
    uv_queue_work(s->loop, w, work, done);
}

void srv_pool_done(srv *s)
{
    s->pool_jobs--;
    srv_busy_poll_touch(s);
}

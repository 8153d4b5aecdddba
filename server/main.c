/*
 * main.c - attnd: settings, the loop, signals and a graceful stop.
 *
 * SIGTERM/SIGINT/SIGHUP (a terminal that closed under a foreground attnd:
 * its default would end attnd at once, answers in flight lost): ready turns
 * 503 and new infer requests get 503 (a REST one with a body from its head,
 * http_head.c; the listener stays open so probes see
 * it; a request begun before the signal is still served, r->late: a REST
 * request whose head came, a gRPC call whose HEADERS came, a stream's
 * message whose first byte came), queued work runs at once, and when
 * nothing is in flight any more every connection is closed and attnd
 * exits 0.
 *
 * A second signal cuts the drain short, as drain-ms passing does
 * (cut_drain): what is still queued, or waits for its model's
 * turn, gets 503 / UNAVAILABLE; what runs (a job, a load: parked by
 * srv_suspend, on either door) ends and answers. Then (on_stop_timer)
 * the answers made, those included, get --stop-flush-ms to be written whole
 * (gRPC: open calls with no answer end UNAVAILABLE and each connection
 * gets its final GOAWAY first, srv_grpc_finish); what a client has not
 * read by then is cut, and logged. Nothing new starts after the cut (a
 * request begun before the signal whose body ends after it gets 503, as
 * does an index that would read the folder on the pool). A REST request
 * whose body is still coming at the cut gets its 503 at once, written on
 * its socket (srv_http_cut), as a gRPC call whose message is not whole
 * gets UNAVAILABLE; the flush gives its client time to read it.
 *
 * At the stop each door's connections whose clients have not acknowledged
 * every byte of their answers stay open until they have (srv_http_stop,
 * srv_grpc_stop), at most the flush's time (left), so that a byte the
 * client sends meanwhile is not answered with a reset that drops the
 * rest; a signal closes them at once.
 *
 * SIGHUP ignored when attnd starts (nohup) stays ignored.
 *
 * The signals are caught by attnd's own handler, not uv_signal: libuv puts
 * back SIG_DFL when its last signal handle closes, and a signal landing
 * between that and a later SIG_IGN killed attnd during its exit. The
 * handler counts the signal and wakes the loop (uv_async_send is
 * async-signal-safe); at the stop SIG_IGN replaces it (once its last gRPC
 * connection has closed: a signal until then closes them), so from the first
 * signal to the process's end none of the three can kill attnd.
 */
#include "server/accept.h"
#include "server/srv.h"
#include "core/st.h"
#include "core/exec.h"
#include "server/grpc.h"
#include "server/seq.h"
#include "core/json_mem.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The signals that stop attnd, and the handler's state: those caught and
 * not yet seen by the loop (per signal), handlers running, and whether the
 * async handle is gone. */
static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};
#define N_STOP (sizeof stop_signals / sizeof *stop_signals)
static srv *sig_srv;
static atomic_int sig_count[N_STOP], sig_busy, sig_closed;

static void on_raw_signal(int signum)
{
    int e = errno;
    atomic_fetch_add(&sig_busy, 1);
    for (size_t i = 0; i < N_STOP; i++)
        if (stop_signals[i] == signum)
            atomic_fetch_add(&sig_count[i], 1);
    if (!atomic_load(&sig_closed))
        uv_async_send(&sig_srv->sig_async);
    atomic_fetch_sub(&sig_busy, 1);
    errno = e;
}

static void catch_signals(srv *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_raw_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sig_srv = s;
    for (size_t i = 0; i < N_STOP; i++) {
        struct sigaction was;
        if (stop_signals[i] == SIGHUP && sigaction(SIGHUP, NULL, &was) == 0 &&
            was.sa_handler == SIG_IGN)
            continue; /* nohup: a hangup is not a stop */
        sigaction(stop_signals[i], &sa, NULL);
    }
}

/* ignore_signals: the stop signals are ignored for the rest of the process
 * (set before the handle closes, never SIG_DFL in between); once no
 * handler is still inside uv_async_send the handle may close. */
static void ignore_signals(srv *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    for (size_t i = 0; i < N_STOP; i++)
        sigaction(stop_signals[i], &sa, NULL);
    atomic_store(&sig_closed, 1);
    while (atomic_load(&sig_busy)) /* a handler on another thread */
        ;
    uv_close((uv_handle_t *)&s->sig_async, NULL);
}

/* raise_nofile: the descriptor soft limit up to the hard one (each
 * connection takes a descriptor; the loop and the pool use epoll and poll,
 * never select, so a high limit costs nothing; Debian's soft default is
 * 1024, under --max-connections' default and the rest), and a warning when
 * --max-connections does not fit under it: past the limit new connections
 * wait (http_accept.c), and loads and uploads answer 503. At start, before
 * any thread. */
static void raise_nofile(srv *s)
{
    struct rlimit rl;
    unsigned long long need = (unsigned long long)s->cfg.max_connections *
                                  (s->cfg.linger_ms ? 2 : 1) + /* lingering */
                              2 * SRV_CONN_HEADROOM + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        srv_log(s, "warn", "descriptor limit (ulimit -n) %llu is below the "
                "%llu that --max-connections %lld needs (both doors' "
                "connections, their headroom, as many lingering closes, "
                "loads, the log): past it new "
                "connections wait and loads answer 503; raise the hard limit "
                "or lower --max-connections", (unsigned long long)rl.rlim_cur,
                need, s->cfg.max_connections);
}

/* probe_threads: can the compute pool's s->threads threads be made?
 * libuv aborts, without a word, when it cannot create them (at the first
 * queued work: the startup loads); a process or pids-cgroup limit
 * (ulimit -u, a container's pids.max) did that. Here as many threads are
 * created, held alive together, and joined first, so such a limit ends
 * the start with a message. 0, or -1 with err. At start. */
struct probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
};

static void *probe_thread(void *arg)
{
    struct probe *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->go)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int probe_threads(srv *s, char *err)
{
    struct probe p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t *t = calloc((size_t)s->threads, sizeof *t);
    int n = 0, rc = 0;
    if (!t) {
        snprintf(err, SRV_ERRMAX, "out of memory");
        return -1;
    }
    while (n < s->threads && (rc = pthread_create(&t[n], NULL, probe_thread, &p)) == 0)
        n++;
    pthread_mutex_lock(&p.mu);
    p.go = 1;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    while (n > 0)
        pthread_join(t[--n], NULL);
    free(t);
    if (rc)
        snprintf(err, SRV_ERRMAX, "cannot start %d compute thread%s (--threads): "
                 "%s; the process's thread limit is reached (ulimit -u, or a "
                 "container's pids limit): raise it or lower --threads",
                 s->threads, s->threads == 1 ? "" : "s", strerror(rc));
    return rc ? -1 : 0;
}

/* flush_left: the ms --stop-flush-ms leaves from now: all of it before a
 * cut's flush began, what is left of that flush after (so that the exit
 * comes at most drain-ms and stop-flush-ms after the signal), 0 once its
 * timer has run (on libuv's clock, floored to the ms: srv_now_ns's whole
 * ms could still leave 1, and the doors then waited that 1 ms and logged
 * the flush's end a second time). */
static uint64_t flush_left(const srv *s)
{
    uint64_t ms = (uint64_t)s->cfg.stop_flush_ms, gone;
    if (!s->flushing)
        return ms;
    if (s->flush_expired)
        return 0;
    gone = (srv_now_ns() - s->flush_t0_ns) / 1000000u;
    return gone < ms ? ms - gone : 0;
}

/* conns_text: "1 REST connection", "2 gRPC connections", "1 REST and 2
 * gRPC connections", in buf. */
static const char *conns_text(char *buf, size_t cap, int rest, int grpc)
{
    int n = rest + grpc;
    if (rest && grpc)
        snprintf(buf, cap, "%d REST and %d gRPC connections", rest, grpc);
    else
        snprintf(buf, cap, "%d %s connection%s", n, rest ? "REST" : "gRPC",
                 n == 1 ? "" : "s");
    return buf;
}

/* door_closed: a door's last connection has closed (srv_http_stop's,
 * srv_grpc_stop's done), or on_stop_timer's own count: once none is left
 * the signals are ignored */
static void door_closed(srv *s)
{
    int rest = s->stop_cut_rest, grpc = s->stop_cut_grpc;
    char what[96];
    if (--s->stop_waits)
        return;
    if (rest || grpc)
        srv_log(s, "warn", "stop: stop-flush-ms (%lld ms) passed: closed %s "
                "whose client%s had not acknowledged all of %s answers (%s "
                "too slowly or not at all; what %s not received is lost)",
                s->cfg.stop_flush_ms, conns_text(what, sizeof what, rest, grpc),
                rest + grpc == 1 ? "" : "s", rest + grpc == 1 ? "its" : "their",
                rest + grpc == 1 ? "it reads" : "they read",
                rest + grpc == 1 ? "it had" : "they had");
    if (s->stop_cut_heads)
        srv_log(s, "warn", "stop: stop-flush-ms (%lld ms) passed: closed %d "
                "REST connection%s whose request head had not come whole",
                s->cfg.stop_flush_ms, s->stop_cut_heads,
                s->stop_cut_heads == 1 ? "" : "s");
    ignore_signals(s);
}

static void on_flush_timeout(uv_timer_t *t)
{
    srv *s = t->data;
    s->flush_expired = 1;
    srv_check_stop(s);
}

/* on_stop_timer: once no job, parked request (srv_suspend: a load, of
 * either door) or (before the drain timeout) request, gRPC call or unsent
 * gRPC byte is left, and (after it) the answers made are sent or
 * --stop-flush-ms has passed for them, close the listener, the signal
 * handlers, the timers and the batch polls, so that uv_run returns. The
 * flush runs on the spent drain timer. Loop thread. */
static void on_stop_timer(uv_timer_t *t)
{
    srv *s = t->data;
    srv_entry *e;
    int calls, conns;
    size_t bytes;
    if (s->stopping || s->live_jobs || s->n_suspended ||
        ((s->live_reqs || srv_grpc_busy(s)) && !s->drain_expired))
        return;
    if (s->drain_expired) {
        if (!s->flushing) {
            s->flushing = 1;
            s->flush_t0_ns = srv_now_ns();
            srv_grpc_finish(s);
            /* the answers made (those of the requests that ended, and the
             * cut's own 503s / UNAVAILABLEs) get this long to be written
             * whole: a client that reads its answer gets it, and one that
             * does not read cannot hold the exit past it */
            uv_timer_start(&s->drain_timer, on_flush_timeout,
                           (uint64_t)s->cfg.stop_flush_ms, 0);
        }
        calls = srv_grpc_unsent(s, &conns, &bytes);
        if (!s->flush_expired && s->n_cut_open)
            return; /* 503s written at the cut: their clients read */
        if (conns || s->n_answered) {
            if (!s->flush_expired)
                return;
            srv_log(s, "warn", "stop: %lld ms after the drain was cut short and "
                    "its work ended, answers are still unsent (their clients "
                    "read too slowly or not at all; stop-flush-ms); cut: gRPC %d call%s and "
                    "%zu byte%s on %d connection%s, REST %d request%s",
                    s->cfg.stop_flush_ms, calls,
                    calls == 1 ? "" : "s", bytes, bytes == 1 ? "" : "s", conns,
                    conns == 1 ? "" : "s", s->n_answered,
                    s->n_answered == 1 ? "" : "s");
        }
    }
    s->stopping = 1;
    if (!s->start_failed)
        srv_log(s, "info", s->drain_expired ? "stopping (the drain was cut short)"
                                            : "drained; stopping");
    /* each door's connections' clients get the flush's time (left) to
     * read what the kernel still holds for them before their sockets
     * close; a signal meanwhile closes them (on_signal), then the signals
     * are ignored: exiting anyway, a late signal must not kill */
    s->stop_waits = 1;
    s->stop_waits += srv_http_stop(s, flush_left(s), door_closed);
    s->stop_waits += srv_grpc_stop(s, flush_left(s), door_closed);
    door_closed(s);
    uv_close((uv_handle_t *)&s->drain_timer, NULL);
    uv_close((uv_handle_t *)&s->stop_timer, NULL);
    srv_seq_stop(s);
    uv_close((uv_handle_t *)&s->maps_wait_timer, NULL);
    srv_memtrim_stop(s);
    srv_busy_poll_close(s);
    for (e = s->models; e; e = e->next) {
        uv_close((uv_handle_t *)&e->batch_poll, NULL);
        uv_close((uv_handle_t *)&e->pump_idle, NULL);
        uv_close((uv_handle_t *)&e->helpers, NULL);
    }
}

/* cut_drain: the drain is cut short, by a signal (signum) or drain-ms
 * passing (0): what waits answers 503 now, what runs ends and answers,
 * nothing new starts */
static void cut_drain(srv *s, int signum)
{
    char why[64];
    s->drain_expired = 1;
    if (signum)
        snprintf(why, sizeof why, "SIG%s again: drain cut short",
                 sigabbrev_np(signum));
    else
        snprintf(why, sizeof why, "drain timeout: drain-ms (%lld ms) passed",
                 s->cfg.drain_ms);
    srv_log(s, "warn", "%s with %d request%s in flight: what still waits "
            "is answered 503 (gRPC: UNAVAILABLE) now, what runs ends and "
            "answers, nothing new "
            "starts", why, s->live_reqs, s->live_reqs == 1 ? "" : "s");
    srv_sched_expire(s);
    srv_registry_expire(s);
    srv_http_cut(s);
    srv_check_stop(s);
}

static void on_drain_timeout(uv_timer_t *t)
{
    cut_drain(t->data, 0);
}

/* on_signal: the loop's side of on_raw_signal: the first signal starts the
 * drain, a later one cuts it short (once), or after the drain closes the
 * connections whose clients still read (srv_http_stop, srv_grpc_stop);
 * the rest change nothing. */
static void on_signal(uv_async_t *h)
{
    srv *s = h->data;
    int n = 0, first = -1;
    for (size_t i = 0; i < N_STOP; i++) {
        int k = atomic_exchange(&sig_count[i], 0);
        n += k;
        if (k && first < 0)
            first = stop_signals[i];
    }
    if (!n)
        return;
    if (s->stopping) { /* the clients still reading: cut, as a drain */
        int grpc, heads, rest = srv_http_stop_cut(s, &grpc, &heads);
        grpc += srv_grpc_stop_cut(s);
        char what[96];
        if (rest || grpc)
            srv_log(s, "warn", "SIG%s: stop cut short: closed %s whose "
                    "client%s had not read %s answers yet (the stop would "
                    "have waited for them up to stop-flush-ms)",
                    sigabbrev_np(first), conns_text(what, sizeof what, rest, grpc),
                    rest + grpc == 1 ? "" : "s", rest + grpc == 1 ? "its" : "their");
        if (heads)
            srv_log(s, "warn", "SIG%s: stop cut short: closed %d REST "
                    "connection%s whose request head had not come whole",
                    sigabbrev_np(first), heads, heads == 1 ? "" : "s");
        return;
    }
    if (!s->draining) {
        s->draining = 1;
        srv_log(s, "info", "SIG%s: draining (%d request%s in flight, up to %lld ms)",
                sigabbrev_np(first), s->live_reqs, s->live_reqs == 1 ? "" : "s",
                s->cfg.drain_ms);
        srv_sched_drain(s);
        srv_grpc_drain(s);
        srv_maps_wait_drain(s);
        uv_timer_start(&s->drain_timer, on_drain_timeout, (uint64_t)s->cfg.drain_ms, 0);
        srv_check_stop(s);
        n--;
    }
    if (n && !s->drain_expired) {
        uv_timer_stop(&s->drain_timer);
        cut_drain(s, first);
    }
}

/* Freed memory up to MALLOC_KEEP_BYTES at the top of a malloc arena
 * stays in the process, and blocks under MALLOC_MMAP_BYTES come from the
 * arenas, not from mmap. Why: a retained sequence's map is allocated anew,
 * larger, every step, on a pool thread, and glibc gave the old one back to
 * the kernel (a thread's arena trims past twice its adaptive mmap
 * threshold); every step then faulted its pages in again, ~3 us a KiB in
 * the VM measured: 5-8 ms a step with a 1 MiB map, 0.3-0.7 ms with the
 * memory kept (bench/ROUNDS.md, "Tenth round"). GLIBC_TUNABLES naming either
 * threshold wins. */
#define MALLOC_KEEP_BYTES (64 << 20)
#define MALLOC_MMAP_BYTES (16 << 20)

static void malloc_keep(void)
{
    const char *t = getenv("GLIBC_TUNABLES");
    if (t && (strstr(t, "malloc.trim_threshold") || strstr(t, "malloc.mmap_threshold")))
        return;
    mallopt(M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES);
    mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_BYTES);
}

int main(int argc, char **argv)
{
    static srv s; /* static: lives as long as the process */
    srv_action action;
    const char *arg;
    char err[SRV_ERRMAX], num[16];
    int rc;
    attn_blas_reexec(argv); /* one BLAS thread, kernels for this CPU */
    malloc_keep();
    attn_json_init(); /* a parse out of memory answers 503, not 400 */
    if (srv_config_load(&s.cfg, argc, argv, &action, &arg, err) < 0) {
        fprintf(stderr, "attnd: %s\n", err);
        return 2;
    }
    switch (action) {
    case SRV_HELP:
        srv_config_help(stdout, "attnd");
        srv_config_free(&s.cfg);
        return 0;
    case SRV_VERSION:
        if (attn_blas_core())
            printf("attnd %s (OpenBLAS kernels %s)\n", ATTND_VERSION, attn_blas_core());
        else
            printf("attnd %s\n", ATTND_VERSION);
        srv_config_free(&s.cfg);
        return 0;
    case SRV_CHECK_MODELS:
        rc = model_check_repo(arg, stdout, "sdpa"); /* the built-in model */
        srv_config_free(&s.cfg);
        if (rc < 0)
            fprintf(stderr, "attnd: --check-models %s: cannot read the folder\n", arg);
        return rc == 0 ? 0 : 1;
    case SRV_HEALTH_CHECK:
        rc = srv_health_check(arg, err);
        if (rc)
            fprintf(stderr, "attnd: %s\n", err);
        srv_config_free(&s.cfg);
        return rc == 0 ? 0 : 1;
    case SRV_RUN:
        break;
    }
    s.json_log = strcmp(s.cfg.log_format, "json") == 0;
    srv_accept_init(&s.accept, &s, "http");
    s.cores = attn_cpu_count(); /* its affinity (taskset, cpuset), else online */
    s.threads = s.cfg.threads ? (int)s.cfg.threads : s.cores;
    attn_batch_invariant((int)s.cfg.batch_invariant);
    /* The pool is sized before its first use; BLAS runs single-threaded
     * inside tiles so threads never oversubscribe the cores. */
    snprintf(num, sizeof num, "%d", s.threads);
    setenv("UV_THREADPOOL_SIZE", num, 1);
    signal(SIGPIPE, SIG_IGN);
    st_guard_install(); /* a weight file truncated while it loads fails that load */
    s.limits.max_elements = (size_t)s.cfg.request_memory / 4;
    s.limits.memory_budget = (size_t)s.cfg.request_memory;
    s.limits.max_inputs = 16;
    s.limits.max_outputs = 16;
    s.limits.strict_params = (int)s.cfg.strict_parameters;
    if (s.cfg.maps_bytes && (rc = maps_store_create(&s.maps, (size_t)s.cfg.maps_bytes)) < 0) {
        fprintf(stderr, "attnd: --maps-bytes %lld: cannot create the store: %s\n",
                s.cfg.maps_bytes, attn_strerror(rc));
        srv_config_free(&s.cfg);
        return 1;
    }
    s.loop = uv_default_loop();
    uv_timer_init(s.loop, &s.drain_timer);
    uv_timer_init(s.loop, &s.stop_timer);
    s.on_stop = on_stop_timer;
    uv_timer_init(s.loop, &s.maps_wait_timer);
    s.drain_timer.data = s.stop_timer.data = s.maps_wait_timer.data = &s;
    uv_async_init(s.loop, &s.sig_async, on_signal);
    s.sig_async.data = &s;
    srv_memtrim_start(&s);
    srv_busy_poll_init(&s);
    catch_signals(&s);
    if (srv_seq_init(&s) < 0) {
        fprintf(stderr, "attnd: out of memory\n");
        return 1;
    }
    /* before any pool thread exists (model loads start the pool): s.logq
     * is written here once, before every thread that reads it starts */
    if (srv_log_start(&s) < 0)
        srv_log(&s, "warn", "no log writer thread: each line is written at once");
    {
        /* a misspelt variable would change nothing, silently (a
         * ConfigMap's ATTND_KV_BYTE left the 4 GiB default, past a pod's
         * memory limit) */
        char msg[256];
        size_t pos = 0;
        while (srv_config_stray_env(environ, &pos, msg, sizeof msg))
            srv_log(&s, "warn", "%s", msg);
    }
    srv_crash_init(&s);
    raise_nofile(&s);
    srv_memfit_start(&s); /* before the loads, which check against it */
    if (probe_threads(&s, err) < 0 ||
        srv_registry_start(&s, err) < 0 || srv_http_start(&s, err) < 0 ||
        srv_grpc_start(&s, err) < 0) {
        s.draining = 1;
        s.drain_expired = 1;
        s.start_failed = 1;
        s.live_reqs = 0;
        on_stop_timer(&s.stop_timer);
        uv_run(s.loop, UV_RUN_DEFAULT); /* the model loads begun end */
        /* the lines before it (those loads' too), then the error: the last
         * line a user sees says why attnd is not running */
        srv_log_stop(&s);
        fprintf(stderr, "attnd: %s\n", err);
        rc = 1;
    } else {
        srv_log(&s, "info", "attnd %s: %d thread%s, BLAS kernels %s, models from %s",
                ATTND_VERSION, s.threads, s.threads == 1 ? "" : "s",
                attn_blas_core() ? attn_blas_core() : "(not OpenBLAS)",
                s.cfg.models);
        uv_run(s.loop, UV_RUN_DEFAULT);
        rc = 0;
    }
    srv_log_stop(&s);
    uv_loop_close(s.loop);
    srv_busy_poll_free(&s);
    srv_seq_free(&s); /* sequences hold instance references */
    srv_registry_free(&s);
    maps_store_destroy(s.maps);
    srv_config_free(&s.cfg);
    return rc;
}

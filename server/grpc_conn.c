/*
 * grpc_conn.c - the gRPC door's connections on the loop: accept (attnd's
 * own, accept.c, as the REST door's: out of descriptors the listener
 * pauses and connections wait in the backlog; counted with REST's by
 * guard.c, which times and evicts them), read into nghttp2, write what it
 * produces (at most WRITE_HIGH bytes unwritten per connection), flush once
 * per loop turn from an idle handle, close; start (drain and stop are
 * grpc_stop.c's). grpc.c handles the
 * calls, and the drain's view of the connections (finish: the drain cut
 * short, the final GOAWAY, the open calls' status; busy; unsent). Loop
 * thread only.
 */
#include "server/accept.h"
#include "server/grpc_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_idle(uv_idle_t *h);
static void unhold(gconn *c);

/* wake: g's idle handle runs on_idle this loop turn (flushes, yields). */
static void wake(srv_grpc *g)
{
    if (!g->idle_on) {
        g->idle_on = 1;
        uv_idle_start(&g->idle, on_idle);
    }
}

/* schedule: flush c on this loop turn (outside nghttp2's callbacks). */
void srv_grpc__schedule(gconn *c)
{
    srv_grpc *g = c->g;
    if (c->in_flush || c->closing)
        return;
    c->in_flush = 1;
    c->fnext = g->flush;
    g->flush = c;
    wake(g);
}

/* ---- connections ------------------------------------------------------------ */

static void on_written(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    gconn *c = w->c;
    c->wpending -= w->len;
    if (status >= 0)
        c->written += w->len;
    srv_mem_give(c->g->s, w->len);
    free(w->buf);
    free(w);
    if (status < 0)
        srv_grpc__close_conn(c);
    else
        srv_grpc__schedule(c);
    if (c->g->s->draining) /* the drain may wait for these bytes */
        srv_check_stop(c->g->s);
}

/* oom_close: c's frames could not be buffered or made: it is closed, and
 * said so (its calls end UNAVAILABLE at the client). */
static void oom_close(gconn *c)
{
    srv_log(c->g->s, "warn", "grpc: a connection closed: out of memory for its frames");
    srv_grpc__close_conn(c);
}

/* nghttp2's allocations for a connection (its mem_user_data): malloc's,
 * a failure noted on it. nghttp2 reports some (NGHTTP2_ERR_NOMEM) but not
 * all: a submitted response can be lost, and a failure in its header
 * compression later ends the session with INTERNAL_ERROR. */
static void *h2_malloc(size_t n, void *ud)
{
    void *p = malloc(n);
    if (!p)
        ((gconn *)ud)->h2_nomem = 1;
    return p;
}

static void h2_free(void *p, void *ud)
{
    (void)ud;
    free(p);
}

static void *h2_calloc(size_t k, size_t n, void *ud)
{
    void *p = calloc(k, n);
    if (!p)
        ((gconn *)ud)->h2_nomem = 1;
    return p;
}

static void *h2_realloc(void *q, size_t n, void *ud)
{
    void *p = realloc(q, n);
    if (!p && n)
        ((gconn *)ud)->h2_nomem = 1;
    return p;
}

/* flush: deliver answers, then write what nghttp2 has (up to WRITE_HIGH
 * unwritten); close the connection when nghttp2 is done with it. */
void srv_grpc__flush(gconn *c)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    gcall *call, *next;
    size_t limit = (size_t)c->g->s->cfg.grpc_buffer;
    if (c->closing)
        return;
    /* a client that does not read its answers gets no more window (so it
     * stops sending) and its stream messages wait, until they drain */
    if (c->queued + c->wpending > limit)
        c->paused = 1;
    else if (c->paused && c->queued + c->wpending <= limit / 2)
        c->paused = 0;
    for (call = c->calls; call; call = next) {
        next = call->next;
        srv_grpc__pump(call);
    }
    if (!c->paused) {
        for (call = c->calls; call; call = call->next)
            if (call->unconsumed && !call->hhead) {
                nghttp2_session_consume(c->h2, call->id, call->unconsumed);
                call->unconsumed = 0;
            }
        if (c->unconsumed) {
            nghttp2_session_consume_connection(c->h2, c->unconsumed);
            c->unconsumed = 0;
        }
    }
    if (c->h2_nomem) {
        oom_close(c);
        return;
    }
    while (c->wpending + len < WRITE_HIGH) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->h2, &d);
        if (n < 0 || c->h2_nomem) {
            free(buf);
            if (c->h2_nomem)
                oom_close(c);
            else
                srv_grpc__close_conn(c);
            return;
        }
        if (n == 0)
            break;
        if (len + (size_t)n > cap) {
            size_t nc = (len + (size_t)n) * 2;
            char *nb = realloc(buf, nc < 16384 ? 16384 : nc);
            if (!nb) { /* nghttp2 counts the frame sent: the session is lost */
                free(buf);
                oom_close(c);
                return;
            }
            buf = nb;
            cap = nc < 16384 ? 16384 : nc;
        }
        memcpy(buf + len, d, (size_t)n);
        len += (size_t)n;
    }
    if (len) {
        wreq *w = calloc(1, sizeof *w);
        uv_buf_t b = uv_buf_init(buf, (unsigned)len);
        if (!w) {
            free(buf);
            oom_close(c);
            return;
        }
        w->c = c;
        w->buf = buf;
        w->len = len;
        c->wpending += len;
        srv_mem_hold(c->g->s, len); /* until written */
        if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
            c->wpending -= len;
            srv_mem_give(c->g->s, len);
            free(buf);
            free(w);
            srv_grpc__close_conn(c);
            return;
        }
    } else {
        free(buf);
    }
    if (!c->wpending && !nghttp2_session_want_read(c->h2) &&
        !nghttp2_session_want_write(c->h2))
        srv_grpc__close_conn(c);
}


static void on_idle(uv_idle_t *h)
{
    srv_grpc *g = h->data;
    gconn *y = g->yielded;
    g->yielded = NULL;
    while (y) { /* a turn has passed: read again */
        gconn *c = y;
        y = c->ynext;
        c->yielded = 0;
        c->turn_read = 0;
        if (c->held)
            unhold(c); /* may yield again: after this list was taken */
        else
            uv_read_start((uv_stream_t *)&c->tcp, srv_grpc__on_alloc, srv_grpc__on_read);
    }
    while (g->flush) {
        gconn *c = g->flush;
        g->flush = c->fnext;
        c->in_flush = 0;
        srv_grpc__flush(c);
    }
    if (!g->flush && !g->yielded) { /* unhold may have yielded again */
        g->idle_on = 0;
        uv_idle_stop(&g->idle);
    }
}

/* release: after srv_grpc_stop, g goes with its last handle. */
static void release(srv_grpc *g)
{
    if (!g->stopped || g->handles || g->n_conns || g->closing_conns)
        return;
    nghttp2_session_callbacks_del(g->cbs);
    nghttp2_option_del(g->opt);
    free(g->spare);
    free(g);
}

static void on_conn_closed(uv_handle_t *h)
{
    gconn *c = h->data;
    srv_grpc *g = c->g;
    if (--c->handles)
        return;
    free(c);
    g->closing_conns--;
    release(g);
}

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer does not see libuv close a descriptor (Debian's libuv
 * 1.44 calls syscall(SYS_close)), so a socket closed here and a file a
 * pool thread opened later under the same number looked to it like one
 * object used by two threads without order ("data race ... closedir" in
 * `make SANITIZER=thread soak`). Its close-syscall hooks tell it, before
 * uv_close: told after, a pool thread could open the freed number in
 * between, and the late close then met that open. uv_close's own
 * epoll_ctl on the socket, after the hooks, is forgotten when the number
 * is next opened (open(2) starts it afresh; hence model_opendir for the
 * pool's folders: opendir's own open is not seen). */
void __sanitizer_syscall_pre_impl_close(long fd);
void __sanitizer_syscall_post_impl_close(long res, long fd);
#endif

/* close_handles: close c's tcp (and idle timer once it exists); c goes
 * when both have closed. */
static void close_handles(gconn *c)
{
    uv_os_fd_t fd = -1;
    srv_mem_give(c->g->s, c->mem); /* its session is gone (or never was) */
    c->mem = 0;
    free(c->held);
    c->held = NULL;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && fd >= 0) {
        srv_linger_close(c->g->s, fd, &c->guard); /* before libuv closes fd */
#if defined(__SANITIZE_THREAD__)
        __sanitizer_syscall_pre_impl_close(fd);
        __sanitizer_syscall_post_impl_close(0, fd);
#endif
    }
    c->g->closing_conns++;
    c->handles = c->idle.data ? 2 : 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed); /* closes the socket now */
    if (c->idle.data)
        uv_close((uv_handle_t *)&c->idle, on_conn_closed);
}

void srv_grpc__close_conn(gconn *c)
{
    srv_grpc *g = c->g;
    gconn **pp;
    if (c->closing)
        return;
    c->closing = 1;
    if (c->in_flush)
        for (pp = &g->flush; *pp; pp = &(*pp)->fnext)
            if (*pp == c) {
                *pp = c->fnext;
                break;
            }
    c->in_flush = 0;
    if (c->yielded)
        for (pp = &g->yielded; *pp; pp = &(*pp)->ynext)
            if (*pp == c) {
                *pp = c->ynext;
                break;
            }
    c->yielded = 0;
    srv_guard_remove(g->s, &c->guard);
    while (c->calls)
        srv_grpc__call_free(c->calls);
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    g->n_conns--;
    close_handles(c);
    if (g->stop_timer_on && !g->n_conns) { /* the stop's last one */
        g->stop_timer_on = 0;
        uv_close((uv_handle_t *)&g->stop_timer, srv_grpc__handle_closed);
        g->s->grpc_stopping = NULL;
        g->stop_done(g->s);
    }
}

/* srv_grpc__taken (grpc_int.h): the arithmetic of taking, no socket. */
int srv_grpc__taken(uint64_t written, size_t wpending, size_t wqueue, int q,
                    uint64_t *took)
{
    uint64_t given = written + wpending - wqueue, t;
    if (q < 0)
        return 0;
    t = given >= (uint64_t)q ? given - (uint64_t)q : *took;
    if (t <= *took)
        return 0; /* nothing taken since */
    *took = t;
    return 1;
}

/* srv_grpc__idle_left (grpc_int.h): what is left of the timeout. */
uint64_t srv_grpc__idle_left(uint64_t timeout_ms, long ack_age_ms)
{
    if (ack_age_ms < 0)
        return timeout_ms;
    return (uint64_t)ack_age_ms < timeout_ms ? timeout_ms - (uint64_t)ack_age_ms
                                             : 0;
}

/* taking: has c's client taken more of its answers (acknowledged bytes
 * attnd wrote) since the idle timer last ran? A client reading a large
 * answer slowly sends nothing when its window is wide enough: it is not
 * idle while it takes bytes. srv_grpc__taken counts it from c's figures,
 * SIOCOUTQ and libuv's write queue. */
static int taking(gconn *c, uv_os_fd_t fd)
{
    int q = fd >= 0 ? srv_sock_unacked(fd) : -1; /* linger.c */
    return srv_grpc__taken(c->written, c->wpending,
                           uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp),
                           q, &c->took);
}

/* open_call: does one of c's calls keep c open past connection-timeout:
 * its HEADERS whole (counted) and it not ended? A header block whose
 * CONTINUATION never comes is no call (counted by no one: a client that
 * had been served once held its connection with one for good), and a
 * call ended has its answer made: what is left is its client's to take
 * (taking), and one that keeps its window shut takes nothing (a unary
 * call's answer never taken held its connection for good, no key asked). */
static int open_call(const gconn *c)
{
    const gcall *call;
    for (call = c->calls; call; call = call->next)
        if (call->counted && !call->ending)
            return 1;
    return 0;
}

/* on_idle_timeout: no byte for --connection-timeout seconds: a connection
 * with no call open (open_call) gets GOAWAY and closes (flush closes it
 * once written); one with a call open (a stream between steps) stays, as
 * does one whose client took more of its answers since the timer last
 * ran (taking): it goes once a whole connection-timeout passes in which
 * it neither sends nor takes a byte, counted from its last ACK
 * (srv_grpc__idle_left). An ACK of the last byte is not the client's read
 * of it: its kernel may hold the answer's tail (its receive buffer) that
 * it is still reading, its next call to come after it; before, a client
 * that took its last byte just before the timer ran was sent away then,
 * as it read. Nor does one whose socket holds bytes attnd has not read
 * yet: libuv runs the timers due at the start of a loop turn, before it
 * polls, so after a stall of the loop past the timeout a client's next
 * call may wait there (GOAWAY would have nghttp2 ignore it); its read,
 * this turn, restarts the timer (a whole timeout till then). */
static void on_idle_timeout(uv_timer_t *t)
{
    gconn *c = t->data;
    srv *s = c->g->s;
    uint64_t ms = (uint64_t)s->cfg.conn_timeout_s * 1000u, left;
    uv_os_fd_t fd = -1;
    if (c->closing)
        return;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        fd = -1;
    if (open_call(c) || srv_sock_unread(fd)) /* linger.c */
        left = ms;
    else if (taking(c, fd))
        left = srv_grpc__idle_left(ms, srv_sock_ack_age_ms(fd)); /* sock_rx.c */
    else
        left = 0;
    if (left) {
        uv_timer_start(&c->idle, on_idle_timeout, left, 0);
        return;
    }
    nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
    srv_grpc__schedule(c);
}

void srv_grpc__on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    gconn *c = h->data;
    (void)hint;
    *buf = uv_buf_init(c->g->rbuf, READ_BUF);
}

void srv_grpc__h2_error(gconn *c, uint32_t code, const char *what)
{
    srv_grpc *g = c->g;
    unsigned long long n;
    if (c->h2_error)
        return;
    c->h2_error = 1;
    g->s->http.grpc_h2_errors++;
    if (!(n = srv_every_due(&g->h2_log, srv_now_ns())))
        return;
    srv_log(g->s, "warn", "grpc: ended %llu connection%s for HTTP/2 errors since "
            "the last such line (this one: %s%s): a client that broke the HTTP/2 "
            "protocol (or sent something else) or reset streams faster than "
            "the HTTP/2 layer allows",
            n, n == 1 ? "" : "s",
            what ? what : "GOAWAY ", what ? "" : nghttp2_http2_strerror(code));
}

/* feed: the n bytes at p, scanned, to c's session, then its answers
 * flushed; -1 when c was closed. */
static int feed(gconn *c, const uint8_t *p, size_t n)
{
    ssize_t rv = nghttp2_session_mem_recv(c->h2, p, n);
    if (rv < 0 && c->h2_nomem) {
        oom_close(c);
        return -1;
    }
    if (rv < 0) {
        srv_grpc__h2_error(c, 0, nghttp2_strerror((int)rv));
        srv_grpc__close_conn(c);
        return -1;
    }
    c->rx += (uint64_t)n;
    if (c->rx / 8 > c->carried + FLOOD_SLACK && !c->h2_error) {
        char what[160];
        snprintf(what, sizeof what, "%llu bytes of frames carrying no call's "
                 "headers or messages, GOAWAY ENHANCE_YOUR_CALM",
                 (unsigned long long)(c->rx - c->carried));
        srv_grpc__h2_error(c, 0, what);
        /* its later input is ignored; closed once the GOAWAY is out */
        nghttp2_session_terminate_session(c->h2, NGHTTP2_ENHANCE_YOUR_CALM);
    }
    srv_grpc__flush(c);
    return c->closing ? -1 : 0;
}

/* yield: c sits out the loop's next poll (TURN_READ, TURN_CALLS). */
static void yield(gconn *c)
{
    srv_grpc *g = c->g;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->yielded = 1;
    c->ynext = g->yielded;
    g->yielded = c;
    wake(g);
}

/* hold: keep the n bytes at p, past c's TURN_CALLS calls, for its next
 * turn (c->held, counted in its mem); 0 when there was no room: they are
 * read now, as before the bound. */
static int hold(gconn *c, const uint8_t *p, size_t n)
{
    if (!c->held) {
        if (srv_mem_take(c->g->s, READ_BUF) < 0)
            return 0;
        if (!(c->held = malloc(READ_BUF))) {
            srv_mem_give(c->g->s, READ_BUF);
            return 0;
        }
        c->held_cap = READ_BUF;
        c->mem += READ_BUF;
    }
    memmove(c->held, p, n);
    c->held_n = n;
    return 1;
}

/* unhold: its next turn, c's held bytes are read (TURN_CALLS again); once
 * none is left its socket is read again. */
static void unhold(gconn *c)
{
    size_t use;
    int rc;
    c->turn_heads = 0;
    use = srv_grpc__scan_frames(c, c->held, c->held_n, 1);
    c->early = c->held_early;
    rc = feed(c, c->held, use);
    c->early = 0;
    if (rc < 0)
        return;
    if (use < c->held_n) {
        hold(c, c->held + use, c->held_n - use);
        yield(c);
        return;
    }
    free(c->held);
    c->held = NULL;
    c->held_n = 0;
    srv_mem_give(c->g->s, c->held_cap);
    c->mem -= c->held_cap;
    c->held_cap = 0;
    uv_read_start((uv_stream_t *)&c->tcp, srv_grpc__on_alloc, srv_grpc__on_read);
}

void srv_grpc__on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    gconn *c = st->data;
    if (n < 0) {
        srv_grpc__close_conn(c);
        return;
    }
    if (n == 0 || c->closing || c->discarding)
        return;
    srv_busy_poll_touch(c->g->s);
    if (c->g->s->cfg.conn_timeout_s)
        uv_timer_start(&c->idle, on_idle_timeout,
                       (uint64_t)c->g->s->cfg.conn_timeout_s * 1000u, 0);
    const uint8_t *p = (const uint8_t *)buf->base;
    size_t use;
    c->turn_heads = 0;
    /* before nghttp2 reads them */
    use = srv_grpc__scan_frames(c, p, (size_t)n, 1);
    if (feed(c, p, use) < 0)
        return;
    c->turn_read += (size_t)n;
    if (use < (size_t)n) {
        if (hold(c, p + use, (size_t)n - use)) {
            c->held_early = !c->g->s->draining;
            yield(c); /* the calls past TURN_CALLS wait for the next turn */
            return;
        }
        /* no room: read now */
        srv_grpc__scan_frames(c, p + use, (size_t)n - use, 0);
        if (feed(c, p + use, (size_t)n - use) < 0)
            return;
    }
    if (c->turn_read >= TURN_READ)
        yield(c); /* the others' turn: libuv's read loop ends here */
}

/* slow: guard.c's sweep: end each of c's calls whose message arrives
 * slower than min-body-rate once grace has passed since its first byte
 * (or a unary call's HEADERS), with RESOURCE_EXHAUSTED; its stream is then
 * reset (grpc.c, once the trailers are out) and the connection's other
 * calls go on. Not while attnd itself holds the window closed
 * (--grpc-buffer, queue-size): a call of a paused connection is spared
 * only while it has no window left, stream's or connection's (before,
 * every call of it was: one still able to send trickled on unjudged,
 * each byte restarting connection-timeout). Returns the calls ended. */
static int slow(srv_conn *sc, uint64_t now, uint64_t grace)
{
    gconn *c = (gconn *)(void *)((char *)sc - offsetof(gconn, guard));
    long long rate = c->g->s->cfg.min_body_rate;
    gcall *call;
    int n = 0;
    if (c->closing)
        return 0;
    for (call = c->calls; call; call = call->next) {
        uint64_t dt = now - call->t_msg_ns;
        char msg[200];
        if (!call->t_msg_ns || call->ending || call->hhead || dt <= grace)
            continue;
        if (c->paused &&
            (nghttp2_session_get_stream_local_window_size(c->h2, call->id) <= 0 ||
             nghttp2_session_get_local_window_size(c->h2) <= 0))
            continue;
        if ((double)call->msg_seen * 1e9 >= (double)rate * (double)dt)
            continue;
        snprintf(msg, sizeof msg, "message: %llu bytes in %.1f s, slower than "
                 "%lld bytes/s (min-body-rate)",
                 (unsigned long long)call->msg_seen, (double)dt / 1e9, rate);
        srv_grpc__call_fail(call, GRPC_RESOURCE_EXHAUSTED, msg);
        n++;
    }
    return n;
}

/* unsent: guard.c's eviction: bytes of c's answers libuv has not
 * written to the kernel yet (wpending: its write queue, or written and
 * their callback not run yet). */
static int unsent(const srv_conn *sc)
{
    const gconn *c = (const gconn *)(const void *)((const char *)sc - offsetof(gconn, guard));
    return c->wpending > 0;
}

/* A connection that finds no memory for its state waits this long to be
 * accepted; meanwhile it and the ones after it wait in the listen
 * backlog. */
#define ACCEPT_OOM_MS 10

/* room: a connection's state (g->spare), allocated before it is accepted
 * (accept.c); with no memory for it the listener rests ACCEPT_OOM_MS. */
static int room(void *data)
{
    srv_grpc *g = data;
    if (g->spare || (g->spare = calloc(1, sizeof *g->spare)))
        return 1;
    srv_accept_pause(&g->accept, ACCEPT_OOM_MS);
    return 0;
}

/* refused: a connection closed at its accept for want of memory-budget
 * for its state (CONN_COST), counted and logged (a line a second at
 * most), as grpc-core's resource quota refuses one: its client retries
 * with backoff, and the calls that hold the budget are not starved by
 * connections that would each hold tens of KB. */
static void refused(srv_grpc *g)
{
    srv *s = g->s;
    unsigned long long n;
    s->http.grpc_conns_refused++;
    if ((n = srv_every_due(&g->conn_refused_log, srv_now_ns())))
        srv_log(s, "warn", "grpc: %llu connection%s refused at accept since "
                "the last such line: the memory for request bodies, open "
                "calls, connections and unsent answers (%lld bytes, "
                "memory-budget) is in use", n, n == 1 ? "" : "s",
                s->cfg.memory_budget);
}

/* take: the connection on fd, just accepted from peer, in g->spare (room):
 * an nghttp2 session, its idle timer, counted and guarded (guard.c),
 * reading. Past max-connections guard.c evicts a waiting one; past the
 * headroom too (every one busy) the new one is closed, as it is with no
 * memory for its session (accept.c closed it already if it was past
 * max-connections-per-ip). */
static void take(void *data, int fd, const struct sockaddr_storage *peer,
                 socklen_t len)
{
    srv_grpc *g = data;
    srv *s = g->s;
    gconn *c = g->spare;
    nghttp2_settings_entry iv[3] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
    };
    (void)len;
    g->spare = NULL;
    c->g = g;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->guard.peer = *peer;
    if (s->n_conns >= (int)s->cfg.max_connections + SRV_CONN_HEADROOM ||
        srv_mem_take(s, CONN_COST) < 0) {
        if (s->n_conns < (int)s->cfg.max_connections + SRV_CONN_HEADROOM)
            refused(g);
        close(fd);
        close_handles(c);
        return;
    }
    c->mem = CONN_COST;
    if (uv_tcp_open(&c->tcp, fd) < 0) {
        close(fd);
        close_handles(c);
        return;
    }
    nghttp2_mem mem = {c, h2_malloc, h2_free, h2_calloc, h2_realloc};
    if (nghttp2_session_server_new3(&c->h2, g->cbs, c, g->opt, &mem) != 0) {
        srv_log(s, "warn", "grpc: a connection closed: out of memory for its session");
        close_handles(c);
        return;
    }
    uv_timer_init(s->loop, &c->idle);
    c->idle.data = c;
    if (s->cfg.conn_timeout_s)
        uv_timer_start(&c->idle, on_idle_timeout,
                       (uint64_t)s->cfg.conn_timeout_s * 1000u, 0);
    c->next = g->conns;
    if (g->conns)
        g->conns->prev = c;
    g->conns = c;
    g->n_conns++;
    c->guard.fd = fd;
    c->guard.grpc = 1;
    c->guard.slow = slow;
    c->guard.unsent = unsent;
    srv_guard_add(s, &c->guard);
    uv_tcp_nodelay(&c->tcp, 1);
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 3);
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
    uv_read_start((uv_stream_t *)&c->tcp, srv_grpc__on_alloc, srv_grpc__on_read);
    srv_grpc__schedule(c);
}

/* ---- start (drain and stop: grpc_stop.c) --------------------------------- */

int srv_grpc_start(srv *s, char *err)
{
    srv_grpc *g;
    if (!s->cfg.grpc_port)
        return 0;
    if (!(g = calloc(1, sizeof *g)) ||
        nghttp2_session_callbacks_new(&g->cbs) != 0 ||
        nghttp2_option_new(&g->opt) != 0) {
        snprintf(err, SRV_ERRMAX, "grpc: out of memory");
        goto fail;
    }
    g->s = s;
    srv_grpc__callbacks(g->cbs);
    nghttp2_option_set_max_reserved_remote_streams(g->opt, 0);
    /* closed streams are kept for RFC 7540's priority tree, which attnd
     * does not use: 100 calls ended on a connection held 30 KB more
     * (CONN_COST). (SETTINGS_NO_RFC7540_PRIORITIES would drop PRIORITY's
     * idle streams too, but nghttp2 1.52 then aborts in
     * nghttp2_session_del after an allocation of its failed.) */
    nghttp2_option_set_no_closed_streams(g->opt, 1);
    /* windows are given back by flush, so a connection whose answers pile
     * up unsent stops receiving (--grpc-buffer) */
    nghttp2_option_set_no_auto_window_update(g->opt, 1);
    srv_accept_init(&g->accept, s, "grpc");
    if (srv_accept_listen(&g->accept, "grpc-port", s->cfg.grpc_port,
                          &s->grpc_port, NULL, err) < 0)
        goto fail;
    uv_idle_init(s->loop, &g->idle);
    g->idle.data = g;
    srv_accept_start(&g->accept, g, room, take);
    g->handles = 3;
    s->grpc = g;
    srv_log(s, "info", "listening on grpc://%s%s%s:%d", strchr(s->cfg.host, ':') ? "[" : "",
            s->cfg.host, strchr(s->cfg.host, ':') ? "]" : "", s->grpc_port);
    return 0;
fail:
    if (g) {
        if (g->cbs)
            nghttp2_session_callbacks_del(g->cbs);
        if (g->opt)
            nghttp2_option_del(g->opt);
        free(g);
    }
    return -1;
}

void srv_grpc__handle_closed(uv_handle_t *h)
{
    srv_grpc *g = h->data;
    g->handles--;
    release(g);
}

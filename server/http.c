/*
 * http.c - libmicrohttpd on the libuv loop: one thread for both.
 *
 * MHD runs with MHD_USE_EPOLL, no thread and no listener of its own
 * (http_accept.c accepts and hands it each connection); its epoll fd is
 * polled by a uv_poll handle and MHD_run() is called from the loop whenever
 * it is readable, when MHD's timeout falls due, and right after a suspended
 * connection was resumed (srv_kick). Each request gets one srv_req, created
 * on MHD's first call (http_head.c checks its head then) and freed in the
 * completion callback; the body is buffered up to a limit (413 before
 * reading on a Content-Length over it, and a chunked body answered 413 as
 * it passes the limit, the connection closed). Then the route's handler
 * runs and either answers at once or suspends the connection until
 * srv_respond.
 */
#include "server/accept.h"
#include "server/http_int.h"
#include "server/linger.h"
#include "server/srv.h"
#include "core/json_mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_mhd_timer(uv_timer_t *t);
static void on_mhd_idle(uv_idle_t *h);

/* MHD runs again at once (its timeout 0) at most this many times in a row
 * before the loop polls for I/O. */
#define MHD_RUNS_AT_ONCE 64
#define MHD_STILL_RUNS 4096 /* then a stuck connection: MHD_STUCK_MS apart */
#define MHD_STUCK_MS 1

/* run_mhd: let MHD do its work, then re-arm its timeout. Loop thread.
 * A timeout of 0 (more to do at once: the next of pipelined requests, a
 * resumed connection) runs MHD again from the timer, in the same turn of
 * the loop, up to MHD_RUNS_AT_ONCE times in a row; then from an idle
 * handle, in the next turn, after the loop has polled for I/O. libuv 1.44
 * (Debian 12) runs a timer re-armed at 0 from its own callback again
 * before it polls (libuv issue 4245), and MHD 0.9.75 says 0 for as long
 * as a connection it cannot move stays ready (a chunk-size line longer
 * than its buffer): with the timer alone, the loop served nothing else,
 * signals and the guard's sweep included, until that connection's
 * connection-timeout. Even so the loop spun, a core's worth, until
 * min-body-rate closed that connection (header-timeout, 20 s, after its
 * head): after MHD_STILL_RUNS runs at 0 in a row with no I/O event, no
 * call of a handler and no kick (nothing moved; ~0.1 s here), MHD runs
 * MHD_STUCK_MS apart until something does. */
static void run_mhd(srv *s)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    uint64_t calls;
    if (!s->mhd)
        return;
    calls = s->mhd_calls;
    MHD_run(s->mhd);
    s->mhd_quiet = 0; /* MHD logs at once, in the run, or not at all */
    if (MHD_get_timeout(s->mhd, &ms) != MHD_YES || ms > 1000)
        ms = 1000;
    if (ms || s->mhd_calls != calls)
        s->mhd_still_runs = 0;
    else if (++s->mhd_still_runs >= MHD_STILL_RUNS)
        ms = MHD_STUCK_MS; /* nothing moved: a stuck connection */
    if (ms == 0 && s->mhd_runs_at_once >= MHD_RUNS_AT_ONCE) {
        uv_timer_stop(&s->mhd_timer);
        uv_idle_start(&s->mhd_idle, on_mhd_idle); /* no-op when active */
        return;
    }
    s->mhd_runs_at_once = ms == 0 ? s->mhd_runs_at_once + 1 : 0;
    uv_timer_start(&s->mhd_timer, on_mhd_timer, ms, 0);
}

static void on_mhd_timer(uv_timer_t *t) { run_mhd(t->data); }

/* on_mhd_idle: the loop has polled since MHD_RUNS_AT_ONCE runs in a row. */
static void on_mhd_idle(uv_idle_t *h)
{
    srv *s = h->data;
    uv_idle_stop(h);
    s->mhd_runs_at_once = 0;
    run_mhd(s);
}

static void on_mhd_poll(uv_poll_t *p, int status, int events)
{
    srv *s = p->data;
    (void)status;
    (void)events;
    srv_busy_poll_touch(s);
    s->mhd_runs_at_once = 0; /* the loop polled */
    s->mhd_still_runs = 0;   /* and I/O came */
    run_mhd(s);
}

void srv_kick(srv *s)
{
    s->mhd_still_runs = 0;
    if (s->mhd)
        uv_timer_start(&s->mhd_timer, on_mhd_timer, 0, 0);
}

int srv_client_went(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void srv_suspend(srv_req *r)
{
    if (r->suspended)
        return;
    if (r->conn)
        MHD_suspend_connection(r->conn);
    r->suspended = 1;
    r->s->n_suspended++;
}

void srv_respond(srv_req *r, int status, const char *ctype, char *body,
                 size_t len)
{
    if (r->have_resp) { /* answered already (e.g. deadline): drop */
        free(body);
        return;
    }
    r->have_resp = 1;
    if (r->conn)
        r->s->n_answered++; /* until on_completed */
    r->status = status;
    r->ctype = ctype;
    r->resp = body;
    r->resp_len = len;
    if (body && len) { /* held until sent (guard.c) */
        r->resp_mem = len;
        srv_mem_hold(r->s, len);
    }
    if (r->suspended) {
        r->suspended = 0;
        r->s->n_suspended--;
        if (r->conn) {
            MHD_resume_connection(r->conn);
            srv_kick(r->s);
        }
    }
    if (r->on_answer)
        r->on_answer(r);
}

void srv_respond_static(srv_req *r, int status, const char *ctype,
                        const char *body, size_t len)
{
    if (!r->have_resp)
        r->resp_static = body;
    srv_respond(r, status, ctype, NULL, len);
}

/* respond_body: a JSON answer with body b, or, when b could not be
 * allocated, 503 with the fixed out-of-memory body (http_answer.c). */
static void respond_body(srv_req *r, int status, char *b)
{
    if (!b && !r->have_resp) { /* (a second answer srv_respond drops) */
        status = 503;
        r->retry_after = 1;
        r->resp_oom = 1;
    }
    srv_respond(r, status, "application/json", b, b ? strlen(b) : 0);
}

void srv_respond_json(srv_req *r, int status, const char *json)
{
    respond_body(r, status, strdup(json));
}

void srv_respond_dump(srv_req *r, json_t *o, unsigned long mark,
                      const char *fmt, ...)
{
    char *text = attn_json_dumps(o, JSON_COMPACT, mark), msg[1024];
    va_list ap;
    json_decref(o);
    if (text) {
        srv_respond(r, 200, "application/json", text, strlen(text));
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_respond_error(r, 503, "%s", msg);
}

void srv_respond_error(srv_req *r, int status, const char *fmt, ...)
{
    char msg[1024];
    char *body;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status == 503 && !r->retry_after)
        r->retry_after = 1;
    body = oip_error_body(msg);
    respond_body(r, status, body);
}

/* add_body: buffer a chunk, up to body_limit; past it too_large is set
 * (and no_mem when memory-budget cannot hold it): on_request refuses the
 * body then (refuse_body). */
static void add_body(srv_req *r, const char *data, size_t n)
{
    if (r->too_large || r->no_mem)
        return;
    if (n > r->body_limit - r->body_len) {
        r->too_large = 1;
        return;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        /* a known length is allocated (and was reserved) at once */
        size_t cap = r->body_cap ? r->body_cap : r->expect ? r->expect + 1 : 16384;
        char *nb;
        while (cap < r->body_len + n + 1)
            cap = cap > r->body_limit / 2 ? r->body_limit + 1 : cap * 2;
        if (cap > r->mem) { /* a chunked body grows: reserve as it does */
            if (srv_mem_take(r->s, cap - r->mem) < 0) {
                r->no_mem = 1;
                return;
            }
            r->mem = cap;
        }
        nb = realloc(r->body, cap);
        if (!nb) {
            r->no_mem = 1;
            return;
        }
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
}

/* refuse_body: r's chunked body passed its limit (a Content-Length over
 * it was answered from the head), or memory-budget ran out for it: 413
 * (503) now, written on the socket (srv_http__send_now) while the body
 * comes, and MHD closes the connection (MHD_NO, its line not logged); the
 * rest of the body is read and dropped (linger.c), so a client that reads
 * its answer only once its body is sent gets it rather than a reset, and
 * one that reads as it sends (curl, fetch) stops sending. */
static enum MHD_Result refuse_body(srv_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->dispatched = 1;
    if (r->no_mem)
        srv_http__no_memory(r);
    else
        srv_respond_error(r, 413, "body: over the limit of %zu bytes (%s)",
                          r->body_limit, r->limit_name);
    if (!ci || srv_http__send_now(r, ci->connect_fd) < 0)
        srv_log(r->s, "warn", "http: the %d answer to %s %s could not be "
                "written (its client reads nothing); connection closed",
                r->status, r->method_name, r->path);
    r->s->mhd_quiet = 1; /* MHD's "internal error": a close, as meant */
    return MHD_NO;
}

/* on_request: MHD's access handler, called repeatedly per request (loop
 * thread). The first call allocates r (srv_http__first_call, http_head.c:
 * route, framing, auth; may answer, at once or, for a request without a
 * body, at the next call); the next ones collect the
 * body (past its limit the answer is 413 at once: refuse_body); the last
 * one runs the route's handler, which answers or suspends the connection. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    s->mhd_calls++;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) /* no request to log: an answer made at start */
            return srv_http__queue_fixed(
                s, conn, srv_http__method(method) == SRV_OPTIONS,
                srv_cors_index(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              "Origin")));
        r->s = s;
        r->conn = conn;
        r->t0_ns = srv_now_ns();
        r->method = srv_http__method(method);
        r->late = s->draining;
        *con_cls = r;
        s->live_reqs++;
        srv_guard_begin(r);
        srv_http__first_call(r, url, method, version);
        /* an answer to a request without a body waits for the next call:
         * one queued now would close the connection (r->close) */
        return r->have_resp && r->close ? srv_http__queue(r) : MHD_YES;
    }
    if (r->cut_sent) { /* answered on its socket at the cut (srv_http_cut) */
        if (!upload) { /* its body ended: MHD has no answer to send */
            s->mhd_quiet = 1; /* not an error of attnd's */
            return MHD_NO;
        }
        r->body_seen += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    /* MHD 0.9.75 also calls with upload set and 0 bytes: after its 100
     * Continue to a request with Expect: 100-continue and no body, when
     * the next pipelined request is in its buffer (upload points at it).
     * That is not the last call (upload is NULL in it): a handler run or
     * an answer queued now is refused by MHD, which then closes the
     * connection, the request carried out and unanswered. */
    if (upload && !*upload_size)
        return MHD_YES;
    if (r->queued)
        return MHD_YES;
    if (r->have_resp)
        return srv_http__queue(r);
    if (*upload_size) {
        add_body(r, upload, *upload_size);
        r->body_seen += *upload_size;
        *upload_size = 0;
        return r->too_large || r->no_mem ? refuse_body(r) : MHD_YES;
    }
    if (r->suspended)
        return MHD_YES;
    r->dispatched = 1;
    r->route->fn(r);
    return r->have_resp ? srv_http__queue(r) : MHD_YES;
}

/* on_completed: the one place an srv_req is freed: detaches a running
 * infer job, counts the status, writes the log line, frees r. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    (void)conn;
    if (!r)
        return;
    *con_cls = NULL;
    if (r->changed && r->status && r->status < 400 &&
        code != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        srv_log(s, "warn", "http: %s %s was carried out (%d), but its client "
                "went before the answer was sent (libmicrohttpd takes a "
                "half-closed connection for one that went)",
                r->method_name, r->path, r->status);
    if (r->job)
        srv_sched_detach(r);
    if (r->cut_sent > 0)
        s->n_cut_open--;
    else if (r->have_resp)
        s->n_answered--;
    srv_guard_end(r);
    srv_mem_give(s, r->mem + r->resp_mem);
    if (r->waiting)
        srv_maps_wait_cancel(r);
    if (r->too_slow) /* the guard closed it: its body came too slowly */
        r->status = 408;
    else if (r->went || (code == MHD_REQUEST_TERMINATED_CLIENT_ABORT &&
                         !r->dispatched && !r->have_resp))
        r->status = 499; /* its client went, before its body was complete
                            (MHD saw the end, or the guard's sweep did) or
                            while it waited or ran */
    if (r->status >= 100 && r->status < 600)
        s->http.by_status[r->status]++;
    if (r->route || r->status)
        srv_log_request(s, r);
    free(r->body);
    free(r->resp);
    free(r);
    s->live_reqs--;
    srv_check_stop(s);
}

/* repeats_line: m's count of unlogged repeats, logged. */
static void repeats_line(srv *s, struct srv_mhd_msg *m, uint64_t now)
{
    if (!m->repeats)
        return;
    srv_log(s, "warn", "http: %s (%llu more time%s in %.1f s)", m->text,
            m->repeats, m->repeats == 1 ? "" : "s",
            (double)(now - m->last_ns) / 1e9);
    m->repeats = 0;
    m->last_ns = now;
}

/* mhd_logger: libmicrohttpd's messages, as warnings. One that repeats
 * within a second of its last line is counted instead (a client sending
 * malformed requests in a loop got two lines each, thousands a second:
 * "Failed to parse `Content-Length' header", then "Error processing
 * request"); srv_http_log_flush writes the counts. The last SRV_MHD_MSGS
 * different messages are told apart; a new one takes the place of the
 * one logged longest ago, whose count is logged first. Loop thread. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    srv *s = cls;
    struct srv_mhd_msg *m = s->mhd_msgs, *old = m;
    char msg[sizeof m->text];
    uint64_t now = srv_now_ns();
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    if (s->mhd_quiet &&
        strncmp(msg, "Application reported internal error", 35) == 0) {
        s->mhd_quiet = 0;
        return;
    }
    for (; m < s->mhd_msgs + SRV_MHD_MSGS; m++) {
        if (strcmp(msg, m->text) == 0) {
            if (now - m->last_ns < 1000000000ull) {
                m->repeats++;
                return;
            }
            old = m;
            break;
        }
        if (m->last_ns < old->last_ns)
            old = m;
    }
    repeats_line(s, old, now);
    srv_log(s, "warn", "http: %s", msg);
    memcpy(old->text, msg, sizeof msg);
    old->last_ns = now;
}

void srv_http_log_flush(srv *s, int now_too)
{
    uint64_t now = srv_now_ns();
    for (int i = 0; i < SRV_MHD_MSGS; i++)
        if (now_too || now - s->mhd_msgs[i].last_ns >= 1000000000ull)
            repeats_line(s, &s->mhd_msgs[i], now);
}

/* hexval: the value of hex digit c, or -1. */
static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* unescape: libmicrohttpd's %XX decoding of the path and of each query key
 * and value, in place, but "%00" stays as written: decoded, its NUL would
 * end the string, so "/v2/health/live%00junk" was served as
 * "/v2/health/live" (and a proxy's rules had seen another path). Left as
 * written it matches no route (404) and no name. The new length. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    char *w = s;
    int hi, lo;
    (void)cls, (void)c;
    for (const char *r = s; *r; r++) {
        if (r[0] == '%' && (hi = hexval(r[1])) >= 0 &&
            (lo = hexval(r[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi << 4 | lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

/*
 * srv_http_start: bind host:port (http_accept.c accepts on it), start MHD
 * in external-epoll mode with no listener of its own and hook its fd into
 * the loop. Prints the bound address. 0 or -1 with err.
 */
int srv_http_start(srv *s, char *err)
{
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET;
    int v6;
    if (srv_accept_listen(&s->accept, "port", s->cfg.port, &s->port, &v6, err) < 0)
        return -1;
    if (v6)
        flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(s->cfg.max_connections + SRV_CONN_HEADROOM),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, srv_guard_notify, s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
    info = s->mhd ? MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!info) {
        snprintf(err, SRV_ERRMAX, "libmicrohttpd did not start (%s)",
                 s->mhd ? "no epoll support" : strerror(errno));
        goto fail;
    }
    if (srv_http__answers_make(s) < 0) {
        snprintf(err, SRV_ERRMAX, "out of memory for the fixed answers");
        goto fail;
    }
    if (srv_guard_start(s) < 0) {
        snprintf(err, SRV_ERRMAX, "out of memory for the table of "
                 "connections per address (lower max-connections)");
        srv_http__answers_free(s);
        goto fail;
    }
    if (srv_linger_start(s) < 0) {
        snprintf(err, SRV_ERRMAX, "out of memory for lingering closes");
        srv_guard_stop(s);
        srv_http__answers_free(s);
        goto fail;
    }
    uv_timer_init(s->loop, &s->mhd_timer);
    s->mhd_timer.data = s;
    uv_idle_init(s->loop, &s->mhd_idle);
    s->mhd_idle.data = s;
    uv_poll_init(s->loop, &s->mhd_poll, info->epoll_fd);
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, on_mhd_poll);
    srv_http__accept_start(s);
    srv_kick(s);
    srv_log(s, "info", "listening on http://%s%s%s:%d", strchr(s->cfg.host, ':') ? "[" : "",
            s->cfg.host, strchr(s->cfg.host, ':') ? "]" : "", s->port);
    return 0;
fail:
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    close(s->accept.fd);
    s->accept.fd = -1;
    return -1;
}

/* close_mhd: stop MHD, closing every connection still open, and what
 * lingers; the REST door is gone. Every suspended connection must have
 * been resumed (the scheduler is idle). */
static void close_mhd(srv *s)
{
    uv_poll_stop(&s->mhd_poll);
    uv_close((uv_handle_t *)&s->mhd_poll, NULL);
    uv_close((uv_handle_t *)&s->mhd_timer, NULL);
    uv_close((uv_handle_t *)&s->mhd_idle, NULL);
    srv_linger_end(s, NULL); /* and MHD's closes below do not linger */
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    srv_http_log_flush(s, 1);
    srv_http__answers_free(s);
    srv_guard_stop(s);
}

/* unacked: the REST connections MHD still has whose answers their clients
 * have not acknowledged (SIOCOUTQ: in the kernel, unsent or sent and not
 * acknowledged; unknown counts), or with a request in progress (a 503 to
 * one read during the stop, being written) or its head partly sent
 * (srv_guard_head_coming: answered 503 once whole). MHD_stop_daemon shuts every
 * connection down both ways (SHUT_RDWR) and closes it: a byte the client
 * sends after that (a request pipelined as it reads) is answered with a
 * reset, which drops the rest of the answer the kernel still held. */
static int unacked(const srv *s, int *heads)
{
    int n = 0, h = 0;
    for (const srv_conn *c = s->conns; c; c = c->next) {
        int q, head;
        if (c->grpc || c->fd < 0 || c->closing)
            continue;
        q = c->req ? 1 : srv_sock_unacked(c->fd);
        head = !q && srv_guard_head_coming(c);
        n += q != 0 || head;
        h += head; /* of them, those with only a request head partly sent */
    }
    if (heads)
        *heads = h;
    return n;
}

/* the stop's wait (srv_http_stop), polled every STOP_POLL_MS */
#define STOP_POLL_MS 10

/* stop_done: the wait is over; cut: by the flush's end, and the
 * connections still unacknowledged are counted for main.c's line (a gRPC
 * one lingering here since before the stop as gRPC's) */
static void stop_done(srv *s, int cut)
{
    void (*done)(srv *) = s->http_stop_done;
    int h = 0, n = cut ? unacked(s, &h) : 0, grpc = 0; /* one walk */
    s->http_stop_done = NULL;
    uv_timer_stop(&s->http_stop_timer);
    uv_close((uv_handle_t *)&s->http_stop_timer, NULL);
    n += srv_linger_end(s, &grpc);
    close_mhd(s);
    if (cut) {
        s->stop_cut_rest += n - h; /* main.c logs them */
        s->stop_cut_heads += h;
        s->stop_cut_grpc += grpc;
    }
    done(s);
}

static void on_stop_poll(uv_timer_t *t)
{
    srv *s = t->data;
    uint64_t now = srv_now_ns(), left;
    int lingering = srv_linger_poll(s, NULL);
    srv_guard_shut_idle(s); /* one whose client has taken its answer now */
    if (now >= s->http_stop_end_ns) {
        stop_done(s, 1);
        return;
    }
    if (!lingering && !unacked(s, NULL)) {
        stop_done(s, 0);
        return;
    }
    left = (s->http_stop_end_ns - now + 999999u) / 1000000u;
    uv_timer_start(t, on_stop_poll, left < STOP_POLL_MS ? left : STOP_POLL_MS, 0);
}

int srv_http_stop(srv *s, uint64_t ms, void (*done)(srv *))
{
    if (!s->mhd)
        return 0;
    srv_http__accept_stop(s);
    srv_linger_stop(s, ms);
    if (!ms || (!srv_linger_poll(s, NULL) && !unacked(s, NULL))) {
        close_mhd(s);
        return 0;
    }
    /* MHD goes on with the connections meanwhile: what their clients send
     * is read, and a request answered 503 from its head (http_head.c),
     * its connection closed lingering (linger.c); an idle one is closed
     * now (MHD closes its connections only when it stops) */
    srv_guard_shut_idle(s);
    s->http_stop_done = done;
    s->http_stop_end_ns = srv_now_ns() + ms * 1000000u;
    uv_timer_init(s->loop, &s->http_stop_timer);
    s->http_stop_timer.data = s;
    uv_timer_start(&s->http_stop_timer, on_stop_poll,
                   ms < STOP_POLL_MS ? ms : STOP_POLL_MS, 0);
    return 1;
}

int srv_http_stop_cut(srv *s, int *grpc, int *heads)
{
    int n;
    *grpc = *heads = 0;
    if (!s->http_stop_done)
        return 0;
    n = srv_linger_poll(s, grpc);
    n += unacked(s, heads) - *heads - *grpc;
    stop_done(s, 0);
    return n;
}

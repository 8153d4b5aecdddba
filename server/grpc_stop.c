/*
 * grpc_stop.c - the gRPC door's drain (GOAWAY notice) and stop (GOAWAY,
 * shutdown after the last write, then what the client sends dropped until
 * it has acknowledged every byte or closed, within the flush's time; one
 * whose client does not read at all is closed at once, so is one at a
 * signal), and its open connections' count. Its connections' reading,
 * writing and closing are grpc_conn.c's. Loop thread only.
 */
#include "server/accept.h"
#include "server/grpc_int.h"

int srv_grpc_open_conns(const srv *s)
{
    return s->grpc ? s->grpc->n_conns : 0;
}

void srv_grpc_drain(srv *s)
{
    srv_grpc *g = s->grpc;
    gconn *c;
    if (!g)
        return;
    for (c = g->conns; c; c = c->next) {
        nghttp2_submit_shutdown_notice(c->h2);
        srv_grpc__schedule(c);
    }
}

/* delivered: has c's client acknowledged every byte (SIOCOUTQ: unsent and
 * unacknowledged ones, and the FIN's 1, whose ACK comes late, ~200 ms)?
 * Its kernel holds them all then: a reset cannot lose any (a read returns
 * them before the reset's error). Unknown (not Linux): no. */
static int delivered(gconn *c)
{
    uv_os_fd_t fd = -1;
    int n;
    if (!c->shut_done || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return 0;
    n = srv_sock_unacked(fd); /* linger.c */
    return n >= 0 && n <= 1;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    gconn *c = req->data;
    c->shut_done = 1;
    if (status < 0 || !c->discarding || delivered(c))
        srv_grpc__close_conn(c); /* (a discarding one: once all it sent is acked) */
}

/* on_stop_timeout, every STOP_POLL_MS: the connections whose clients have
 * everything are closed; once the flush's time has passed, all of them. */
#define STOP_POLL_MS 10
static void on_stop_timeout(uv_timer_t *t)
{
    srv_grpc *g = t->data;
    gconn *c, *next;
    uint64_t now = srv_now_ns(), left;
    for (c = g->conns; c; c = next) {
        next = c->next; /* (the last one's close closes t too) */
        if (delivered(c) || (now >= g->stop_end_ns && ++g->s->stop_cut_grpc))
            srv_grpc__close_conn(c); /* (the flush's end: main.c logs it) */
    }
    left = g->stop_timer_on ? (g->stop_end_ns - now + 999999u) / 1000000u : 0;
    if (left)
        uv_timer_start(t, on_stop_timeout, left < STOP_POLL_MS ? left : STOP_POLL_MS, 0);
}

int srv_grpc_stop_cut(srv *s)
{
    srv_grpc *g = s->grpc_stopping;
    int n = g ? g->n_conns : 0;
    while (g && g->conns)
        srv_grpc__close_conn(g->conns);
    return n;
}

int srv_grpc_stop(srv *s, uint64_t ms, void (*done)(srv *))
{
    srv_grpc *g = s->grpc;
    gconn *c, *next;
    if (!g)
        return 0;
    for (c = g->conns; c; c = next) {
        next = c->next;
        nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
        srv_grpc__flush(c);
        if (c->closing)
            continue;
        /* bytes libuv could not write yet (a client that does not read):
         * a shutdown would wait for them, and the exit with it, for good */
        if (!ms || uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp)) {
            srv_grpc__close_conn(c);
            continue;
        }
        /* what the client sends from now on is read and dropped (srv_grpc__on_read)
         * until it closes: the kernel writes the answers out meanwhile */
        c->discarding = 1;
        uv_timer_stop(&c->idle);
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_read_start((uv_stream_t *)&c->tcp, srv_grpc__on_alloc, srv_grpc__on_read);
        c->shut.data = c;
        if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
            srv_grpc__close_conn(c);
    }
    g->stopped = 1;
    uv_idle_stop(&g->idle);
    g->idle_on = 1; /* never restarted */
    uv_close((uv_handle_t *)&g->idle, srv_grpc__handle_closed);
    if (g->n_conns) { /* discarding ones: closed when delivered, or ms */
        uv_timer_init(s->loop, &g->stop_timer);
        g->stop_timer.data = g;
        g->handles++;
        g->stop_timer_on = 1;
        g->stop_end_ns = srv_now_ns() + ms * 1000000u;
        g->stop_done = done;
        s->grpc_stopping = g;
        uv_timer_start(&g->stop_timer, on_stop_timeout, ms < STOP_POLL_MS ? ms : STOP_POLL_MS, 0);
    }
    s->grpc = NULL;
    srv_accept_stop(&g->accept, srv_grpc__handle_closed);
    return g->stop_timer_on;
}

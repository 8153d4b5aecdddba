/*
 * http_accept.c - the REST door's listening socket, accepted by attnd
 * itself (accept.c) and handed to libmicrohttpd (MHD_add_connection).
 *
 * Why not MHD's own accept: when accept(2) fails for want of descriptors
 * (EMFILE, ENFILE) or kernel memory, libmicrohttpd 0.9.75 either busy-waits
 * (no REST connection open: the listener stays in its epoll set, so the
 * loop spun at 100% of a core and logged two lines per turn, 137,000 in
 * 2.5 s) or stops accepting until one of its own connections closes (a
 * keep-alive client kept the door shut long after gRPC connections had
 * given their descriptors back). accept.c pauses the listener instead and
 * logs the failures, as for the gRPC door. When MHD holds its connection
 * limit (max-connections + headroom; it would close each new one) the
 * listener first closes an idle keep-alive one (guard.c's eviction: a
 * connection that went idle after the accepts that filled the limit was
 * not asked then), then rests until one of its connections closes
 * (srv_http__accept_room, as libmicrohttpd's own accept did) or one goes
 * idle. A rest with nothing to close is logged (a line a second at most):
 * connections that wait without a word look like a server that hangs.
 *
 * Each connection holds SRV_HTTP_CONN_COST of memory-budget from its
 * accept until MHD closes it (its memory pool, allocated whole at the
 * accept), up to SRV_HTTP_CONN_RESERVE past a budget that requests have
 * filled (a health probe still gets in). One that finds no room is
 * answered 503 at once, before its
 * request is read (made at start: Retry-After, Connection: close, and
 * CORS when it can say it: refused_make), and
 * closed lingering (linger.c), so its client reads the 503 and not a
 * reset; counted (attnd_http_connections_refused_total) and logged, a
 * line a second at most, as the gRPC door refuses one (grpc_conn.c).
 *
 * Loop thread only.
 */
#include "server/accept.h"
#include "server/http_int.h"
#include "server/srv.h"
#include "server/linger.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert(1 + SRV_HTTP_CONN_COST <= SRV_BODY_SLACK,
               "a body of max-body and its connection fit a budget of "
               "max-body + SRV_BODY_SLACK");

#define REFUSED_BODY                                                          \
    "{\"error\": \"server: the memory for request bodies, connections and " \
    "unsent answers (memory-budget) is in use; this connection was not "     \
    "taken; retry shortly\"}"

/* refused_make: the 503 refuse sends, into s->refused: made at start, as
 * the request is not read then. With cors-origins, the CORS headers the
 * other answers carry, so a page of another origin sees the 503 and not a
 * CORS failure: Access-Control-Allow-Origin names the entry that allows
 * every origin it is sent to, "*" when the list has it, else its only
 * entry (a page of another origin is refused CORS by any answer); with
 * several entries and no "*" it cannot know which the client's is (the
 * other answers echo the request's Origin), and names none. */
static void refused_make(srv *s)
{
    const char *o = NULL;
    for (int i = 1; i < s->n_fixed && !o; i++)
        if (s->fixed[i].len == 1 && s->fixed[i].origin[0] == '*')
            o = "*";
    if (!o && s->n_fixed == 2 && s->fixed[1].len < SRV_ORIGIN_MAX)
        o = s->fixed[1].origin;
    /* (sized for the longest origin: it cannot be cut) */
    s->refused_len = (size_t)snprintf(
        s->refused, sizeof s->refused,
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n"
        "%s%s%s%s"
        "Content-Length: %zu\r\n"
        "\r\n" REFUSED_BODY,
        o ? "Access-Control-Allow-Origin: " : "", o ? o : "",
        o ? "\r\nAccess-Control-Expose-Headers: Retry-After\r\n" : "",
        s->n_fixed > 1 ? "Vary: Origin\r\n" : "", sizeof REFUSED_BODY - 1);
}

void srv_http__accept_room(srv *s)
{
    if (s->accept_full) {
        s->accept_full = 0;
        srv_accept_resume(&s->accept);
    }
}

/* room: MHD is under its connection limit; else an idle keep-alive
 * connection, which became idle after the accepts that filled the limit,
 * is closed (guard.c), and the listener rests until one closes (guard.c), as
 * MHD did. A rest with none to close is logged, a line a second at most. */
static int room(void *data)
{
    srv *s = data;
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    unsigned long long n;
    if (!i || i->num_connections <
                  (unsigned)(s->cfg.max_connections + SRV_CONN_HEADROOM))
        return 1;
    if (!srv_guard_make_room(s) && !s->accept_full &&
        (n = srv_every_due(&s->accept_full_log, srv_now_ns())))
        srv_log(s, "warn", "http: every connection is busy (max-connections "
                "%lld + %d headroom, none that can be closed: each has a "
                "request in progress or bytes not read yet; the listener "
                "rested %llu time%s since the last such line): new "
                "connections wait in the listen backlog until one closes; "
                "raise --max-connections",
                s->cfg.max_connections, SRV_CONN_HEADROOM, n, n == 1 ? "" : "s");
    s->accept_full = 1;
    srv_accept_pause(&s->accept, SRV_ACCEPT_RETRY_MS);
    return 0;
}

/* refuse: no memory-budget for fd's connection: the fixed 503, its end
 * (lingering: a request already sent is read and dropped, not reset),
 * counted and logged. */
static void refuse(srv *s, int fd, const struct sockaddr_storage *peer)
{
    srv_conn c;
    unsigned long long n;
    memset(&c, 0, sizeof c);
    c.fd = fd;
    c.peer = *peer;
    (void)send(fd, s->refused, s->refused_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    srv_linger_refused(s, fd, &c);
    close(fd);
    s->http.http_conns_refused++;
    if ((n = srv_every_due(&s->conn_refused_log, srv_now_ns())))
        srv_log(s, "warn", "http: %llu connection%s answered 503 at accept "
                "since the last such line: the memory for request bodies, "
                "connections and unsent answers (%lld bytes, memory-budget) "
                "is in use", n, n == 1 ? "" : "s", s->cfg.memory_budget);
}

/* take: MHD owns fd from here, and closes it itself on failure (its
 * connection limit, memory: it logs why). The connection's
 * SRV_HTTP_CONN_COST is taken first and handed to its srv_conn when MHD
 * tells it started (srv_guard_notify, within MHD_add_connection); given
 * back here when it did not. */
static void take(void *data, int fd, const struct sockaddr_storage *peer,
                 socklen_t len)
{
    srv *s = data;
    if (srv_mem_take_past(s, SRV_HTTP_CONN_COST, SRV_HTTP_CONN_RESERVE) < 0) {
        refuse(s, fd, peer);
        return;
    }
    s->conn_mem_pending = 1;
    MHD_add_connection(s->mhd, fd, (const struct sockaddr *)peer, len);
    if (s->conn_mem_pending) {
        s->conn_mem_pending = 0;
        srv_mem_give(s, SRV_HTTP_CONN_COST);
    }
    srv_kick(s);
}

void srv_http__accept_start(srv *s)
{
    refused_make(s);
    srv_accept_start(&s->accept, s, room, take);
}

void srv_http__accept_stop(srv *s)
{
    srv_accept_stop(&s->accept, NULL);
}

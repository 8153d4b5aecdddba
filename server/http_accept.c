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
 * Loop thread only.
 */
#include "server/srv.h"

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

/* take: MHD owns fd from here, and closes it itself on failure (its
 * connection limit, memory: it logs why). */
static void take(void *data, int fd, const struct sockaddr_storage *peer,
                 socklen_t len)
{
    srv *s = data;
    MHD_add_connection(s->mhd, fd, (const struct sockaddr *)peer, len);
    srv_kick(s);
}

void srv_http__accept_start(srv *s)
{
    srv_accept_start(&s->accept, s, room, take);
}

void srv_http__accept_stop(srv *s)
{
    srv_accept_stop(&s->accept, NULL);
}

/*
 * http_accept.c - the REST door's listening socket, accepted by attnd
 * itself and handed to libmicrohttpd (MHD_add_connection).
 *
 * Why not MHD's own accept: when accept(2) fails for want of descriptors
 * (EMFILE, ENFILE) or kernel memory, libmicrohttpd 0.9.75 either busy-waits
 * (no REST connection open: the listener stays in its epoll set, so the
 * loop spun at 100% of a core and logged two lines per turn, 137,000 in
 * 2.5 s) or stops accepting until one of its own connections closes (a
 * keep-alive client kept the door shut long after gRPC connections had
 * given their descriptors back). Here a failed accept stops polling the
 * listener for ACCEPT_RETRY_MS, as nginx does, and the door opens again
 * on its own once descriptors are free; connections that arrive meanwhile
 * wait in the listen backlog. It logs the first failure of a run of them
 * and then at most one line a second with the count, and a line when it
 * accepts again. When MHD holds its connection limit (max-connections +
 * headroom; it would close each new one) the listener rests until one of
 * its connections closes (srv_http__accept_room, as libmicrohttpd's own
 * accept did), so evictions (guard.c) make room at once.
 *
 * Loop thread only.
 */
#include "server/srv.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* A failed accept waits this long before the next (nginx: 500 ms). */
#define ACCEPT_RETRY_MS 100
/* Most connections accepted in one turn of the loop. */
#define ACCEPT_BATCH 64

static void on_listen(uv_poll_t *p, int status, int events);

static void on_retry(uv_timer_t *t)
{
    srv *s = t->data;
    if (s->listen_fd >= 0)
        uv_poll_start(&s->listen_poll, UV_READABLE, on_listen);
}

static void pause_accept(srv *s)
{
    uv_poll_stop(&s->listen_poll);
    uv_timer_start(&s->listen_retry, on_retry, ACCEPT_RETRY_MS, 0);
}

void srv_http__accept_room(srv *s)
{
    if (s->accept_full && s->listen_fd >= 0) {
        s->accept_full = 0;
        uv_timer_stop(&s->listen_retry);
        uv_poll_start(&s->listen_poll, UV_READABLE, on_listen);
    }
}

/* accept_failed: a run of failures logs its first one, then at most one
 * line a second with the count since the last line. */
static void accept_failed(srv *s, int e)
{
    struct rlimit rl;
    unsigned long long n;
    s->accept_fails++;
    if (!(n = srv_every_due(&s->accept_log, srv_now_ns())))
        return;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        rl.rlim_cur = RLIM_INFINITY;
    srv_log(s, "warn", "http: cannot accept a connection: %s (failed "
            "accepts since the last line: %llu; connections open, REST and "
            "gRPC: %d; descriptor limit %lld): accepting again every %d ms%s",
            strerror(e),
            n, s->n_conns,
            rl.rlim_cur == RLIM_INFINITY ? -1LL : (long long)rl.rlim_cur,
            ACCEPT_RETRY_MS,
            e == EMFILE || e == ENFILE ? " (raise ulimit -n, or lower "
            "--max-connections)" : "");
}

static int mhd_full(srv *s)
{
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i && i->num_connections >=
                    (unsigned)(s->cfg.max_connections + SRV_CONN_HEADROOM);
}

static void on_listen(uv_poll_t *p, int status, int events)
{
    srv *s = p->data;
    int n, added = 0;
    (void)status;
    (void)events;
    for (n = 0; n < ACCEPT_BATCH; n++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd;
        if (mhd_full(s)) { /* again when one closes (guard.c), as MHD did */
            s->accept_full = 1;
            pause_accept(s);
            break;
        }
        fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK)
                break;
            if (e == EINTR || e == ECONNABORTED || e == EPROTO ||
                e == EPERM) /* the client's trouble, or a firewall's */
                continue;
            accept_failed(s, e);
            pause_accept(s);
            break;
        }
        if (s->accept_fails) {
            srv_log(s, "info", "http: accepting again (%llu accepts had failed)",
                    (unsigned long long)s->accept_fails);
            s->accept_fails = 0;
            /* the next run's first failure gets its line at once */
            memset(&s->accept_log, 0, sizeof s->accept_log);
        }
        /* MHD owns fd from here, and closes it itself on failure (its
         * connection or per-address limit, memory: it logs why) */
        MHD_add_connection(s->mhd, fd, (struct sockaddr *)&ss, len);
        added = 1;
    }
    if (added)
        srv_kick(s);
}

int srv_http__listen(srv *s, const struct sockaddr *sa, socklen_t salen,
                     char *err)
{
    int one = 1, fd, e;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* SO_REUSEPORT only when asked: otherwise a second attnd on the port
     * would silently take half of the connections */
    if (s->cfg.reuse_port &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    if (sa->sa_family == AF_INET6) /* as libmicrohttpd did: IPv6 only */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, sa, salen) < 0 || listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        goto fail;
    s->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
    s->listen_fd = fd;
    return 0;
fail:
    e = errno;
    if (fd >= 0)
        close(fd);
    srv_listen_err(s, err, "port", s->cfg.port, e == EADDRINUSE, strerror(e));
    return -1;
}

void srv_http__accept_start(srv *s)
{
    uv_timer_init(s->loop, &s->listen_retry);
    s->listen_retry.data = s;
    uv_poll_init(s->loop, &s->listen_poll, s->listen_fd);
    s->listen_poll.data = s;
    uv_poll_start(&s->listen_poll, UV_READABLE, on_listen);
}

void srv_http__accept_stop(srv *s)
{
    if (s->listen_fd < 0)
        return;
    uv_poll_stop(&s->listen_poll);
    uv_close((uv_handle_t *)&s->listen_poll, NULL);
    uv_close((uv_handle_t *)&s->listen_retry, NULL);
    close(s->listen_fd);
    s->listen_fd = -1;
}

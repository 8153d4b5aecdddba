/*
 * accept.c - a door's listening socket, accepted by attnd itself: the
 * REST door's (http_accept.c, each connection to libmicrohttpd) and the
 * gRPC door's (grpc_conn.c, each to a uv_tcp_t and an nghttp2 session).
 *
 * Why not the libraries' own accept: when accept(2) fails for want of
 * descriptors (EMFILE, ENFILE) or kernel memory, libmicrohttpd 0.9.75
 * busy-waited or stopped accepting until one of its connections closed
 * (http_accept.c), and libuv's uv_listen accepts the waiting connections
 * with a descriptor it keeps for that and closes them at once, silently
 * (its "EMFILE trick": their clients see the end). Here a failed accept
 * stops polling the listener for SRV_ACCEPT_RETRY_MS, as nginx does, and
 * the door opens again on its own once descriptors are free; connections
 * that arrive meanwhile wait in the listen backlog. It logs the first
 * failure of a run of them and then at most one line a second with the
 * count, and a line when it accepts again.
 *
 * Loop thread only.
 */
#include "server/accept.h"
#include "server/srv.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Most connections accepted in one turn of the loop. */
#define ACCEPT_BATCH 64

void srv_accept_init(srv_accept *a, srv *s, const char *door)
{
    memset(a, 0, sizeof *a);
    a->s = s;
    a->door = door;
    a->fd = -1;
}

/* listen_err: err (SRV_ERRMAX) for a listener on --host and --<flag>
 * port that could not start: in_use (EADDRINUSE), else why. */
static void listen_err(const srv *s, char *err, const char *flag, long long port,
                       int in_use, const char *why)
{
    char var[32];
    size_t i;
    for (i = 0; flag[i] && i < sizeof var - 1; i++) /* grpc-port: GRPC_PORT */
        var[i] = flag[i] == '-' ? '_' : (char)toupper((unsigned char)flag[i]);
    var[i] = 0;
    if (in_use)
        snprintf(err, SRV_ERRMAX, "--host %s --%s %lld: address in use (another "
                 "server listens there): pick a free port with --%s or "
                 "ATTND_%s, or run both servers with --reuse-port 1 to share "
                 "it on purpose", s->cfg.host, flag, port, flag, var);
    else
        snprintf(err, SRV_ERRMAX, "--host %s --%s %lld: cannot listen (%s; in "
                 "use, or not an address of this machine)", s->cfg.host, flag,
                 port, why);
}

/* listen_on: a's socket on sa, its bound port in *port; 0 or -errno. */
static int listen_on(srv_accept *a, const struct sockaddr *sa, socklen_t salen,
                     int *port)
{
    int one = 1, fd, e;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* SO_REUSEPORT only when asked: otherwise a second attnd on the port
     * would silently take half of the connections */
    if (a->s->cfg.reuse_port &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    if (bind(fd, sa, salen) < 0 || listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        goto fail;
    *port = ntohs(ss.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *)&ss)->sin6_port
                      : ((struct sockaddr_in *)&ss)->sin_port);
    a->fd = fd;
    return 0;
fail:
    e = errno;
    close(fd);
    return -e;
}

int srv_accept_listen(srv_accept *a, const char *flag, long long port,
                      int *bound, int *v6, char *err)
{
    const srv *s = a->s;
    struct addrinfo hints, *ai = NULL;
    char ps[24];
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%lld", port < 0 ? 0 : port);
    rc = getaddrinfo(s->cfg.host, ps, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(err, SRV_ERRMAX, "--host %s: cannot resolve (%s)", s->cfg.host,
                 gai_strerror(rc));
        return -1;
    }
    if (v6)
        *v6 = ai->ai_family == AF_INET6;
    rc = listen_on(a, ai->ai_addr, ai->ai_addrlen, bound);
    freeaddrinfo(ai);
    if (rc < 0) {
        listen_err(s, err, flag, port, rc == -EADDRINUSE, strerror(-rc));
        return -1;
    }
    return 0;
}

static void on_ready(uv_poll_t *p, int status, int events);

static void on_retry(uv_timer_t *t)
{
    srv_accept *a = (srv_accept *)(void *)((char *)t - offsetof(srv_accept, retry));
    if (a->fd >= 0)
        uv_poll_start(&a->poll, UV_READABLE, on_ready);
}

void srv_accept_pause(srv_accept *a, unsigned ms)
{
    uv_poll_stop(&a->poll);
    uv_timer_start(&a->retry, on_retry, ms, 0);
}

void srv_accept_resume(srv_accept *a)
{
    if (a->fd < 0)
        return;
    uv_timer_stop(&a->retry);
    uv_poll_start(&a->poll, UV_READABLE, on_ready);
}

/* failed: a run of failures logs its first one, then at most one line a
 * second with the count since the last line. */
static void failed(srv_accept *a, int e)
{
    struct rlimit rl;
    unsigned long long n;
    a->fails++;
    if (!(n = srv_every_due(&a->log, srv_now_ns())))
        return;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        rl.rlim_cur = RLIM_INFINITY;
    srv_log(a->s, "warn", "%s: cannot accept a connection: %s (failed "
            "accepts since the last line: %llu; connections open, REST and "
            "gRPC: %d; descriptor limit %lld): accepting again every %d ms%s",
            a->door, strerror(e), n, a->s->n_conns,
            rl.rlim_cur == RLIM_INFINITY ? -1LL : (long long)rl.rlim_cur,
            SRV_ACCEPT_RETRY_MS,
            e == EMFILE || e == ENFILE ? " (raise ulimit -n, or lower "
            "--max-connections)" : "");
}

/* on_ready: the listener is readable: accept what waits, up to
 * ACCEPT_BATCH, each while the door has room, each to the door. An accept
 * that fails for want of descriptors or kernel memory (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM, or what else the kernel says of itself: a busy loop
 * would not cure it) pauses the listener; one whose connection went
 * before it was accepted (aborted, a firewall's refusal, a signal) is
 * passed over. */
static void on_ready(uv_poll_t *p, int status, int events)
{
    srv_accept *a = (srv_accept *)(void *)((char *)p - offsetof(srv_accept, poll));
    int n;
    (void)status;
    (void)events;
    for (n = 0; n < ACCEPT_BATCH && a->room(p->data); n++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(a->fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK)
                break;
            if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM)
                continue;
            failed(a, e);
            srv_accept_pause(a, SRV_ACCEPT_RETRY_MS);
            break;
        }
        if (a->fails) {
            srv_log(a->s, "info", "%s: accepting again (%llu accept%s had failed)",
                    a->door, a->fails, a->fails == 1 ? "" : "s");
            a->fails = 0;
            /* the next run's first failure gets its line at once */
            memset(&a->log, 0, sizeof a->log);
        }
        if (srv_guard_per_ip_full(a->s, &ss)) {
            close(fd); /* its client sees the end at once */
            continue;
        }
        a->take(p->data, fd, &ss, len);
    }
}

void srv_accept_start(srv_accept *a, void *data, int (*room)(void *data),
                      void (*take)(void *data, int fd,
                                   const struct sockaddr_storage *peer,
                                   socklen_t len))
{
    a->room = room;
    a->take = take;
    uv_timer_init(a->s->loop, &a->retry);
    a->retry.data = data;
    uv_poll_init(a->s->loop, &a->poll, a->fd);
    a->poll.data = data;
    uv_poll_start(&a->poll, UV_READABLE, on_ready);
}

void srv_accept_stop(srv_accept *a, uv_close_cb on_closed)
{
    if (a->fd < 0)
        return;
    uv_poll_stop(&a->poll);
    uv_close((uv_handle_t *)&a->poll, on_closed);
    uv_close((uv_handle_t *)&a->retry, on_closed);
    close(a->fd);
    a->fd = -1;
}

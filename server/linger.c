/*
 * linger.c - a closed connection's last bytes: read, not reset.
 *
 * When a process closes a TCP socket with bytes it has not read, the
 * kernel answers with a reset instead of the end of the stream, drops what
 * of its own answer is still queued to go, and the client's kernel may drop
 * what came but was not read yet. attnd closes connections whose client may
 * still send: after a Connection: close or HTTP/1.0 request with more
 * pipelined behind it, after an answer from the head of a request whose
 * body was not read (401, 404, 413, ...), at connection-timeout. Its
 * client then lost the answer (a 2.4 MB answer behind 600 KB of pipelined
 * requests: 128 KB of it came, then ECONNRESET).
 *
 * So the socket lingers, as Apache's and nginx's do: when MHD (or libuv,
 * for the gRPC door) is about to close a connection whose client has not
 * ended its side, srv_linger_close dups the socket, sends its end (shutdown
 * SHUT_WR, after every byte already queued) and reads and discards what
 * comes until the client ends its side too, and then closes it. A client
 * cannot make that cost more than a body attnd would read: a socket
 * lingers for linger-ms at most and discards at most max-body bytes, or
 * the Content-Length of a body answered 413 from its head when that is
 * more (its client may read the 413 only once the body is sent: node:http,
 * Python's requests; a 401 does not earn it), then it closes, reset or
 * not; one read (64 KiB) a readable event, so the
 * loop serves others in between. At most max-connections sockets linger
 * at once, and at most max-connections-per-ip of one client address; past
 * either a socket closes as before. Connections answered 503 at accept
 * take at most half of them (max-connections / 2): a flood of those held
 * every one, and a legitimate client's 413 from the head, closed at once,
 * was lost to a reset (node:http: EPIPE). Lingering sockets do not count against
 * their client's new connections: one that closes a connection as its
 * answer ends and opens the next would find it refused until the loop had
 * read that end. A socket whose client had ended its side (the usual close
 * of a keep-alive connection), or that the guard shut down
 * (header-timeout, min-body-rate, an eviction), is not kept: one
 * recv(MSG_PEEK) tells, or the guard's own flag.
 *
 * At the stop (srv_linger_stop) the set changes its rule: a socket
 * lingers for as long as its client has not acknowledged every byte of
 * its answers (SIOCOUTQ), at most until the stop's end (the flush's time
 * left), whatever linger-ms is (0 too), and one whose client holds them
 * all closes at once, so that nothing waits for an idle client: those
 * already lingering (gRPC ones too, closed before the stop: counted as
 * gRPC's), and the REST connections MHD closes during the stop (a 503 to
 * a request pipelined after the signal, http.c). A gRPC connection closed
 * from then on is not kept: grpc_conn.c waits for its own. The stop's wait
 * (http.c) ends them: the set's timer does not. Loop thread.
 */
#include "server/linger.h"
#include "server/srv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#ifdef __linux__
#include <linux/sockios.h> /* SIOCOUTQ */
#endif
#include <unistd.h>

typedef struct lg lg;
struct lg {
    uv_poll_t poll;
    int fd;
    uint64_t until_ns;
    unsigned long long left; /* bytes it may still discard (max-body) */
    struct sockaddr_storage peer;
    srv_linger *set;
    lg *prev, *next;
    int refused;     /* answered 503 at accept (srv_linger_refused) */
    int grpc;        /* a gRPC connection's (grpc_conn.c closed it) */
};

struct srv_linger {
    uv_timer_t timer;
    lg *head, *tail; /* by until_ns: every socket gets the same time */
    int n;           /* on the list */
    int n_refused;   /* of them, refused at accept: max-connections / 2 */
    int handles;     /* open uv handles, the timer included */
    uint64_t stop_end_ns; /* srv_linger_stop: the stop's rule, until then */
    int stopping;
    unsigned long long kept, cut; /* lingered; ended by linger-ms or max-body */
};

int srv_sock_unacked(int fd)
{
#ifdef SIOCOUTQ
    int n = 0;
    if (fd >= 0 && ioctl(fd, SIOCOUTQ, &n) == 0)
        return n;
#else
    (void)fd;
#endif
    return -1;
}

int srv_sock_unread(int fd)
{
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* delivered: has a lingering socket's client acknowledged every byte of
 * its answers? Its FIN's own 1 is not waited for (its ACK may come late,
 * ~200 ms). Unknown (not Linux): no. */
static int delivered(int fd)
{
    int n = srv_sock_unacked(fd);
    return n >= 0 && n <= 1;
}

/* one buffer for every discarded byte: the loop thread alone reads */
static char scratch[65536];

static void set_closed(uv_handle_t *h)
{
    srv_linger *set = h->data;
    if (--set->handles == 0 && set->stopping)
        free(set);
}

static void lg_closed(uv_handle_t *h)
{
    lg *l = h->data;
    srv_linger *set = l->set;
    free(l);
    if (--set->handles == 0 && set->stopping)
        free(set);
}

/* finish: take l off the list and close its socket */
static void finish(lg *l)
{
    srv_linger *set = l->set;
    if (l->prev)
        l->prev->next = l->next;
    else
        set->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        set->tail = l->prev;
    set->n--;
    set->n_refused -= l->refused;
    uv_close((uv_handle_t *)&l->poll, lg_closed); /* stops the poll */
    close(l->fd);
}

/* lingering_of: peer's sockets lingering now (a walk: at most
 * max-connections, and only when a close would linger) */
static long long lingering_of(const srv_linger *set,
                              const struct sockaddr_storage *peer)
{
    long long n = 0;
    for (const lg *l = set->head; l; l = l->next)
        n += srv_guard_same_client(&l->peer, peer);
    return n;
}

static void on_timer(uv_timer_t *t);

/* arm: the timer at the oldest socket's end (rounded up: a timer re-armed
 * at 0 from its own callback runs again before the loop polls). Not under
 * the stop's rule: the stop's wait (http.c) ends those sockets at its end
 * and counts them (srv_linger_end); this timer, armed for the same moment,
 * often ran first, closed them as linger-ms's and the stop then reported
 * none ("stop-flush-ms passed: closed 1 REST connection ..." missing). */
static void arm(srv_linger *set)
{
    uint64_t now, ms = 1;
    if (!set->head || set->stop_end_ns) {
        uv_timer_stop(&set->timer);
        return;
    }
    now = srv_now_ns();
    if (set->head->until_ns > now)
        ms = (set->head->until_ns - now + 999999) / 1000000;
    uv_timer_start(&set->timer, on_timer, ms, 0);
}

static void on_timer(uv_timer_t *t)
{
    srv_linger *set = t->data;
    uint64_t now = srv_now_ns();
    while (set->head && set->head->until_ns <= now) {
        set->cut++;
        finish(set->head);
    }
    arm(set);
}

/* on_readable: one read (level-triggered: the rest comes at the next
 * turn of the loop); the client's end, an error or max-body spent ends it */
static void on_readable(uv_poll_t *p, int status, int events)
{
    lg *l = p->data;
    ssize_t n;
    (void)events;
    if (status < 0) {
        finish(l);
        return;
    }
    n = read(l->fd, scratch, sizeof scratch);
    if (n > 0 && (unsigned long long)n < l->left) {
        l->left -= (unsigned long long)n;
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n > 0)
        l->set->cut++;
    finish(l);
}

int srv_linger_start(srv *s)
{
    srv_linger *set = calloc(1, sizeof *set); /* linger-ms 0: the stop's */
    if (!set)
        return -1;
    uv_timer_init(s->loop, &set->timer);
    set->timer.data = set;
    set->handles = 1;
    s->linger = set;
    return 0;
}

static void linger(srv *s, int fd, const srv_conn *c, int refused)
{
    srv_linger *set = s->linger;
    char b;
    ssize_t n;
    lg *l;
    int dup_fd;
    if (!set || set->stopping || fd < 0 || c->closing)
        return;
    if (set->stop_end_ns) { /* the stop: only answers not yet acknowledged */
        if (c->grpc || delivered(fd))
            return;
    } else if (!s->cfg.linger_ms || set->n >= s->cfg.max_connections ||
               (refused && set->n_refused >= s->cfg.max_connections / 2)) {
        return;
    }
    /* 0: the client ended its side (or the guard shut this one down);
     * an error: it is gone. Only "would block" or bytes waiting linger. */
    n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        return;
    if (!set->stop_end_ns && s->cfg.max_conn_per_ip &&
        lingering_of(set, &c->peer) >= s->cfg.max_conn_per_ip)
        return;
    l = calloc(1, sizeof *l);
    if (!l)
        return;
    dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0 || uv_poll_init(s->loop, &l->poll, dup_fd) < 0) {
        if (dup_fd >= 0)
            close(dup_fd);
        free(l);
        return;
    }
    shutdown(dup_fd, SHUT_WR);
    l->fd = dup_fd;
    l->peer = c->peer;
    l->left = (unsigned long long)s->cfg.max_body;
    if (c->body_unread > l->left) /* the body a 413 from its head left */
        l->left = c->body_unread;
    l->set = set;
    l->refused = refused;
    l->grpc = c->grpc;
    set->n_refused += refused;
    l->poll.data = l;
    l->until_ns = set->stop_end_ns ? set->stop_end_ns
                                   : srv_now_ns() + (uint64_t)s->cfg.linger_ms * 1000000u;
    l->prev = set->tail;
    if (set->tail)
        set->tail->next = l;
    else
        set->head = l;
    set->tail = l;
    set->n++;
    set->handles++;
    set->kept++;
    uv_poll_start(&l->poll, UV_READABLE | UV_DISCONNECT, on_readable);
    if (set->head == l)
        arm(set);
}

void srv_linger_close(srv *s, int fd, const srv_conn *c)
{
    linger(s, fd, c, 0);
}

void srv_linger_refused(srv *s, int fd, const srv_conn *c)
{
    linger(s, fd, c, 1);
}

void srv_linger_stop(srv *s, uint64_t ms)
{
    srv_linger *set = s->linger;
    if (!set)
        return;
    set->stop_end_ns = srv_now_ns() + ms * 1000000u + 1; /* never 0 */
    for (lg *l = set->head; l; l = l->next)
        l->until_ns = set->stop_end_ns; /* the same for all: still in order */
    srv_linger_poll(s, NULL);
    arm(set);
}

int srv_linger_poll(srv *s, int *grpc)
{
    srv_linger *set = s->linger;
    lg *l, *next;
    if (grpc)
        *grpc = 0;
    if (!set)
        return 0;
    for (l = set->head; l; l = next) {
        next = l->next;
        if (delivered(l->fd))
            finish(l);
        else if (grpc)
            *grpc += l->grpc;
    }
    return set->n;
}

int srv_linger_end(srv *s, int *grpc)
{
    srv_linger *set = s->linger;
    int unacked = 0;
    if (grpc)
        *grpc = 0;
    if (!set)
        return 0;
    set->stopping = 1;
    while (set->head) {
        if (!delivered(set->head->fd)) {
            if (set->head->grpc && grpc)
                ++*grpc;
            else
                unacked++;
        }
        finish(set->head);
    }
    uv_close((uv_handle_t *)&set->timer, set_closed);
    s->linger = NULL;
    return unacked;
}

void srv_linger_counts(const srv *s, int *now, unsigned long long *kept,
                       unsigned long long *cut)
{
    const srv_linger *set = s->linger;
    *now = set ? set->n : 0;
    *kept = set ? set->kept : 0;
    *cut = set ? set->cut : 0;
}

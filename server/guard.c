/*
 * guard.c - what one client may hold: slots and memory.
 *
 * Connections of both doors share one list and one set of rules. MHD tells
 * us when a REST one opens and closes (srv_guard_notify); grpc_conn.c adds
 * and removes its own (srv_guard_add/srv_guard_remove, an srv_conn inside
 * its connection). A sweep timer closes (shutdown(2): MHD then sees the end
 * and cleans up) a connection whose request head has not arrived within
 * header-timeout seconds of its opening or of its previous answer, and one
 * whose body arrives slower than min-body-rate bytes/s on average once
 * header-timeout has passed since its head (its request logged and counted
 * 408, http.c). A REST answer is over for the guard (and that clock
 * starts) when its client has it, not when MHD has handed it to the
 * kernel: while the client has not acknowledged every byte (SIOCOUTQ) it
 * is reading, not slow to send, and its clock runs from the last sweep
 * that saw it take more (delivering); one that takes nothing of its
 * answer for header-timeout is closed (logged as such), so a client that
 * never reads holds the connection no longer (while MHD still writes the
 * answer, connection-timeout bounds it, the answer counted against
 * memory-budget until sent). The same sweep asks the socket of each REST
 * request whose work waits or runs (its connection suspended: MHD does
 * not read it) whether its client went, and if so drops that work (sched.c,
 * srv_sched_client_went). It also asks, one poll(2) for up to PEEK_MAX of
 * them, the REST connections that MHD reads but that may hold an end it
 * missed (libmicrohttpd's edge-triggered epoll does not see a FIN that
 * arrives with the last data): those whose request's body is still coming
 * and those with no request (idle, or a head coming), once a sweep old. One
 * whose client closed or reset it, every byte it sent read, can send no
 * more: it is closed, a request on it logged 499 (its body can never be
 * complete) and its Content-Length reservation given back, instead of all
 * that waiting for header-timeout or min-body-rate. A gRPC connection has
 * header-timeout seconds from its opening to complete the HTTP/2 preface
 * and the HEADERS of its first call (between calls --connection-timeout
 * rules, grpc_conn.c), and a message must arrive at min-body-rate once
 * header-timeout has passed since its first byte (a unary call's: since its
 * HEADERS; srv_conn.slow asks grpc_conn.c). A connection accepted from an
 * address that holds max-connections-per-ip already, both doors' together,
 * is closed at once (accept.c asks srv_guard_per_ip_full, which looks the
 * address up in s->ips: one count per address of its open connections that
 * are not closing, kept as they are added, shut down and removed, so an
 * accept costs a hash, not a walk of every connection); each door accepts
 * up to max-connections + a small headroom, and a connection that takes the
 * total of both past max-connections evicts the one that has waited longest
 * for its first request (a slow client; idle keep-alive connections of
 * served clients go after those), so slow clients cannot lock out new ones.
 * Closing is shutdown(2) for both: MHD or libuv then sees the end and
 * cleans up.
 *
 * Memory: srv_mem_take/srv_mem_give count buffered bodies (reserved from
 * Content-Length before a byte is read, or as a chunked body grows) and
 * decoded requests with their outputs (sched.c) against memory-budget;
 * past it a request gets 503 with Retry-After instead of more memory.
 * Encoded answers count too (srv_mem_hold: they exist already, so they
 * may take the total past the budget) until sent: a REST answer from
 * srv_respond until MHD completes the request, a gRPC one while its bytes
 * wait in a call's queue or in a write (grpc.c, grpc_conn.c), so clients
 * that do not read their answers make new requests get 503, not memory.
 */
#include "server/guard_int.h"
#include "server/http_int.h"
#include "server/linger.h"
#include "server/srv.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>

#define SWEEP_MS 250
#define PEEK_MAX 64

/* unread: 1 when bytes wait in c's socket that MHD has not read yet (the
 * loop was busy): its state here is stale, so it is not judged now. */
static int unread(const srv_conn *c)
{
    return srv_sock_unread(c->fd); /* linger.c */
}

int srv_mem_take_past(srv *s, size_t n, size_t past)
{
    size_t cap = (size_t)s->cfg.memory_budget + past;
    if (s->cfg.memory_budget && (s->mem_used >= cap || n > cap - s->mem_used))
        return -1;
    s->mem_used += n;
    if (s->mem_used > s->mem_tick_peak)
        s->mem_tick_peak = s->mem_used;
    return 0;
}

int srv_mem_take(srv *s, size_t n)
{
    return srv_mem_take_past(s, n, 0);
}

void srv_mem_hold(srv *s, size_t n)
{
    s->mem_used += n;
    if (s->mem_used > s->mem_tick_peak)
        s->mem_tick_peak = s->mem_used;
}

void srv_mem_give(srv *s, size_t n)
{
    s->mem_used = n > s->mem_used ? 0 : s->mem_used - n;
}

static int busy(const srv_conn *c)
{
    return c->req || c->calls;
}

/* srv_conns_at_most: are at most max open connections likely to send a
 * request soon? Every one counts but a page's long poll parked on a map
 * (it sends nothing until answered) and, with inline-idle-ms, one with no
 * request in progress that has had none for that long (a scraper's or a
 * browser's keep-alive). Those in progress are counted (n_busy); the idle
 * ones stand in the list newest first (went_idle), so only the fresh ones
 * are walked, and only when more than max are open. */
int srv_conns_at_most(const srv *s, int max)
{
    uint64_t now, idle = (uint64_t)s->cfg.inline_idle_ms * 1000000u;
    int n = s->n_conns - s->n_waiters;
    const srv_conn *c;
    if (n <= max || !idle)
        return n <= max;
    now = srv_now_ns();
    n = s->n_busy - s->n_waiters;
    for (c = s->conns; c && n <= max; c = c->next)
        if (!busy(c)) {
            if (now - c->t_wait_ns >= idle)
                break; /* and every idle one after it */
            n++;
        }
    return n <= max;
}

/* went_busy: c's request or call begins; went_idle: its last one is
 * over, and c moves to the front of the list, so the idle connections
 * stand in the order they became idle. A connection off the list (after
 * srv_guard_stop) is not counted. */
static void went_busy(srv_conn *c)
{
    if (!busy(c) && c->linked)
        c->s->n_busy++;
}

static void went_idle(srv_conn *c)
{
    srv *s = c->s;
    c->t_wait_ns = srv_now_ns();
    if (!c->linked)
        return;
    s->n_busy--;
    if (!c->grpc) /* a resting REST listener may evict c now (a gRPC one
                     makes no room in MHD: srv_guard_make_room) */
        srv_http__accept_room(s);
    if (s->conns == c)
        return;
    c->prev->next = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->conns_tail = c->prev;
    c->prev = NULL;
    c->next = s->conns;
    s->conns->prev = c;
    s->conns = c;
}

/* shut: close c (shutdown(2): MHD or libuv then sees the end and cleans
 * up); from now on it does not count against its address. */
static void shut(srv_conn *c)
{
    c->closing = 1;
    ip_uncount(c->s, c);
    shutdown(c->fd, SHUT_RDWR);
}

/* candidate: c may be closed to make room for fresh, judged on its fields
 * alone: not fresh, no request or call in progress, not closing already;
 * for room in MHD (mhd_room: srv_guard_make_room) not a gRPC one, whose
 * close would make none. */
static int candidate(const srv_conn *c, const srv_conn *fresh, int mhd_room)
{
    return c != fresh && !busy(c) && !c->closing && c->fd >= 0 &&
           !(mhd_room && c->grpc);
}

/* sending: has c's client not acknowledged all of its answers yet
 * (SIOCOUTQ), or (gRPC, c->unsent) has attnd not handed all of them to
 * the kernel yet (libuv's write queue: the kernel may hold none of them
 * while the loop, busy, has not refilled it)? Served with no request or
 * call in progress, it is still taking them: closing it would cut their
 * tail (and what it sends as it reads), so it is not idle. */
static int sending(const srv_conn *c)
{
    return srv_sock_unacked(c->fd) > 0 || (c->unsent && c->unsent(c));
}

/* heard: when c was last heard from, as evict ranks the served ones: the
 * later of t_wait_ns (a call's end, or its answer handed to the kernel)
 * and its client's last ACK (TCP_INFO's last_ack_recv, sock_rx.c). A slow
 * reader whose kernel has just taken the last of its answer is not
 * sending any more, but its client may still be reading the tail from
 * its own kernel, its next request to come: it was idle since that ACK,
 * not since its answer went to the kernel. */
static uint64_t heard(const srv_conn *c, uint64_t now)
{
    long age = srv_sock_ack_age_ms(c->fd);
    uint64_t ack;
    if (age < 0 || (uint64_t)age * 1000000u > now)
        return c->t_wait_ns;
    ack = now - (uint64_t)age * 1000000u;
    return ack > c->t_wait_ns ? ack : c->t_wait_ns;
}

/* evict: the connection count passed max-connections with fresh: close
 * the one waiting longest for its first request head; else the idle
 * keep-alive one idle longest (it has been served: likely a real
 * client), counted from the later of its t_wait_ns and its client's last
 * ACK (heard), whose client holds all of its answers (not sending) and has
 * sent none of its next request head (srv_guard_head_coming: like a
 * request in progress, it is busy, MHD holding the part read). One with
 * bytes waiting that MHD has not read (unread: its state here is stale)
 * is not judged now: the next one in that order goes instead. When every
 * other one is busy with a request, has bytes waiting or is still
 * delivering its answers, nothing is closed: fresh is served when one
 * finishes.
 *
 * Cost: with the busy ones left out, s->conns stands newest first by
 * t_wait_ns (srv_guard_add and went_idle put a connection at the front as
 * they set it), so the walk starts at the oldest end (s->conns_tail) and
 * stops at the first never-served candidate without bytes waiting; the
 * first served one it passed is where a second walk starts, only when no
 * never-served one will do. On the way it steps over the connections
 * evicted and not reaped by MHD yet, the busy ones and the served idle
 * ones: a few dozen in a flood, not the whole list. unread (an ioctl) is
 * asked only of the one the walk would close, then of the next when that
 * one has bytes waiting (and sending, another, of a served one that
 * passed it): one call, plus one per better-ranked candidate
 * whose client sent since MHD last read it. At worst (the loop fell behind
 * reading every candidate) one call per candidate and two walks: linear
 * per accept, as evict's one walk asking every candidate was on every
 * accept before. The second walk ranks by heard, which is never before
 * t_wait_ns: it stops at the first candidate whose t_wait_ns is past the
 * best heard so far (TCP_INFO asked once per served candidate passed,
 * beside sending's SIOCOUTQ). Of two heard at the same time the one on the
 * list longer goes. With mhd_room (srv_guard_make_room) only a served REST
 * one goes. 1 when one was closed. */
static int evict(srv *s, srv_conn *fresh, int mhd_room)
{
    srv_conn *c, *old = NULL, *served = NULL, *best_c = NULL;
    uint64_t now = srv_now_ns(), best = 0;
    for (c = s->conns_tail; c && !old; c = c->prev)
        if (candidate(c, fresh, mhd_room)) {
            if (c->served) {
                if (!served)
                    served = c;
            } else if (!mhd_room && !unread(c)) {
                old = c;
            }
        }
    for (c = served; c && !old; c = c->prev) {
        uint64_t at;
        if (!candidate(c, fresh, mhd_room) || !c->served)
            continue;
        if (best_c && c->t_wait_ns >= best)
            break; /* heard no earlier: none from here on ranks first */
        if (unread(c) || sending(c) || srv_guard_head_coming(c))
            continue;
        at = heard(c, now);
        if (!best_c || at < best) {
            best_c = c;
            best = at;
        }
    }
    old = old ? old : best_c;
    if (!old) /* all busy, with bytes waiting or delivering: fresh waits
                 its turn (MHD's headroom, then the listen backlog) */
        return 0;
    shut(old);
    s->n_evicted++;
    srv_kick(s);
    return 1;
}

/* The never-served ones were asked at each accept after theirs; the last
 * one accepted was not, but it has had no time to send its head: a
 * connection goes idle after it was passed over only once served. Only a
 * REST one: the listener that asks waits for room in MHD, which closing a
 * gRPC connection does not make (each would go, one per retry, for
 * nothing). */
int srv_guard_make_room(srv *s)
{
    return s->n_conns > s->cfg.max_connections && evict(s, NULL, 1);
}

/* rx: bytes c's client has sent (in its socket's queue or read by MHD);
 * 0 when not known. */
static uint64_t rx(const srv_conn *c)
{
    return srv_sock_received(c->fd);
}

int srv_guard_head_coming(const srv_conn *c)
{
    return !c->grpc && !busy(c) && !c->closing && rx(c) > c->rx_idle;
}

/* As an eviction closes a served idle one (shut: MHD sees the end and
 * closes it): with no request in progress MHD has written every answer
 * (srv_guard_end runs once it has), and with nothing unacknowledged
 * (SIOCOUTQ 0) and nothing unread the client holds all of them. Not one
 * whose client has sent part of its next request head (head_coming):
 * like a request in progress it may finish within the stop's wait (then
 * answered 503 draining, http_head.c) or is closed at its end. */
int srv_guard_shut_idle(srv *s)
{
    int n = 0;
    for (srv_conn *c = s->conns; c; c = c->next)
        if (candidate(c, NULL, 1) && !c->grpc && !unread(c) &&
            srv_sock_unacked(c->fd) == 0 && !srv_guard_head_coming(c)) {
            shut(c);
            n++;
        }
    if (n)
        srv_kick(s);
    return n;
}

void srv_guard_add(srv *s, srv_conn *c)
{
    c->s = s;
    c->t_wait_ns = srv_now_ns();
    c->prev = NULL;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    else
        s->conns_tail = c;
    s->conns = c;
    c->linked = 1;
    s->n_conns++;
    ip_count(s, c);
    if (s->n_conns > s->cfg.max_connections)
        (void)evict(s, c, 0);
}

void srv_guard_remove(srv *s, srv_conn *c)
{
    if (!c->linked) /* never added, or the list is gone (srv_guard_stop) */
        return;
    s->n_busy -= busy(c);
    ip_uncount(s, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->conns_tail = c->prev;
    c->linked = 0;
    s->n_conns--;
}

void srv_guard_call_begin(srv_conn *c)
{
    went_busy(c);
    c->calls++;
    c->served++;
}

void srv_guard_call_end(srv_conn *c)
{
    if (--c->calls == 0)
        went_idle(c);
}

void srv_guard_notify(void *cls, struct MHD_Connection *conn, void **ctx,
                      enum MHD_ConnectionNotificationCode toe)
{
    srv *s = cls;
    srv_conn *c = *ctx;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
        srv_http__accept_room(s); /* resumes after this returns: MHD's
                                     count is one less then */
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        c = calloc(1, sizeof *c);
        if (!c)
            return; /* unguarded: MHD's idle timeout still applies */
        c->fd = ci ? ci->connect_fd : -1;
        if (ai && ai->client_addr)
            memcpy(&c->peer, ai->client_addr,
                   ai->client_addr->sa_family == AF_INET6
                       ? sizeof(struct sockaddr_in6)
                       : sizeof(struct sockaddr_in));
        c->owned = 1;
        c->mhd = conn;
        if (s->conn_mem_pending) { /* taken at its accept (http_accept.c) */
            c->mem = SRV_HTTP_CONN_COST;
            s->conn_mem_pending = 0;
            s->n_http_conns++;
        }
        *ctx = c;
        srv_guard_add(s, c);
        return;
    }
    if (!c) /* MHD_CONNECTION_NOTIFY_CLOSED of an unguarded one */
        return;
    if (c->req)
        c->req->c = NULL;
    srv_guard_remove(s, c);
    srv_linger_close(s, c->fd, c); /* MHD closes the socket after this returns */
    srv_mem_give(s, c->mem);
    s->n_http_conns -= c->mem != 0;
    free(c);
    *ctx = NULL;
}

void srv_guard_begin(srv_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *c = ci ? ci->socket_context : NULL;
    if (c) {
        const union MHD_ConnectionInfo *hi = MHD_get_connection_info(
            r->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        went_busy(c);
        c->req = r;
        r->c = c;
        if (hi && !MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_TRANSFER_ENCODING))
            r->head_bytes = hi->header_size;
    }
}

/* took: the bytes of c's client's requests up to the end of r: those
 * before it (c->rx_idle), r's head and body. A request whose head or body
 * size is not known (chunked) counts all its client had sent by now
 * (TCP_INFO), as does one whose count would pass that. Not all it had
 * sent in any case: a client that sent its next request's head, or part
 * of it, with r's (pipelined) had it read by libmicrohttpd with r, and
 * that part is a head coming (head_coming), not idle. A leftover of at
 * most STRAY bytes (sent by the time r ends here) is taken too: the empty
 * lines (CRLF) a client may send before a request line (RFC 9112 2.2; old
 * clients after a POST body), which libmicrohttpd skips and counts in no
 * head; left out they would make the connection a head coming for good.
 * So two CRLFs or four bare LFs arriving with r are stray; more (three
 * CRLFs, five LFs), or any that arrive after r ended here (the client's
 * Nagle holding them), stay a head coming: the stop waits for such a
 * connection until stop-flush-ms ends, the eviction passes it over and
 * the sweep closes it at header-timeout from its last answer read, as
 * any idle one (a client that sends them breaks RFC 9112 2.2's MUST NOT;
 * that is its cost). A pipelined head that short (we do not see the
 * bytes) is missed so. */
#define STRAY 4
static uint64_t took(const srv_conn *c, const srv_req *r)
{
    uint64_t sent = rx(c);
    uint64_t n = c->rx_idle + r->head_bytes + r->body_seen;
    return r->head_bytes && n + STRAY < sent ? n : sent;
}

void srv_guard_end(srv_req *r)
{
    srv_conn *c = r->c;
    if (c) {
        c->req = NULL;
        c->served++;
        c->unacked = 0;
        c->rx_idle = took(c, r);
        r->c = NULL;
        if (!busy(c))
            went_idle(c);
    }
}

/* delivering: is REST connection c, with no request in progress, still
 * delivering its answers (their bytes in its socket, not acknowledged by
 * its client: SIOCOUTQ)? A client cannot be asked for its next request
 * head before it has read the answer: *since is when its header-timeout
 * clock runs from, its last answer's end (t_wait_ns: MHD handed it to the
 * kernel) or, later, the last sweep that found fewer bytes held than the
 * sweep before it, or none (t_read_ns: its client read some). One that
 * reads nothing is closed header-timeout after it last did. */
static int delivering(srv_conn *c, uint64_t now, uint64_t *since)
{
    int q = c->grpc || !c->served ? 0 : srv_sock_unacked(c->fd);
    unsigned ct = (unsigned)c->s->cfg.conn_timeout_s;
    if ((q > 0 && q != c->unacked) || (q <= 0 && c->unacked)) {
        c->unacked = q > 0 ? q : 0;
        c->t_read_ns = now;
        /* and connection-timeout, libmicrohttpd's, which counts from its
         * own last write: it restarts when the timeout is set from 0 */
        if (c->mhd && ct) {
            MHD_set_connection_option(c->mhd, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
            MHD_set_connection_option(c->mhd, MHD_CONNECTION_OPTION_TIMEOUT, ct);
        }
    }
    *since = c->t_read_ns > c->t_wait_ns ? c->t_read_ns : c->t_wait_ns;
    return q > 0;
}

/* closed_log: one warning per door and cause of the sweep's closes (of
 * gRPC calls ended for min-body-rate: their connections stay). */
static void closed_log(srv *s, const int n[2][3])
{
    static const char *door[2] = {"http", "grpc"};
    static const char *what[2] = {"request head", "first call"};
    static const char *part[2] = {"body", "message"};
    int d;
    for (d = 0; d < 2; d++) {
        if (n[d][0])
            srv_log(s, "warn", "%s: closed %d connection%s whose %s did not "
                    "arrive within %lld s (header-timeout)", door[d], n[d][0],
                    n[d][0] == 1 ? "" : "s", what[d], s->cfg.header_timeout_s);
        if (n[d][1])
            srv_log(s, "warn", "%s: %s %d %s%s whose %s came slower than %lld "
                    "bytes/s (min-body-rate)%s", door[d], d ? "ended" : "closed",
                    n[d][1], d ? "call" : "connection", n[d][1] == 1 ? "" : "s",
                    part[d], s->cfg.min_body_rate, d ? "" : "; logged 408");
        if (n[d][2])
            srv_log(s, "warn", "%s: closed %d connection%s whose client read "
                    "none of its answer for %lld s (header-timeout)", door[d],
                    n[d][2], n[d][2] == 1 ? "" : "s", s->cfg.header_timeout_s);
    }
}

/* peek: REST connections whose client may have gone unseen, asked in
 * batches of one poll(2) each (peek_add, peek_flush). */
typedef struct {
    struct pollfd p[PEEK_MAX];
    srv_conn *c[PEEK_MAX];
    int n;
    int cut;    /* requests cut short (logged 499) */
    int closed; /* connections closed, with or without a request */
} peek;

/* unseen_end: may c hold an end MHD missed? Its request's body is still
 * coming (no handler, no answer yet), or it has none (idle, or a head
 * coming); and it has been so for a sweep at least (a request that goes
 * as it should is never asked). Work that waits or runs, a long poll, an
 * answer being sent: not here (their connections are asked elsewhere, or
 * MHD writes to them). */
static int unseen_end(const srv_conn *c, uint64_t now)
{
    const srv_req *r = c->req;
    const uint64_t sweep_ns = SWEEP_MS * 1000000ull;
    if (c->grpc || c->calls)
        return 0;
    if (!r)
        return now - c->t_wait_ns >= sweep_ns;
    return !r->dispatched && !r->have_resp && !r->suspended &&
           now - r->t0_ns >= sweep_ns;
}

static void peek_flush(peek *k)
{
    int i, n = k->n;
    k->n = 0;
    if (!n || poll(k->p, (nfds_t)n, 0) <= 0)
        return;
    for (i = 0; i < n; i++) {
        srv_conn *c = k->c[i];
        if (!(k->p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) ||
            c->closing || unread(c))
            continue;
        if (c->req) { /* its body can never be complete */
            c->req->went = 1; /* logged and counted 499 (http.c) */
            k->cut++;
        }
        k->closed++;
        shut(c);
    }
}

static void peek_add(peek *k, srv_conn *c)
{
    k->p[k->n].fd = c->fd;
    k->p[k->n].events = POLLRDHUP;
    k->p[k->n].revents = 0;
    k->c[k->n++] = c;
    if (k->n == PEEK_MAX)
        peek_flush(k);
}

static void sweep(uv_timer_t *t)
{
    srv *s = t->data;
    uint64_t now = srv_now_ns();
    uint64_t grace = (uint64_t)s->cfg.header_timeout_s * 1000000000ull;
    int n[2][3] = {{0, 0, 0}, {0, 0, 0}}; /* [http, grpc][head, body,
                                             answer unread] */
    int went = 0;
    peek k;
    srv_conn *c;
    k.n = k.cut = k.closed = 0;
    srv_http_log_flush(s, 0);
    if (s->n_evicted) {
        srv_log(s, "warn", "%d connection%s over max-connections (%lld): "
                "closed the %s waiting longest for a request head or call",
                s->n_evicted, s->n_evicted == 1 ? "" : "s",
                s->cfg.max_connections, s->n_evicted == 1 ? "one" : "ones");
        s->n_evicted = 0;
    }
    if (s->n_ip_refused && now - s->ip_refused_ns >= 1000000000ull) {
        char host[INET6_ADDRSTRLEN] = "?";
        const struct sockaddr_storage *a = &s->ip_refused;
        inet_ntop(a->ss_family,
                  a->ss_family == AF_INET6
                      ? (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr
                      : (const void *)&((const struct sockaddr_in *)a)->sin_addr,
                  host, sizeof host);
        srv_log(s, "warn", "%d new connection%s closed at once: %s address "
                "held max-connections-per-ip (%lld) already, REST and gRPC "
                "together (the last from %s; behind a proxy raise it or set 0)",
                s->n_ip_refused, s->n_ip_refused == 1 ? "" : "s",
                s->n_ip_refused == 1 ? "its" : "their", s->cfg.max_conn_per_ip,
                host);
        s->n_ip_refused = 0;
        s->ip_refused_ns = now;
    }
    for (c = s->conns; c; c = c->next) {
        srv_req *r = c->req;
        if (c->closing || c->fd < 0)
            continue;
        if (r && r->job && r->suspended && srv_client_went(c->fd)) {
            srv_sched_client_went(r); /* MHD, reading again, closes it */
            went++;
            continue;
        }
        if (unseen_end(c, now))
            peek_add(&k, c);
        if (!grace)
            continue;
        if (!busy(c)) {
            uint64_t since;
            int reading;
            if (c->grpc && c->served) /* between calls: connection-timeout */
                continue;
            reading = delivering(c, now, &since);
            if (now - since <= grace || unread(c))
                continue;
            n[c->grpc][reading ? 2 : 0]++;
        } else if (!r) { /* gRPC: end the calls whose message comes too
                             slowly; the connection and its other calls
                             stay */
            if (s->cfg.min_body_rate && c->slow && !unread(c))
                n[1][1] += c->slow(c, now, grace);
            continue;
        } else {
            /* receiving the body: the handler has not run, no answer yet */
            uint64_t dt = now - r->t0_ns;
            if (r->dispatched || r->have_resp || dt <= grace ||
                !s->cfg.min_body_rate ||
                (double)r->body_seen * 1e9 >= (double)s->cfg.min_body_rate * (double)dt)
                continue;
            r->too_slow = 1; /* logged and counted 408 (http.c) */
            n[0][1]++;
        }
        shut(c);
    }
    peek_flush(&k);
    closed_log(s, (const int (*)[3])n);
    if (k.cut)
        srv_log(s, "warn", "http: closed %d connection%s whose client went "
                "before its request's body was complete (logged 499)", k.cut,
                k.cut == 1 ? "" : "s");
    if (n[0][0] || n[0][1] || n[0][2] || went || k.closed)
        srv_kick(s);
}

int srv_guard_start(srv *s)
{
    if (ips_make(s) < 0)
        return -1;
    uv_timer_init(s->loop, &s->guard_timer);
    s->guard_timer.data = s;
    uv_timer_start(&s->guard_timer, sweep, SWEEP_MS, SWEEP_MS);
    return 0;
}

void srv_guard_stop(srv *s)
{
    srv_conn *c, *n;
    uv_timer_stop(&s->guard_timer);
    uv_close((uv_handle_t *)&s->guard_timer, NULL);
    for (c = s->conns; c; c = n) { /* MHD reported every close already */
        n = c->next;
        c->linked = 0; /* a gRPC one goes with its connection (grpc_conn.c) */
        c->ip_counted = 0;
        if (c->owned)
            free(c);
    }
    s->conns = s->conns_tail = NULL;
    s->n_conns = 0;
    s->n_busy = 0;
    free(s->ips);
    s->ips = NULL;
    s->ips_mask = s->ips_used = 0;
}

/* test_guard.c - memory-budget's arithmetic (server/guard.c: srv_mem_take,
 * srv_mem_hold, srv_mem_give) at its edges: a reservation that fills the
 * budget exactly fits, one byte more does not; what an answer holds past
 * the budget refuses every reservation until given back; 0 is no budget.
 *
 * Eviction past max-connections (srv_guard_add), on connections that are
 * real socketpairs: the never-served one that waited longest goes, before
 * any served idle one; one with bytes its reader has not taken yet is
 * passed over (its state is stale) and the next-best goes instead, however
 * many better-ranked ones have bytes waiting, served or not; busy ones
 * never go; when every candidate is busy or has bytes waiting, none goes.
 * After every step the list is checked as evict relies on it: linked both
 * ways, ending at s->conns_tail, the idle ones newest first.
 * Connections per address (max-connections-per-ip, srv_guard_per_ip_full
 * and the table under it): the limit is reached at exactly its count,
 * port aside; 0 is no limit; a connection shut by an eviction no longer
 * counts, nor does it count twice when it is removed; a removed one frees
 * its place; an IPv4 address and the IPv6 one with the same first bytes
 * are different clients; addresses whose searches start at the same slot
 * (found by srv_guard__ip_home) are all found after the first goes; and a
 * random run of adds, evictions and removals agrees, address by address,
 * with the walk of the list it replaced.
 * This file's srv_now_ns is a clock the tests move by hand (it stands in
 * for clock.c's at link time), so that ranks never tie. */
#include <arpa/inet.h>
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/srv.h"
#include "tests/check_main.h"

static uint64_t g_now = 1000000000ull;

uint64_t srv_now_ns(void)
{
    return g_now;
}

START_TEST(exactly_the_budget_fits)
{
    static srv s;
    s.cfg.memory_budget = 1000;
    ck_assert_int_eq(srv_mem_take(&s, 1001), -1);
    ck_assert_uint_eq(s.mem_used, 0);
    ck_assert_int_eq(srv_mem_take(&s, 1000), 0);
    ck_assert_int_eq(srv_mem_take(&s, 1), -1);
    ck_assert_int_eq(srv_mem_take(&s, 0), -1); /* full: nothing more */
    srv_mem_give(&s, 400);
    ck_assert_int_eq(srv_mem_take(&s, 401), -1);
    ck_assert_int_eq(srv_mem_take(&s, 400), 0);
    ck_assert_uint_eq(s.mem_used, 1000);
    srv_mem_give(&s, 2000); /* more than counted: 0, not a wrap */
    ck_assert_uint_eq(s.mem_used, 0);
}
END_TEST

START_TEST(held_past_the_budget_refuses_until_given_back)
{
    static srv s;
    s.cfg.memory_budget = 1000;
    ck_assert_int_eq(srv_mem_take(&s, 600), 0);
    srv_mem_hold(&s, 700); /* an answer already made */
    ck_assert_uint_eq(s.mem_used, 1300);
    ck_assert_int_eq(srv_mem_take(&s, 1), -1);
    ck_assert_int_eq(srv_mem_take(&s, SIZE_MAX), -1); /* no wrap either */
    srv_mem_give(&s, 700);
    ck_assert_int_eq(srv_mem_take(&s, 400), 0);
    ck_assert_uint_eq(s.mem_used, 1000);
}
END_TEST

START_TEST(no_budget_takes_anything)
{
    static srv s;
    s.cfg.memory_budget = 0;
    ck_assert_int_eq(srv_mem_take(&s, SIZE_MAX / 2), 0);
    ck_assert_int_eq(srv_mem_take(&s, 1), 0);
}
END_TEST

/* A guarded connection: c->fd is one end of a socketpair, peer the other
 * (what its client writes to, and reads the close from). */
typedef struct {
    srv_conn c;
    int peer;
} conn;

/* check_list: s->conns is linked both ways, ends at s->conns_tail, holds
 * n_conns, and the idle ones in it stand newest first (evict walks it
 * from the tail on that promise). */
static void check_list(const srv *s)
{
    const srv_conn *c, *last = NULL;
    uint64_t t = UINT64_MAX;
    int n = 0;
    for (c = s->conns; c; last = c, c = c->next) {
        ck_assert_ptr_eq(c->prev, last);
        if (!c->req && !c->calls) {
            ck_assert_uint_le(c->t_wait_ns, t);
            t = c->t_wait_ns;
        }
        n++;
    }
    ck_assert_ptr_eq(s->conns_tail, last);
    ck_assert_int_eq(n, s->n_conns);
}

/* open_conn: a socketpair added to s's list a millisecond after the last
 * one (so it has waited less than every one before it). */
static void open_conn(srv *s, conn *k)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    k->c.fd = sv[0];
    k->peer = sv[1];
    g_now += 1000000;
    srv_guard_add(s, &k->c);
    check_list(s);
}

/* open_full: max-connections n and n connections open (k[0..n-1], k[0]
 * the longest waiting): the next one opened evicts. */
static void open_full(srv *s, conn *k, int n)
{
    int i;
    s->cfg.max_connections = n;
    for (i = 0; i < n; i++)
        open_conn(s, &k[i]);
}

/* serve: one whole request on k, over a millisecond from now: k is served
 * and idle again, at the front of the list. */
static void serve(conn *k)
{
    srv_guard_call_begin(&k->c);
    g_now += 1000000;
    srv_guard_call_end(&k->c);
    check_list(k->c.s);
}

/* pending: the client sends a byte its reader has not taken yet. */
static void pending(conn *k)
{
    ck_assert_int_eq(write(k->peer, "a", 1), 1);
}

/* shut: was k closed (marked, and its client sees the end)? */
static int shut(const conn *k)
{
    char b;
    if (!k->c.closing)
        return 0;
    ck_assert_int_eq(recv(k->peer, &b, 1, MSG_DONTWAIT), 0);
    return 1;
}

/* hang_up: both of k's ends closed. */
static void hang_up(conn *k)
{
    close(k->c.fd);
    close(k->peer);
}

/* drop: k goes (MHD reaps it) and both its ends are closed. */
static void drop(srv *s, conn *k)
{
    srv_guard_remove(s, &k->c);
    check_list(s);
    hang_up(k);
}

static void close_all(srv *s, conn *k, int n)
{
    int i;
    for (i = 0; i < n; i++)
        drop(s, &k[i]);
    ck_assert_ptr_null(s->conns);
    ck_assert_ptr_null(s->conns_tail);
}

START_TEST(evicts_the_longest_waiting_without_bytes_waiting)
{
    static srv s;
    static conn k[4];
    open_full(&s, k, 3);
    pending(&k[0]); /* the longest waiting: passed over */
    open_conn(&s, &k[3]);
    ck_assert(!k[0].c.closing);
    ck_assert(shut(&k[1])); /* the next-best */
    ck_assert(!k[2].c.closing);
    ck_assert(!k[3].c.closing); /* the new one is never the victim */
    ck_assert_int_eq(s.n_evicted, 1);
    close_all(&s, k, 4);
    ck_assert_int_eq(s.n_conns, 0);
}
END_TEST

START_TEST(many_better_ranked_with_bytes_waiting)
{
    static srv s;
    static conn k[13];
    int i;
    open_full(&s, k, 12);
    for (i = 0; i < 10; i++)
        pending(&k[i]);
    open_conn(&s, &k[12]);
    for (i = 0; i < 13; i++)
        ck_assert_msg(k[i].c.closing == (i == 10), "connection %d", i);
    ck_assert(shut(&k[10]));
    ck_assert_int_eq(s.n_evicted, 1);
    close_all(&s, k, 13);
}
END_TEST

START_TEST(never_served_before_served_unless_bytes_wait)
{
    static srv s;
    static conn k[5];
    s.cfg.max_connections = 3;
    open_conn(&s, &k[0]);
    serve(&k[0]); /* served, then idle: waited longest of all */
    open_conn(&s, &k[1]);
    open_conn(&s, &k[2]);
    pending(&k[1]);
    open_conn(&s, &k[3]); /* k[2]: the one never served without bytes */
    ck_assert(!k[0].c.closing);
    ck_assert(!k[1].c.closing);
    ck_assert(shut(&k[2]));
    /* every never-served one left has bytes waiting: the served one goes */
    pending(&k[3]);
    open_conn(&s, &k[4]);
    ck_assert(shut(&k[0]));
    ck_assert(!k[1].c.closing);
    ck_assert(!k[3].c.closing);
    ck_assert(!k[4].c.closing);
    ck_assert_int_eq(s.n_evicted, 2);
    close_all(&s, k, 5);
}
END_TEST

START_TEST(busy_or_bytes_waiting_everywhere_closes_none)
{
    static srv s;
    static conn k[5];
    open_full(&s, k, 3);
    srv_guard_call_begin(&k[1].c); /* busy: a call open */
    pending(&k[0]);
    pending(&k[2]);
    open_conn(&s, &k[3]);
    ck_assert(!k[0].c.closing && !k[1].c.closing && !k[2].c.closing &&
              !k[3].c.closing);
    ck_assert_int_eq(s.n_evicted, 0);
    /* its call over, k[1] is a served idle one: with bytes waiting in
     * every never-served one, the next new connection evicts it */
    srv_guard_call_end(&k[1].c);
    pending(&k[3]);
    open_conn(&s, &k[4]);
    ck_assert(shut(&k[1]));
    ck_assert(!k[0].c.closing && !k[2].c.closing && !k[3].c.closing &&
              !k[4].c.closing);
    ck_assert_int_eq(s.n_evicted, 1);
    close_all(&s, k, 5);
}
END_TEST

START_TEST(a_served_one_with_bytes_waiting_is_passed_over_too)
{
    static srv s;
    static conn k[5];
    open_full(&s, k, 3);
    serve(&k[0]); /* from the oldest end to the front */
    serve(&k[1]); /* k[0] waited longer: 1 ms more */
    pending(&k[2]);
    pending(&k[0]); /* its next request coming */
    open_conn(&s, &k[3]);
    ck_assert(shut(&k[1]));
    ck_assert(!k[0].c.closing && !k[2].c.closing && !k[3].c.closing);
    srv_guard_remove(&s, &k[1].c); /* MHD reaps it */
    check_list(&s);
    open_conn(&s, &k[4]); /* k[3], never served, no bytes: before k[0] */
    ck_assert(shut(&k[3]));
    ck_assert(!k[0].c.closing && !k[2].c.closing && !k[4].c.closing);
    ck_assert_int_eq(s.n_evicted, 2);
    close_all(&s, k, 5);
}
END_TEST

/* Connections per address: s started as http.c starts it (the sweep's
 * timer on a loop never run, and the table), stopped at the end. */
static uv_loop_t g_loop;

static void ip_start(srv *s, long long max_conns, long long per_ip)
{
    ck_assert_int_eq(uv_loop_init(&g_loop), 0);
    s->loop = &g_loop;
    s->cfg.max_connections = max_conns;
    s->cfg.max_conn_per_ip = per_ip;
    ck_assert_int_eq(srv_guard_start(s), 0);
}

static void ip_stop(srv *s)
{
    srv_guard_stop(s);
    ck_assert_ptr_null(s->ips);
    uv_run(&g_loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&g_loop), 0);
}

/* addr: the address a (IPv4 or IPv6 as family says) and port, as accept
 * gives it; v4 and v6 name the family. */
static struct sockaddr_storage addr(int family, const char *a, int port)
{
    struct sockaddr_storage ss;
    void *at;
    memset(&ss, 0, sizeof ss);
    ss.ss_family = (sa_family_t)family;
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_port = htons((uint16_t)port);
        at = &in->sin_addr;
    } else {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
        in->sin6_port = htons((uint16_t)port);
        at = &in->sin6_addr;
    }
    ck_assert_int_eq(inet_pton(family, a, at), 1);
    return ss;
}

static struct sockaddr_storage v4(const char *a, int port)
{
    return addr(AF_INET, a, port);
}

static struct sockaddr_storage v6(const char *a, int port)
{
    return addr(AF_INET6, a, port);
}

/* open_from: open_conn from peer */
static void open_from(srv *s, conn *k, struct sockaddr_storage peer)
{
    k->c.peer = peer;
    open_conn(s, k);
}

/* walk_count: peer's connections as srv_guard_per_ip_full counted them
 * before the table: a walk of the list comparing addresses. */
static long long walk_count(const srv *s, const struct sockaddr_storage *peer)
{
    const srv_conn *c;
    long long n = 0;
    for (c = s->conns; c; c = c->next) {
        const struct sockaddr_storage *a = &c->peer;
        if (c->closing || a->ss_family != peer->ss_family)
            continue;
        if (a->ss_family == AF_INET)
            n += ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
                 ((const struct sockaddr_in *)peer)->sin_addr.s_addr;
        else if (a->ss_family == AF_INET6)
            n += !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                         &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
    }
    return n;
}

START_TEST(per_ip_limit_reached_port_aside)
{
    static srv s;
    static conn k[4];
    struct sockaddr_storage a = v4("192.0.2.7", 1000), b = v4("192.0.2.8", 1000);
    int i;
    ip_start(&s, 100, 3);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 0);
        open_from(&s, &k[i], v4("192.0.2.7", 2000 + i));
    }
    ck_assert_int_eq(srv_guard__ip_count(&s, &a), 3);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 1);
    ck_assert_int_eq(s.n_ip_refused, 1);
    ck_assert(!memcmp(&s.ip_refused, &a, sizeof a));
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &b), 0); /* another client */
    open_from(&s, &k[3], b);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 1);
    ck_assert_int_eq(s.n_ip_refused, 2);
    ck_assert_int_eq(srv_guard__ip_count(&s, &b), 1);
    /* one goes: its place is free again, once */
    srv_guard_remove(&s, &k[1].c);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 0);
    open_from(&s, &k[1], a);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 1);
    ck_assert_int_eq(s.n_ip_refused, 3);
    close_all(&s, k, 4);
    ck_assert_int_eq(srv_guard__ip_count(&s, &a), 0);
    ck_assert_int_eq(srv_guard__ip_count(&s, &b), 0);
    ip_stop(&s);
}
END_TEST

START_TEST(per_ip_zero_is_no_limit)
{
    static srv s;
    static conn k[5];
    struct sockaddr_storage a = v4("192.0.2.7", 1);
    int i;
    ip_start(&s, 100, 0);
    ck_assert_ptr_null(s.ips); /* nothing to count for */
    for (i = 0; i < 5; i++) {
        ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 0);
        open_from(&s, &k[i], a);
    }
    ck_assert_int_eq(s.n_ip_refused, 0);
    close_all(&s, k, 5);
    ip_stop(&s);
}
END_TEST

START_TEST(per_ip_a_closing_one_does_not_count)
{
    static srv s;
    static conn k[4];
    struct sockaddr_storage a = v6("2001:db8::1", 1);
    ip_start(&s, 3, 3);
    open_from(&s, &k[0], a);
    open_from(&s, &k[1], a);
    open_from(&s, &k[2], a);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 1);
    /* a fourth (from another address) takes the total past
     * max-connections: the longest waiting one is evicted, and its
     * address may open one more at once */
    open_from(&s, &k[3], v6("2001:db8::2", 1));
    ck_assert(shut(&k[0]));
    ck_assert_int_eq(srv_guard__ip_count(&s, &a), 2);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a), 0);
    /* MHD reaps it: not counted a second time */
    srv_guard_remove(&s, &k[0].c);
    ck_assert_int_eq(srv_guard__ip_count(&s, &a), 2);
    ck_assert_int_eq(srv_guard__ip_count(&s, &k[3].c.peer), 1);
    close_all(&s, k + 1, 3);
    hang_up(&k[0]);
    ip_stop(&s);
}
END_TEST

START_TEST(per_ip_ipv4_and_ipv6_are_different_clients)
{
    static srv s;
    static conn k[4];
    /* the same first four bytes; the mapped form is IPv6 too */
    struct sockaddr_storage a4 = v4("1.2.3.4", 1), a6 = v6("102:304::", 1),
                            m6 = v6("::ffff:1.2.3.4", 1);
    ip_start(&s, 100, 2);
    open_from(&s, &k[0], a4);
    open_from(&s, &k[1], a4);
    open_from(&s, &k[2], a6);
    open_from(&s, &k[3], m6);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a4), 1);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &a6), 0);
    ck_assert_int_eq(srv_guard_per_ip_full(&s, &m6), 0);
    ck_assert_int_eq(srv_guard__ip_count(&s, &a6), 1);
    ck_assert_int_eq(srv_guard__ip_count(&s, &m6), 1);
    close_all(&s, k, 4);
    ip_stop(&s);
}
END_TEST

/* Three addresses: a and b start their searches at one slot, c at the
 * next (where b stands once a is in). a goes: b and c move back, and
 * every search still finds them; then the same with b going first. */
START_TEST(per_ip_colliding_addresses)
{
    static srv s;
    static conn k[6];
    struct sockaddr_storage p[3], q;
    size_t h = 0, mask;
    char txt[32];
    int i, n = 0;
    ip_start(&s, 1, 10); /* the smallest table: collisions are found soon */
    s.cfg.max_connections = 100; /* no eviction */
    mask = s.ips_mask;
    for (i = 0; n < 3 && i < 200000; i++) {
        snprintf(txt, sizeof txt, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
        q = v4(txt, 1);
        if (n == 0) {
            p[n++] = q;
            h = srv_guard__ip_home(&s, &q);
        } else if (srv_guard__ip_home(&s, &q) == (n == 1 ? h : (h + 1) & mask)) {
            p[n++] = q;
        }
    }
    ck_assert_int_eq(n, 3);
    for (i = 0; i < 3; i++)
        open_from(&s, &k[i], p[i]);
    for (i = 0; i < 3; i++)
        open_from(&s, &k[3 + i], p[i]);
    ck_assert_uint_eq(s.ips_used, 3);
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(srv_guard__ip_count(&s, &p[i]), 2);
    srv_guard_remove(&s, &k[0].c);
    srv_guard_remove(&s, &k[3].c); /* a's slot frees */
    ck_assert_uint_eq(s.ips_used, 2);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[0]), 0);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[1]), 2);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[2]), 2);
    /* a again (now after b), then b goes: a and c still found */
    srv_guard_add(&s, &k[0].c);
    srv_guard_remove(&s, &k[1].c);
    srv_guard_remove(&s, &k[4].c);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[0]), 1);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[1]), 0);
    ck_assert_int_eq(srv_guard__ip_count(&s, &p[2]), 2);
    srv_guard_remove(&s, &k[0].c);
    srv_guard_remove(&s, &k[2].c);
    srv_guard_remove(&s, &k[5].c);
    ck_assert_uint_eq(s.ips_used, 0);
    ck_assert_ptr_null(s.conns);
    for (i = 0; i < 6; i++)
        hang_up(&k[i]);
    ip_stop(&s);
}
END_TEST

/* A random run: adds (an eviction past max-connections shuts one), the
 * sweep's shutting stood in for by an eviction, removals; after every step
 * each address's count is the old walk's. */
START_TEST(per_ip_agrees_with_the_walk)
{
    enum { CONNS = 90, ADDRS = 24, STEPS = 3000 };
    static srv s;
    static conn k[CONNS];
    static struct sockaddr_storage a[ADDRS];
    int open[CONNS] = {0};
    char txt[64];
    int i, j, step;
    srand(7);
    for (i = 0; i < ADDRS; i++) {
        if (i % 2) {
            snprintf(txt, sizeof txt, "2001:db8::%x", i);
            a[i] = v6(txt, 1);
        } else {
            snprintf(txt, sizeof txt, "198.51.100.%d", i);
            a[i] = v4(txt, 1);
        }
    }
    ip_start(&s, 30, 1000);
    for (step = 0; step < STEPS; step++) {
        i = rand() % CONNS;
        if (!open[i]) {
            open_from(&s, &k[i], a[rand() % ADDRS]);
            open[i] = 1;
        } else {
            drop(&s, &k[i]);
            memset(&k[i], 0, sizeof k[i]);
            open[i] = 0;
        }
        for (j = 0; j < ADDRS; j++)
            ck_assert_int_eq(srv_guard__ip_count(&s, &a[j]), walk_count(&s, &a[j]));
    }
    ck_assert_int_gt(s.n_evicted, 0);
    for (i = 0; i < CONNS; i++)
        if (open[i])
            drop(&s, &k[i]);
    ck_assert_uint_eq(s.ips_used, 0);
    ip_stop(&s);
}
END_TEST

static Suite *guard_suite(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("memory-budget");
    tcase_add_test(tc, exactly_the_budget_fits);
    tcase_add_test(tc, held_past_the_budget_refuses_until_given_back);
    tcase_add_test(tc, no_budget_takes_anything);
    suite_add_tcase(s, tc);
    tc = tcase_create("eviction");
    tcase_add_test(tc, evicts_the_longest_waiting_without_bytes_waiting);
    tcase_add_test(tc, many_better_ranked_with_bytes_waiting);
    tcase_add_test(tc, never_served_before_served_unless_bytes_wait);
    tcase_add_test(tc, busy_or_bytes_waiting_everywhere_closes_none);
    tcase_add_test(tc, a_served_one_with_bytes_waiting_is_passed_over_too);
    suite_add_tcase(s, tc);
    tc = tcase_create("per-ip");
    tcase_add_test(tc, per_ip_limit_reached_port_aside);
    tcase_add_test(tc, per_ip_zero_is_no_limit);
    tcase_add_test(tc, per_ip_a_closing_one_does_not_count);
    tcase_add_test(tc, per_ip_ipv4_and_ipv6_are_different_clients);
    tcase_add_test(tc, per_ip_colliding_addresses);
    tcase_add_test(tc, per_ip_agrees_with_the_walk);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(guard_suite)

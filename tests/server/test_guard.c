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
 * This file's srv_now_ns is a clock the tests move by hand (it stands in
 * for clock.c's at link time), so that ranks never tie. */
#include <check.h>
#include <stdint.h>
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

static void close_all(srv *s, conn *k, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        srv_guard_remove(s, &k[i].c);
        check_list(s);
        close(k[i].c.fd);
        close(k[i].peer);
    }
    ck_assert_ptr_null(s->conns);
    ck_assert_ptr_null(s->conns_tail);
}

START_TEST(evicts_the_longest_waiting_without_bytes_waiting)
{
    static srv s;
    static conn k[4];
    s.cfg.max_connections = 3;
    open_conn(&s, &k[0]);
    open_conn(&s, &k[1]);
    open_conn(&s, &k[2]);
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
    s.cfg.max_connections = 12;
    for (i = 0; i < 12; i++)
        open_conn(&s, &k[i]);
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
    s.cfg.max_connections = 3;
    open_conn(&s, &k[0]);
    open_conn(&s, &k[1]);
    open_conn(&s, &k[2]);
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
    s.cfg.max_connections = 3;
    open_conn(&s, &k[0]);
    open_conn(&s, &k[1]);
    open_conn(&s, &k[2]);
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
    return s;
}

TU_MAIN(guard_suite)

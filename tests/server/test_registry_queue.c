/* test_registry_queue.c - the repository calls of one model that wait for
 * its turn (server/registry_queue.c), driven through the handlers as a
 * door that is not MHD drives them (conn NULL, on_answer): calls
 * identical to the last one waiting join it and are answered with it, in
 * the order they came. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "server/registry_int.h"
#include "tests/check_main.h"

static int answered[16], n_answered;

/* on_answer: the door's side of an answer: note whose, take its body. */
static void on_answer(srv_req *r)
{
    answered[n_answered++] = (int)(intptr_t)r->door_ctx;
    free(r->resp);
    r->resp = NULL;
}

START_TEST(joined_calls_are_answered_in_the_order_they_came)
{
    static srv s;
    static srv_entry e;
    static srv_req r[6];
    s.cfg.repository_waiters = 16;
    s.models = &e;
    strcpy(e.name, "m");
    e.busy = 1; /* a load of it runs */
    n_answered = 0;
    for (int i = 0; i < 6; i++) {
        r[i].s = &s;
        strcpy(r[i].arg[0], "m");
        r[i].on_answer = on_answer;
        r[i].door_ctx = (void *)(intptr_t)i;
        srv_h_unload(&r[i]); /* the first waits; the others join it */
        ck_assert_int_eq(r[i].suspended, 1);
    }
    ck_assert_int_eq(e.n_turns, 1);
    ck_assert_int_eq(srv_registry_waiting(&e), 6);
    ck_assert_int_eq(n_answered, 0);
    e.busy = 0; /* the load ended: the unload's turn (404: not loaded) */
    srv_registry__next_turn(&e);
    ck_assert_int_eq(n_answered, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(answered[i], i);
        ck_assert_int_eq(r[i].status, 404);
    }
    ck_assert_int_eq(s.n_suspended, 0);
    ck_assert_int_eq(srv_registry_waiting(&e), 0);
}
END_TEST

static Suite *registry_queue_suite(void)
{
    Suite *s = suite_create("registry_queue");
    TCase *tc = tcase_create("join");
    tcase_add_test(tc, joined_calls_are_answered_in_the_order_they_came);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(registry_queue_suite)

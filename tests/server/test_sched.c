/* test_sched.c - a model's queue (server/sched.c, srv__job_enqueue and
 * srv__job_unqueue): its count of queued sequences. Jobs are built by hand
 * (a decoded request's prep.n is all the count reads), so requests of
 * 2^30 sequences cost nothing here. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "server/sched_int.h"
#include "tests/check_main.h"

/* Three requests of 2^30 sequences each (max-tokens' bound, B x T = 2^30
 * with T = 1): an int sum wrapped to -2^30, and the batcher then sized
 * its job list by it (one slot) and held the queue back as under
 * max-batch. */
START_TEST(queued_sequences_do_not_wrap)
{
    static srv_entry e;
    static srv_job j[3];
    int i;
    memset(&e, 0, sizeof e);
    for (i = 0; i < 3; i++) {
        memset(&j[i], 0, sizeof j[i]);
        j[i].e = &e;
        j[i].prep.n = 1 << 30;
        srv__job_enqueue(&j[i]);
    }
    ck_assert(e.qhead == &j[0] && e.qtail == &j[2]);
    ck_assert(e.q_seqs == 3LL << 30);
    srv__job_unqueue(&j[1]);
    ck_assert(e.q_seqs == 2LL << 30);
    srv__job_unqueue(&j[0]);
    srv__job_unqueue(&j[2]);
    ck_assert(e.q_seqs == 0 && !e.qhead && !e.qtail);
}
END_TEST

static Suite *sched_suite(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("queue");
    tcase_add_test(tc, queued_sequences_do_not_wrap);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(sched_suite)

/*
 * test_seq_nomem.c - the server's sequence table (server/seq.c) when
 * memory runs out: whichever allocation of a start or of a step at a
 * sequence_position below the length fails, the step is answered 503
 * (retry: nothing about the step is wrong), the sequence is as it was (a
 * rewound step's tokens put back, no page kept), no block is left behind,
 * and the same step sent again succeeds.
 *
 * tests/fail_alloc.h fails the k-th allocation since calls was set to 0
 * and counts the blocks held; every k of the step is tried, each on a
 * fresh table and fresh page pools (a pool keeps the pages given back, so
 * a second try would take its page from there, not allocate it). The sanitizer
 * builds replace malloc themselves: there each step only runs through.
 * seq_fixture.h has the stand-ins, the models and the helpers.
 */
#include "tests/server/seq_fixture.h"
#include "tests/fail_alloc.h"

/* fresh: the fixture's table, models and pools as a test begins */
static void fresh(void)
{
    teardown();
    setup();
}

/* attempt: j's submit and bind (the fixture's launch, without its
 * asserts: Check allocates for each) with the k-th allocation failing
 * (-1: none, counted); returns j's status (0: bound, its pass to run). */
static int attempt(srv_job *j, long k)
{
    char err[OIP_ERRMAX];
    int status;
    calls = 0;
    fail_at = k;
    submit(j);
    status = j->status;
    if (!status && j->queued == 1 && j->st.where == SRV_STEP_ACTIVE) {
        status = srv_seq_bind(&j->st, &j->mem, err);
        if (status) {
            j->status = status;
            snprintf(j->msg, sizeof j->msg, "%s", err);
            srv_seq_step_end(&j->st, 0);
        }
    } else if (!status) {
        status = -1; /* not let through: asserted below */
    }
    fail_at = 0;
    return status;
}

/* A start of 3 tokens (its sequence's record, its page table, its page):
 * each failure is a 503 that leaves no sequence, no page and no block
 * (a start refused for memory is not a gone sequence either: a step
 * after it is told the id is unknown, as for one never started). */
START_TEST(start_when_memory_runs_out)
{
    const char *start = "\"sequence_id\":\"s\",\"sequence_start\":true";
    srv_job *j;
    long k, n, failed = 0, before;
    int status;
    j = job(M1, 3, start);
    ck_assert_int_eq(attempt(j, -1), 0);
    n = calls;
    end(j, 1);
    job_free(j);
    ck_assert_int_eq(length("s"), 3);
    ck_assert(!FAILING || n >= 3); /* record, page table, page */
    for (k = 1; FAILING && k <= n; k++) {
        fresh();
        j = job(M1, 3, start);
        before = held;
        status = attempt(j, k);
        if (status) {
            failed++;
            ck_assert_msg(status == 503, "allocation %ld: %d %s", k, status,
                          j->msg);
            ck_assert_msg(strstr(j->msg, "out of memory"), "%s", j->msg);
            ck_assert_int_eq(info("s", NULL), 0);
            ck_assert_uint_eq(used(0), 0);
            ck_assert_int_eq(g_inst[0].refs, 1);
            ck_assert_int_eq(M1->seq_stats.live, 0);
            ck_assert_msg(held == before, "allocation %ld: %ld blocks left",
                          k, held - before);
        } else {
            end(j, 1);
            ck_assert_int_eq(length("s"), 3);
        }
        job_free(j);
    }
    ck_assert(!FAILING || failed >= 3);
    fresh();
    /* and the same start afterwards goes through */
    go(M1, 3, start);
    ck_assert_int_eq(length("s"), 3);
    ck_assert_uint_eq(used(0), PAGE);
}
END_TEST

/* A sequence of 4 tokens (one page, full); a step of 3 at position 2
 * replaces tokens 2 and 3 and needs a second page: the rows it overwrites
 * are saved, the cache rewound to 2, a page taken. Each failure is a 503
 * after which the sequence holds its 4 tokens in one page (the rewind
 * undone: a 400, or a length of 2, would lose the client's tokens), no
 * block is left, and the step at 4 that follows appends. */
START_TEST(rewound_step_when_memory_runs_out)
{
    const char *step = "\"sequence_id\":\"r\",\"sequence_position\":2";
    srv_job *j;
    snap a, b;
    long k, n, failed = 0, before;
    int status;
    go(M1, 4, "\"sequence_id\":\"r\",\"sequence_start\":true");
    ck_assert_uint_eq(used(0), PAGE);
    a = take_snap("r", M1, 0);
    j = job(M1, 3, step);
    ck_assert_int_eq(attempt(j, -1), 0);
    n = calls;
    ck_assert_int_eq(j->st.t0, 2);
    ck_assert_uint_eq(used(0), 2 * PAGE);
    end(j, 0); /* its pass failed: the rewind undone, the page back */
    job_free(j);
    ck_assert(!FAILING || n >= 2); /* the saved rows, the page */
    for (k = 1; FAILING && k <= n; k++) {
        fresh();
        go(M1, 4, "\"sequence_id\":\"r\",\"sequence_start\":true");
        j = job(M1, 3, step);
        before = held;
        status = attempt(j, k);
        if (status) {
            failed++;
            ck_assert_msg(status == 503, "allocation %ld: %d %s", k, status,
                          j->msg);
            ck_assert_msg(strstr(j->msg, "out of memory"), "%s", j->msg);
            ck_assert_msg(held == before, "allocation %ld: %ld blocks left",
                          k, held - before);
        } else {
            end(j, 0);
        }
        b = take_snap("r", M1, 0);
        assert_same(&a, &b);
        ck_assert_int_eq(length("r"), 4);
        job_free(j);
    }
    ck_assert(!FAILING || failed >= 2);
    /* the sequence goes on where it was */
    j = job(M1, 1, "\"sequence_id\":\"r\"");
    submit(j);
    ck_assert_int_eq(launch(j), 0);
    ck_assert_int_eq(j->st.t0, 4);
    end(j, 1);
    job_free(j);
    ck_assert_int_eq(length("r"), 5);
}
END_TEST

static Suite *seq_nomem_suite(void)
{
    Suite *s = suite_create("seq_nomem");
    TCase *tc = tcase_create("seq_nomem");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, start_when_memory_runs_out);
    tcase_add_test(tc, rewound_step_when_memory_runs_out);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(seq_nomem_suite)

/*
 * test_exec.c - core/exec.c: every index runs exactly once per run, across
 * many runs and thread counts; the caller takes part; bad arguments.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/attn.h"
#include "core/exec.h"
#include "tests/check_main.h"

typedef struct counts {
    atomic_int *hit; /* (n) */
    atomic_int calls;
    pthread_t caller;
    atomic_int by_caller;
} counts;

static void count(void *arg, size_t i)
{
    counts *c = arg;
    atomic_fetch_add(&c->hit[i], 1);
    atomic_fetch_add(&c->calls, 1);
    if (pthread_equal(pthread_self(), c->caller))
        atomic_fetch_add(&c->by_caller, 1);
}

START_TEST(each_index_once)
{
    static const int threads[] = {1, 2, 3, 8};
    attn_exec *ex;
    ck_assert_int_eq(attn_exec_create(&ex, threads[_i]), 0);
    ck_assert_int_eq(attn_exec_threads(ex), threads[_i]);
    for (size_t n = 0; n < 300; n += 37) {
        for (int rep = 0; rep < 5; rep++) {
            counts c = {.caller = pthread_self()};
            c.hit = calloc(n + 1, sizeof(atomic_int));
            attn_exec_run(ex, n, count, &c);
            ck_assert_int_eq(atomic_load(&c.calls), (int)n);
            for (size_t i = 0; i < n; i++)
                ck_assert_int_eq(atomic_load(&c.hit[i]), 1);
            free(c.hit);
        }
    }
    attn_exec_destroy(ex);
}
END_TEST

/* With the thread allowed one CPU (taskset, a container's cpuset), 0
 * threads means one, whatever the machine has online. (On a one-CPU
 * machine this cannot tell the two apart.) */
START_TEST(zero_threads_follow_affinity)
{
    cpu_set_t saved, one;
    attn_exec *ex = NULL;
    int cpu, pinned_count, rc, restored;
    ck_assert_int_eq(sched_getaffinity(0, sizeof saved, &saved), 0);
    for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &saved); cpu++)
        ;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        return; /* not allowed here (a seccomp profile): nothing to test */
    pinned_count = attn_cpu_count();
    rc = attn_exec_create(&ex, 0);
    restored = sched_setaffinity(0, sizeof saved, &saved); /* before asserting */
    ck_assert_int_eq(restored, 0);
    ck_assert_int_eq(pinned_count, 1);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(attn_exec_threads(ex), 1);
    attn_exec_destroy(ex);
    ck_assert_int_eq(attn_cpu_count(), CPU_COUNT(&saved));
}
END_TEST

START_TEST(null_executor_and_args)
{
    counts c = {.caller = pthread_self()};
    c.hit = calloc(10, sizeof(atomic_int));
    attn_exec_run(NULL, 10, count, &c); /* inline on the caller */
    ck_assert_int_eq(atomic_load(&c.by_caller), 10);
    free(c.hit);
    attn_exec *ex = NULL;
    ck_assert_int_eq(attn_exec_create(&ex, -1), ATTN_EINVAL);
    ck_assert_ptr_null(ex);
    ck_assert_int_eq(attn_exec_create(NULL, 2), ATTN_EINVAL);
    ck_assert_int_eq(attn_exec_create(&ex, 0), 0); /* attn_cpu_count() */
    ck_assert_int_ge(attn_exec_threads(ex), 1);
    attn_exec_run(ex, 5, NULL, NULL); /* no fn: nothing runs */
    attn_exec_destroy(ex);
    attn_exec_destroy(NULL);
    ck_assert_int_eq(attn_exec_threads(NULL), 1);
}
END_TEST

static Suite *exec_suite(void)
{
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("exec");
    tcase_add_loop_test(tc, each_index_once, 0, 4);
    tcase_add_test(tc, null_executor_and_args);
    tcase_add_test(tc, zero_threads_follow_affinity);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(exec_suite)

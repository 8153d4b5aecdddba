/*
 * test_crash.c - the crash report (server/crash.c) from threads the daemon
 * starts, where a signal sent from outside (tests/server/crash.test.mjs)
 * cannot reach: a real overflow of a pool thread's stack, a real fault on
 * a thread that blocks every signal (the log writer). Each case runs in a
 * child whose stderr the test reads; the child must die of the fault after
 * writing the report. ASan and TSan builds keep their own report (crash.c
 * installs nothing): no case runs there.
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/srv.h"
#include "tests/check_main.h"

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

static srv g_s; /* text log, no writer: what the report needs of a srv */
static volatile unsigned g_depth = UINT_MAX; /* no bound the compiler sees */

/* deep: a frame of ~1 KiB a call until the stack runs out */
__attribute__((noinline)) static unsigned deep(unsigned n)
{
    volatile char pad[1024];
    pad[n % sizeof pad] = (char)n;
    if (n >= g_depth)
        return pad[0];
    return deep(n + 1) + pad[n % sizeof pad];
}

static void *pool_overflow(void *arg)
{
    (void)arg;
    srv_crash_role("a pool thread");
    srv_crash_job("running a request inline", "demo");
    return (void *)(uintptr_t)deep(0);
}

static void *writer_fault(void *arg)
{
    volatile uintptr_t at = 16; /* unmapped, aligned: a plain fault */
    (void)arg;
    srv_crash_role("the log writer");
    *(volatile int *)at = 1;
    return NULL;
}

/* crash: runs fn on a thread of 256 KiB stack (every signal blocked when
 * block_all, as the log writer starts) in a child; its stderr into out;
 * returns the child's wait status. */
static int crash(void *(*fn)(void *), int block_all, char *out, size_t cap)
{
    int fd[2], status = 0;
    size_t n = 0;
    ssize_t k;
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pthread_t th;
        pthread_attr_t a;
        sigset_t all, old;
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        srv_crash_init(&g_s);
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 << 10);
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, block_all ? &all : NULL, &old);
        if (pthread_create(&th, &a, fn, NULL) == 0)
            pthread_join(th, NULL);
        _exit(3); /* the thread came back: no fault */
    }
    close(fd[1]);
    while (n + 1 < cap && (k = read(fd[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(fd[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

START_TEST(pool_thread_stack_overflow)
{
    static char out[1 << 16];
    int st = crash(pool_overflow, 0, out, sizeof out);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                  "status %#x, stderr:\n%s", st, out);
    ck_assert_msg(strstr(out, " fatal attnd: crashed: SIGSEGV at 0x") &&
                      strstr(out, ": the thread's stack of 256 KiB "
                                  "overflowed) on a pool thread (tid "),
                  "no report of the overflow:\n%s", out);
    ck_assert_msg(strstr(out, "its last job: running a request inline, "
                              "model 'demo', begun "),
                  "%s", out);
    ck_assert_msg(strstr(out, "fatal attnd:   #0 "), "no stack:\n%s", out);
}
END_TEST

START_TEST(fault_on_a_thread_blocking_every_signal)
{
    static char out[1 << 16];
    int st = crash(writer_fault, 1, out, sizeof out);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                  "status %#x, stderr:\n%s", st, out);
    ck_assert_msg(strstr(out, " fatal attnd: crashed: SIGSEGV at 0x10 "
                              "(address not mapped) on the log writer (tid "),
                  "no report of the fault:\n%s", out);
}
END_TEST

#endif

static Suite *crash_suite(void)
{
    Suite *s = suite_create("crash");
    TCase *tc = tcase_create("report");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    tcase_add_test(tc, pool_thread_stack_overflow);
    tcase_add_test(tc, fault_on_a_thread_blocking_every_signal);
#endif
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(crash_suite)

/*
 * test_crash.c - the crash report (server/crash.c) from threads the daemon
 * starts, where a signal sent from outside (tests/server/crash.test.mjs)
 * cannot reach: a real overflow of a pool thread's stack, a real fault on
 * a thread that blocks every signal (the log writer); and two states the
 * daemon seldom shows: a fault while another thread holds the dynamic
 * loader's lock (the report must not wait for it: dlhold.so's constructor
 * holds it), and a crash of the log writer in the middle of a write (the
 * lines it had taken must be in the report). Each case runs in a child
 * whose stderr the test reads, for up to 20 s; the child must die of the
 * fault after writing the report. ASan and TSan builds keep their own
 * report (crash.c installs nothing): no case runs there.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
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

static int g_go = -1; /* a child's end of the pipe run_child waits on */

/* go: the child is ready for its stderr to be read (run_child's wait_go) */
static void go(void)
{
    if (write(g_go, "g", 1) != 1)
        _exit(4);
}

/* run_child: body(arg) in a child whose stderr goes into out (cap bytes;
 * when wait_go, read only once the child calls go()); returns the child's
 * wait status. A child still alive 20 s on is killed, its status that
 * kill's (a report that stalled). */
static int run_child(void (*body)(void *), void *arg, int wait_go, char *out,
                     size_t cap)
{
    int fd[2], gp[2], status = 0;
    size_t n = 0;
    ssize_t k;
    ck_assert_int_eq(pipe(fd), 0);
    ck_assert_int_eq(pipe(gp), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        close(gp[0]);
        g_go = gp[1];
        body(arg);
        _exit(3); /* the body came back: no fault */
    }
    close(fd[1]);
    close(gp[1]);
    time_t end = time(NULL) + 20;
    struct pollfd pg = {gp[0], POLLIN, 0}, po = {fd[0], POLLIN, 0};
    while (wait_go && time(NULL) < end && poll(&pg, 1, 100) == 0)
        ;
    while (n + 1 < cap && time(NULL) < end) {
        if (poll(&po, 1, 100) == 0)
            continue;
        if ((k = read(fd[0], out + n, cap - 1 - n)) <= 0)
            break;
        n += (size_t)k;
    }
    out[n] = 0;
    if (time(NULL) >= end)
        kill(pid, SIGKILL);
    close(fd[0]);
    close(gp[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

typedef struct {
    void *(*fn)(void *);
    int block_all;
} on_thread;

static void run_on_thread(void *arg)
{
    const on_thread *t = arg;
    pthread_t th;
    pthread_attr_t a;
    sigset_t all, old;
    srv_crash_init(&g_s);
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 << 10);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, t->block_all ? &all : NULL, &old);
    if (pthread_create(&th, &a, t->fn, NULL) == 0)
        pthread_join(th, NULL);
}

/* crash: runs fn on a thread of 256 KiB stack (every signal blocked when
 * block_all, as the log writer starts) in a child; its stderr into out;
 * returns the child's wait status. */
static int crash(void *(*fn)(void *), int block_all, char *out, size_t cap)
{
    on_thread t = {fn, block_all};
    return run_child(run_on_thread, &t, 0, out, cap);
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

static int g_hold[2]; /* dlhold.so's constructor writes a byte to [1] */

static void *load_dlhold(void *path)
{
    dlopen(path, RTLD_NOW); /* its constructor never returns */
    return NULL;
}

/* fault_while_loading: faults on the main thread while another thread's
 * dlopen runs dlhold.so's constructor, which holds the loader's lock */
static void fault_while_loading(void *path)
{
    pthread_t th;
    char fdnum[16], c;
    volatile uintptr_t at = 16;
    srv_crash_init(&g_s);
    if (pipe(g_hold) != 0)
        _exit(5);
    snprintf(fdnum, sizeof fdnum, "%d", g_hold[1]);
    setenv("DLHOLD_FD", fdnum, 1);
    if (pthread_create(&th, NULL, load_dlhold, path) != 0 ||
        read(g_hold[0], &c, 1) != 1)
        _exit(6);
    *(volatile int *)at = 1;
}

START_TEST(report_while_another_thread_holds_the_loader_lock)
{
    static char out[1 << 16], path[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", path, sizeof path - 20);
    ck_assert_int_gt(k, 0);
    path[k] = 0;
    strcpy(strrchr(path, '/') + 1, "dlhold.so");
    ck_assert_msg(access(path, R_OK) == 0, "%s: not built", path);
    int st = run_child(fault_while_loading, path, 0, out, sizeof out);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                  "status %#x (SIGKILL: the report stalled), stderr:\n%s", st,
                  out);
    ck_assert_msg(strstr(out, "fatal attnd:   #0 ") &&
                      strstr(out, "for the daemon's frames' functions and "
                                  "lines: addr2line "),
                  "no stack:\n%s", out);
    /* frames in the program and in libc are named with their objects */
    ck_assert_msg(strstr(out, "/test_crash(+0x") &&
                      strstr(out, "/libc.so.6(+0x"),
                  "frames without their objects:\n%s", out);
}
END_TEST

/* writer_tid: the log writer's thread id (named attnd-log), or 0 */
static pid_t writer_tid(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    pid_t tid = 0;
    while (d && !tid && (e = readdir(d))) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f) && !strcmp(comm, "attnd-log\n"))
            tid = (pid_t)atoi(e->d_name);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return tid;
}

/* blocking: whether thread tid blocks signal sig (as it does while it
 * runs crash.c's handler, whose mask is every signal) */
static int blocking(pid_t tid, int sig)
{
    char path[64], l[256];
    int yes = 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    while (f && fgets(l, sizeof l, f))
        if (!strncmp(l, "SigBlk:", 7))
            yes = strtoull(l + 7, NULL, 16) >> (sig - 1) & 1;
    if (f)
        fclose(f);
    return yes;
}

/* crash_mid_write: the log writer takes a line and blocks writing it to a
 * full stderr; a second line waits behind it; then the writer is sent
 * SIGBUS, so its write never ends. The test reads stderr once the
 * writer runs the handler (its first line waits for room): the pipe
 * drained earlier, the writer would finish its write first. */
static void crash_mid_write(void *arg)
{
    static srv s;
    static char fill[512];
    const char *h, *q;
    size_t nh = 0, nq;
    int fl = fcntl(STDERR_FILENO, F_GETFL);
    (void)arg;
    s.cfg.log_buffer = 1 << 16;
    s.cfg.log_flush_ms = 0;
    memset(fill, '.', sizeof fill - 1);
    fill[sizeof fill - 1] = '\n';
    fcntl(STDERR_FILENO, F_SETPIPE_SZ, 4096);
    fcntl(STDERR_FILENO, F_SETFL, fl | O_NONBLOCK);
    while (write(STDERR_FILENO, fill, sizeof fill) > 0)
        ;
    fcntl(STDERR_FILENO, F_SETFL, fl);
    if (srv_log_start(&s) < 0)
        _exit(5);
    srv_crash_init(&s);
    srv_log(&s, "info", "the line in the writer's hands");
    for (int i = 0; i < 10000 && !nh; i++) {
        usleep(1000);
        srv_log_crash_lines(&s, &h, &nh, &q, &nq);
    }
    if (!nh) /* the writer never took the line: say so, not "order" */
        _exit(7);
    srv_log(&s, "info", "the line waiting for the writer");
    pid_t tid = writer_tid();
    if (!tid || syscall(SYS_tgkill, getpid(), tid, SIGBUS) != 0)
        _exit(6);
    for (int i = 0; i < 2000 && !blocking(tid, SIGBUS); i++)
        usleep(1000);
    go();
    for (;;)
        pause();
}

START_TEST(writer_crash_mid_write_reports_the_lines_it_had_taken)
{
    static char out[1 << 16];
    int st = run_child(crash_mid_write, NULL, 1, out, sizeof out);
    const char *shown = out + strspn(out, ".\n"); /* past the filling */
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
                  "status %#x, stderr:\n%s", st, shown);
    const char *r = strstr(out, " fatal attnd: crashed: SIGBUS sent by pid ");
    ck_assert_msg(r && strstr(r, " on the log writer (tid "), "%s", shown);
    const char *taken = strstr(r, " fatal attnd: log lines the writer had "
                                  "taken and not yet written follow");
    const char *line1 = strstr(r, " info attnd: the line in the writer's "
                                  "hands\n");
    const char *waiting = strstr(r, " fatal attnd: log lines not yet "
                                    "written, if any, follow");
    const char *line2 = strstr(r, " info attnd: the line waiting for the "
                                  "writer\n");
    const char *stack = strstr(r, " fatal attnd:   #0 ");
    ck_assert_msg(taken && line1 && waiting && line2 && stack &&
                      taken < line1 && line1 < waiting && waiting < line2 &&
                      line2 < stack,
                  "the lines, or their order, are not the report's:\n%s",
                  shown);
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
    tcase_add_test(tc, report_while_another_thread_holds_the_loader_lock);
    tcase_add_test(tc, writer_crash_mid_write_reports_the_lines_it_had_taken);
#endif
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(crash_suite)

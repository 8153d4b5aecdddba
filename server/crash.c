/*
 * crash.c - a report on stderr when attnd dies of a fault or an abort.
 *
 * A thread that faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL) or aborts
 * (SIGABRT: a failed assert, glibc finding its heap corrupted), or a
 * process sent one of those signals, writes with write(2) alone:
 *   - the signal, its code and the faulting address (or the pid that sent
 *     it), the thread (the loop, the log writer, a pool thread, or one
 *     attnd did not make: OpenBLAS's, libuv's), and the last job that
 *     thread began (what, for which model, how long before);
 *   - the log lines the writer had taken and not yet written (from the
 *     first line its write had not finished; it may still be writing
 *     them, so they may appear twice), then those still waiting for it (a
 *     request's line waits up to --log-flush-ms): the requests answered
 *     just before;
 *   - the stack, one frame a line, each named by its object, its offset
 *     there and the exported function holding it, and the addr2line
 *     command that turns the daemon's frames into functions and lines (the
 *     binary keeps its symbols: built with -g, installed unstripped);
 * in --log-format's form (JSON: a "fatal" object a line). Then the signal's
 * default action runs, so the exit status (killed by that signal) and a
 * core dump are what they would have been without the report.
 *
 * A handler installed before it (core/st.c's SIGBUS guard of reads of a
 * weight file that may be cut short, whose fault fails the load) runs
 * first; the report follows when it returns. Each thread attnd starts (the
 * loop, the log writer, the pool's) runs the handler on a stack of its own,
 * so an overflow of its stack is reported too; a thread attnd did not start
 * (OpenBLAS's) has none, and its overflow ends the process without a
 * report. ASan and TSan builds keep their sanitizer's own report: nothing
 * here is installed. A thread that faults while another writes the report
 * waits for that one to end the process; a fault inside the report ends it
 * at once (every signal is blocked while the handler runs, and the kernel
 * ends a process whose thread faults with the signal blocked).
 *
 * Nothing the handler calls takes a lock another thread could hold: the
 * frames are named from crash_objs.c's table of the objects loaded at
 * start, not by dladdr (which takes the dynamic loader's lock; a frame in
 * an object loaded later is said to be in none), backtrace's unwinder
 * finds objects with glibc's lock-free _dl_find_object (libgcc 12 on glibc
 * 2.35 or later), and the log's lines are read without its lock.
 */
#include "server/srv.h"
#include "server/crash_int.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRASH_REPORT 0
#else
#define CRASH_REPORT 1
#endif

#define MAX_FRAMES 64
#define ALT_STACK (64 << 10) /* a thread's stack for the handler */
/* how far below its stack a fault still counts as the stack's overflow: a
 * frame larger than the guard page steps over it */
#define OVERFLOW_REACH (64 << 10)
#define MODEL_CHARS 96

/* what a thread's report says of it (srv_crash_role, srv_crash_job) */
static _Thread_local const char *t_role;
static _Thread_local const char *t_what;
static _Thread_local char t_model[MODEL_CHARS];
static _Thread_local uint64_t t_at;
static _Thread_local uintptr_t t_stack_lo, t_stack_hi; /* 0: not known */

static srv *c_srv;
static pid_t c_loop_tid;
static uint64_t c_start_ns;
static char c_exe[1024];      /* /proc/self/exe at start */
static atomic_int c_reporter; /* tid writing the report, 0 = none */

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_FATAL (sizeof fatal_signals / sizeof *fatal_signals)
/* the SIGBUS handler installed before (core/st.c's guard), run first */
static struct sigaction c_bus_prev;

/* srv_crash_role also gives the thread what a report needs: a stack of its
 * own for the handler (one that overflowed could not run it; the loop
 * thread's is srv_crash_init's), kept for the thread's life, and the faults
 * let through (the log writer blocks every signal, and the kernel ends a
 * process whose thread faults with the signal blocked, before any handler
 * runs). */
/* note_stack: this thread's stack bounds, for overflowed() */
static void note_stack(void)
{
    pthread_attr_t a;
    void *lo;
    size_t n;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return;
    if (pthread_attr_getstack(&a, &lo, &n) == 0) {
        t_stack_lo = (uintptr_t)lo;
        t_stack_hi = (uintptr_t)lo + n;
    }
    pthread_attr_destroy(&a);
}

void srv_crash_role(const char *role)
{
    static _Thread_local int ready;
    t_role = role;
    if (!CRASH_REPORT || ready)
        return;
    ready = 1;
    note_stack();
    stack_t ss = {.ss_size = ALT_STACK};
    ss.ss_sp = mmap(NULL, ss.ss_size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss.ss_sp != MAP_FAILED)
        sigaltstack(&ss, NULL);
    sigset_t faults;
    sigemptyset(&faults);
    for (size_t i = 0; i < N_FATAL; i++)
        if (fatal_signals[i] != SIGABRT) /* abort(3) unblocks its own */
            sigaddset(&faults, fatal_signals[i]);
    pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
}

void srv_crash_job(const char *what, const char *name)
{
    size_t i = 0;
    t_what = what;
    if (!what)
        return;
    for (; name && name[i] && i + 1 < MODEL_CHARS; i++)
        t_model[i] = name[i];
    t_model[i] = 0;
    t_at = srv_now_ns();
}

/* ---- a line, built without malloc or stdio ------------------------------- */

typedef struct {
    char b[1024];
    size_t n;
} line;

static void put(line *l, const char *s)
{
    for (; s && *s && l->n + 1 < sizeof l->b; s++)
        l->b[l->n++] = *s;
}

static void put_uint(line *l, uint64_t v, int min_digits)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || k < min_digits);
    while (k && l->n + 1 < sizeof l->b)
        l->b[l->n++] = d[--k];
}

static void put_hex(line *l, uintptr_t v)
{
    char d[2 * sizeof v];
    int k = 0;
    do {
        d[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    put(l, "0x");
    while (k && l->n + 1 < sizeof l->b)
        l->b[l->n++] = d[--k];
}

static void write_fd2(const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(STDERR_FILENO, p, n);
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

/* stamp: now as log.c writes it, 2026-01-02T03:04:05.678Z (the civil date
 * from the day count, as gmtime_r would, which a handler may not call). */
static void stamp(line *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t days = ts.tv_sec / 86400, sec = ts.tv_sec % 86400;
    int64_t z = days + 719468, era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    put_uint(l, (uint64_t)(yoe + era * 400 + (m <= 2)), 4);
    put(l, "-");
    put_uint(l, (uint64_t)m, 2);
    put(l, "-");
    put_uint(l, (uint64_t)d, 2);
    put(l, "T");
    put_uint(l, (uint64_t)(sec / 3600), 2);
    put(l, ":");
    put_uint(l, (uint64_t)(sec / 60 % 60), 2);
    put(l, ":");
    put_uint(l, (uint64_t)(sec % 60), 2);
    put(l, ".");
    put_uint(l, (uint64_t)(ts.tv_nsec / 1000000), 3);
    put(l, "Z");
}

/* emit: msg as one "fatal" line of the log's format. */
static void emit(const line *msg)
{
    line out = {.n = 0};
    if (c_srv->json_log) {
        put(&out, "{\"ts\":\"");
        stamp(&out);
        put(&out, "\",\"level\":\"fatal\",\"msg\":\"");
        for (size_t i = 0; i < msg->n && out.n + 8 < sizeof out.b; i++) {
            unsigned char c = (unsigned char)msg->b[i];
            if (c == '"' || c == '\\')
                out.b[out.n++] = '\\', out.b[out.n++] = (char)c;
            else if (c < 0x20) {
                put(&out, "\\u00");
                out.b[out.n++] = "0123456789abcdef"[c >> 4];
                out.b[out.n++] = "0123456789abcdef"[c & 15];
            } else
                out.b[out.n++] = (char)c;
        }
        put(&out, "\"}");
    } else {
        stamp(&out);
        put(&out, " fatal attnd: ");
        for (size_t i = 0; i < msg->n && out.n + 1 < sizeof out.b; i++)
            out.b[out.n++] = msg->b[i];
    }
    out.b[out.n++] = '\n';
    write_fd2(out.b, out.n);
}

/* overflowed: whether a fault's address is at the low end of this thread's
 * stack (its guard page, or just past it) */
static int overflowed(const siginfo_t *si)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    return si->si_signo == SIGSEGV && t_stack_lo &&
           a + OVERFLOW_REACH >= t_stack_lo && a < t_stack_lo + 4096;
}

/* cause: what si_code says of a fault, or "" */
static const char *cause(const siginfo_t *si)
{
    switch (si->si_signo) {
    case SIGSEGV:
        return si->si_code == SEGV_MAPERR   ? "address not mapped"
               : si->si_code == SEGV_ACCERR ? "no permission for the access"
                                            : "";
    case SIGBUS:
        return si->si_code == BUS_ADRERR ? "no such physical address (a mapped "
                                           "file truncated?)"
               : si->si_code == BUS_ADRALN ? "misaligned address"
                                           : "";
    case SIGFPE:
        return si->si_code == FPE_INTDIV ? "integer division by zero" : "";
    case SIGILL:
        return si->si_code == ILL_ILLOPC ? "illegal opcode" : "";
    }
    return "";
}

/* report: everything above the re-raise. */
static void report(int sig, const siginfo_t *si, pid_t tid)
{
    line l = {.n = 0};
    put(&l, "crashed: SIG");
    put(&l, sigabbrev_np(sig)); /* a table's entry: no locale, no lock */
    if (si->si_code <= 0) {     /* kill(2), tgkill(2), raise(3), abort(3) */
        put(&l, " sent by pid ");
        put_uint(&l, (uint64_t)si->si_pid, 1);
        if (si->si_pid == getpid())
            put(&l, " (attnd itself: an abort or a failed check)");
    } else {
        const char *why = cause(si);
        put(&l, " at ");
        put_hex(&l, (uintptr_t)si->si_addr);
        if (*why || overflowed(si)) {
            put(&l, " (");
            put(&l, why);
            if (overflowed(si)) {
                put(&l, *why ? ": " : "");
                put(&l, "the thread's stack of ");
                put_uint(&l, (t_stack_hi - t_stack_lo) >> 10, 1);
                put(&l, " KiB overflowed");
            }
            put(&l, ")");
        }
    }
    put(&l, " on ");
    put(&l, tid == c_loop_tid ? "the loop thread"
            : t_role          ? t_role
                     : "a thread attnd did not start (OpenBLAS's or libuv's)");
    put(&l, " (tid ");
    put_uint(&l, (uint64_t)tid, 1);
    put(&l, "); attnd " ATTND_VERSION ", up ");
    put_uint(&l, (srv_now_ns() - c_start_ns) / 1000000000u, 1);
    put(&l, " s");
    emit(&l);
    if (t_what) {
        l.n = 0;
        put(&l, "its last job: ");
        put(&l, t_what);
        if (t_model[0]) {
            put(&l, ", model '");
            put(&l, t_model);
            put(&l, "'");
        }
        uint64_t us = (srv_now_ns() - t_at) / 1000u;
        put(&l, ", begun ");
        put_uint(&l, us / 1000u, 1);
        put(&l, ".");
        put_uint(&l, us % 1000u, 3);
        put(&l, " ms before");
        emit(&l);
    }
    const char *hand, *queued;
    size_t n_hand, n_queued;
    srv_log_crash_lines(c_srv, &hand, &n_hand, &queued, &n_queued);
    if (n_hand) {
        l.n = 0;
        put(&l, "log lines the writer had taken and not yet written follow "
                "(it may be writing them still: some may appear twice)");
        emit(&l);
        write_fd2(hand, n_hand);
    }
    l.n = 0;
    put(&l, "log lines not yet written, if any, follow; then the stack");
    emit(&l);
    write_fd2(queued, n_queued);

    void *frames[MAX_FRAMES];
    int n = backtrace(frames, MAX_FRAMES);
    line cmd = {.n = 0};
    put(&cmd,
        "for the daemon's frames' functions and lines: addr2line -f -C -i -e ");
    put(&cmd, c_exe);
    size_t cmd_head = cmd.n;
    for (int i = 0; i < n; i++) {
        srv__place at;
        uintptr_t pc = (uintptr_t)frames[i];
        l.n = 0;
        put(&l, "  #");
        put_uint(&l, (uint64_t)i, 1);
        put(&l, " ");
        if (srv__objs_find(pc, &at) < 0) {
            put_hex(&l, pc);
            put(&l, " (in no object loaded at start)");
            emit(&l);
            continue;
        }
        put(&l, at.object);
        put(&l, "(+");
        put_hex(&l, at.offset);
        put(&l, ")");
        if (at.symbol) {
            put(&l, " ");
            put(&l, at.symbol);
            put(&l, "+");
            put_hex(&l, at.symbol_offset);
        }
        if (at.is_exe) {
            put(&cmd, " ");
            put_hex(&cmd, at.offset);
        }
        emit(&l);
    }
    if (cmd.n > cmd_head)
        emit(&cmd);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    int tid = (int)syscall(SYS_gettid), none = 0;
    /* st.c's guard leaves through a guarded read's sigsetjmp, else returns */
    if (sig == SIGBUS && (c_bus_prev.sa_flags & SA_SIGINFO))
        c_bus_prev.sa_sigaction(sig, si, uc);
    if (!atomic_compare_exchange_strong(&c_reporter, &none, tid))
        for (;;) /* another thread reports, then ends the process */
            pause();
    report(sig, si, tid);
    signal(sig, SIG_DFL);
    /* A pid namespace's init (attnd as a container's entrypoint) is not
     * ended by a signal with the default action unless the kernel forces
     * it (a fault): the raise below would be dropped, a sent signal's
     * process went on after its report, and abort(3) went on to a
     * faulting instruction whose SIGSEGV found this handler again, the
     * reporting thread then waiting for good. So a sent one (kill, tgkill,
     * raise, abort) ends it with a death's status as a shell reports it;
     * a fault's instruction, run again, faults again, forced. */
    if (si->si_code <= 0 && getpid() == 1)
        _exit(128 + sig);
    /* blocked while this handler runs: taken with the default action on
     * return (a fault's instruction also runs again and faults again) */
    raise(sig);
}

void srv_crash_init(srv *s)
{
    static char altstack[ALT_STACK];
    void *warm[2];
    if (!CRASH_REPORT)
        return;
    c_srv = s;
    c_loop_tid = (pid_t)syscall(SYS_gettid);
    note_stack();
    c_start_ns = srv_now_ns();
    ssize_t k = readlink("/proc/self/exe", c_exe, sizeof c_exe - 1);
    c_exe[k > 0 ? k : 0] = 0;
    backtrace(warm, 2); /* loads libgcc's unwinder now, not in the handler */
    srv__objs_record(c_exe); /* after it: libgcc_s is in the table */
    /* the loop thread's own stack for the handler: one that overflowed
     * could not run it */
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < N_FATAL; i++)
        sigaction(fatal_signals[i], &sa,
                  fatal_signals[i] == SIGBUS ? &c_bus_prev : NULL);
}

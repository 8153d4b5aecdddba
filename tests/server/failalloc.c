/*
 * failalloc.c - an LD_PRELOAD library for tests/server/failalloc.test.mjs:
 * makes attnd's own allocations fail on demand.
 *
 * SIGUSR1 arms it: from then on one in k of the malloc, calloc, realloc,
 * posix_memalign, aligned_alloc, strdup and strndup calls made by the
 * executable's own code (attnd with core/, proto/ and server/) or by
 * jansson (its parses and dumps for attnd: core/json_mem.c routes them
 * through the executable's json_malloc, so they count as attnd's; the
 * library's own range counts for a build without it) returns NULL with
 * ENOMEM, k the
 * next of FAILALLOC_EVERY's comma-separated values (default 7) at each
 * arming, cycling. Which ones is a hash of their order (a fixed pattern,
 * but not a period: every k-th would fail the same allocation of each
 * connection's set-up, when nothing else runs between). SIGUSR2 disarms
 * it and writes to stderr
 *
 *   failalloc: F of N allocations failed (1 in k)
 *
 * FAILALLOC_AT_START=1 arms it from the first allocation (with the first
 * period), for a start under memory pressure; FAILALLOC_SEED=n picks
 * another pattern.
 *
 * FAILALLOC_OVER=n changes what arming does: from then on every
 * allocation of the executable's own code of more than n bytes fails,
 * and no other (a memory limit a test can set once attnd has started,
 * e.g. for a batch's plan whose scratch outgrows what one request needs).
 *
 * FAILALLOC_TRACE=1 also writes each failed call site, as an offset into
 * the executable (addr2line -e attnd 0x...; jansson's as "jansson +0x...").
 *
 * (N: those allocations while armed). nghttp2's allocations for gRPC
 * connections count as attnd's too: they go through server/grpc_conn.c's
 * h2_malloc. FAILALLOC_MHD=1 adds libmicrohttpd's (a connection's state,
 * an answer and its headers; as "libmicrohttpd +0x..." in a trace). The
 * other libraries' allocations (libuv, OpenBLAS) are left alone: their
 * out-of-memory paths are theirs, and abort in places by design. Only for
 * the default build: a sanitizer's runtime replaces malloc itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);

/* the code whose allocations may fail: [0] the executable, [1] jansson,
 * [2] libmicrohttpd when FAILALLOC_MHD=1 */
static struct {
    uintptr_t lo, hi, base;
} code[3];
static int with_mhd;
static uint64_t seed = 0x9e3779b97f4a7c15u; /* FAILALLOC_SEED: another pattern */
static int trace;                  /* FAILALLOC_TRACE=1: each call site */
static atomic_int armed;
static atomic_ulong seen, failed, every = 7;
static size_t over; /* FAILALLOC_OVER: larger ones fail, 0 = none */
static unsigned long periods[16] = {7};
static int n_periods = 1, next_period;

/* the first object dl_iterate_phdr reports is the executable */
static int find_code(struct dl_phdr_info *info, size_t size, void *data)
{
    int i, *nth = data, which = *nth == 0 ? 0 : -1;
    (void)size;
    if (which < 0 && info->dlpi_name && strstr(info->dlpi_name, "/libjansson."))
        which = 1;
    if (which < 0 && with_mhd && info->dlpi_name &&
        strstr(info->dlpi_name, "/libmicrohttpd."))
        which = 2;
    ++*nth;
    for (i = 0; which >= 0 && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            code[which].base = info->dlpi_addr;
            code[which].lo = info->dlpi_addr + ph->p_vaddr;
            code[which].hi = code[which].lo + ph->p_memsz;
        }
    }
    return 0;
}

/* put_num: n in decimal at the end of buf (async-signal-safe) */
static char *put_num(char *end, unsigned long n)
{
    do {
        *--end = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    return end;
}

/* put_str: s before end (async-signal-safe) */
static char *put_str(char *end, const char *s, size_t n)
{
    while (n)
        *--end = s[--n];
    return end;
}

static void on_signal(int sig)
{
    char buf[128], *p = buf + sizeof buf;
    static const char a[] = "failalloc: ", b[] = " of ",
                      c[] = " allocations failed (1 in ", d[] = ")\n";
    if (sig == SIGUSR1) {
        if (!atomic_load(&armed)) { /* a new round: its period, counts afresh */
            atomic_store(&seen, 0);
            atomic_store(&failed, 0);
            atomic_store(&every, periods[next_period]);
            next_period = (next_period + 1) % n_periods;
            atomic_store(&armed, 1);
        }
        return;
    }
    atomic_store(&armed, 0);
    p = put_str(p, d, sizeof d - 1);
    p = put_num(p, atomic_load(&every));
    p = put_str(p, c, sizeof c - 1);
    p = put_num(p, atomic_load(&seen));
    p = put_str(p, b, sizeof b - 1);
    p = put_num(p, atomic_load(&failed));
    p = put_str(p, a, sizeof a - 1);
    if (write(2, p, (size_t)(buf + sizeof buf - p)) < 0)
        return;
}

__attribute__((constructor)) static void failalloc_init(void)
{
    struct sigaction sa = {0};
    const char *e = getenv("FAILALLOC_EVERY");
    int n = 0, nth = 0;
    while (e && *e && n < 16) {
        char *end;
        unsigned long k = strtoul(e, &end, 10);
        if (end == e)
            break;
        if (k > 0)
            periods[n++] = k;
        e = *end == ',' ? end + 1 : end;
    }
    if (n)
        n_periods = n;
    trace = getenv("FAILALLOC_TRACE") != NULL;
    with_mhd = getenv("FAILALLOC_MHD") != NULL;
    if (getenv("FAILALLOC_SEED"))
        seed += strtoull(getenv("FAILALLOC_SEED"), NULL, 10) * 0xbf58476d1ce4e5b9u;
    if (getenv("FAILALLOC_OVER"))
        over = strtoull(getenv("FAILALLOC_OVER"), NULL, 10);
    if (getenv("FAILALLOC_AT_START")) { /* armed from the first allocation */
        atomic_store(&every, periods[0]);
        next_period = 1 % n_periods;
        atomic_store(&armed, 1);
    }
    dl_iterate_phdr(find_code, &nth);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
}

/* too_big: is the allocation of n bytes called from ret one that
 * FAILALLOC_OVER fails? */
static int too_big(void *ret, size_t n)
{
    uintptr_t at = (uintptr_t)ret;
    if (!over || n <= over || at < code[0].lo || at >= code[0].hi ||
        !atomic_load_explicit(&armed, memory_order_relaxed))
        return 0;
    atomic_fetch_add(&failed, 1);
    errno = ENOMEM;
    return 1;
}

/* fails: does the allocation called from ret fail? */
static int fails(void *ret)
{
    uintptr_t at = (uintptr_t)ret;
    int w = 0;
    if (over || !atomic_load_explicit(&armed, memory_order_relaxed))
        return 0;
    while (w < 3 && (at < code[w].lo || at >= code[w].hi))
        w++;
    if (w == 3)
        return 0;
    unsigned long k = atomic_load_explicit(&every, memory_order_relaxed);
    uint64_t h = atomic_fetch_add(&seen, 1) * 0x9e3779b97f4a7c15u + seed;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u; /* splitmix64's finaliser */
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
    if ((h ^ (h >> 31)) % k != 0)
        return 0;
    atomic_fetch_add(&failed, 1);
    if (trace) { /* the call site, as an offset into its object */
        char buf[48], *p = buf + sizeof buf;
        *--p = '\n';
        p = put_num(p, (unsigned long)(at - code[w].base));
        p = w == 2 ? put_str(p, "failalloc at libmicrohttpd +", 28)
            : w ? put_str(p, "failalloc at jansson +", 22)
                : put_str(p, "failalloc at +", 14);
        if (write(2, p, (size_t)(buf + sizeof buf - p)) < 0)
            trace = 0;
    }
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t n)
{
    void *ret = __builtin_return_address(0);
    return too_big(ret, n) || fails(ret) ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    void *ret = __builtin_return_address(0);
    size_t bytes = size && n > SIZE_MAX / size ? SIZE_MAX : n * size;
    return too_big(ret, bytes) || fails(ret) ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    void *ret = __builtin_return_address(0);
    return too_big(ret, n) || fails(ret) ? NULL : __libc_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p;
    void *ret = __builtin_return_address(0);
    if (too_big(ret, n) || fails(ret))
        return ENOMEM;
    p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    void *ret = __builtin_return_address(0);
    return too_big(ret, n) || fails(ret) ? NULL : __libc_memalign(align, n);
}

/* libc's own strdup allocates from inside libc, out of reach above */
static char *dup_n(const char *s, size_t n)
{
    char *p = __libc_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *strdup(const char *s)
{
    return fails(__builtin_return_address(0)) ? NULL : dup_n(s, strlen(s));
}

char *strndup(const char *s, size_t n)
{
    return fails(__builtin_return_address(0)) ? NULL : dup_n(s, strnlen(s, n));
}

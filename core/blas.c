/*
 * blas.c - what attnd asks of the OpenBLAS it links: one thread, and
 * kernels made for the CPU it runs on. See attn.h, "BLAS".
 *
 * Both are read by OpenBLAS from the environment when the library loads,
 * before main, so a process that wants them set runs itself again once
 * (attn_blas_reexec). The kernel family matters most: OpenBLAS picks its
 * kernels by CPU model, and a model newer than the library (Debian 12's
 * 0.3.21 does not know Intel family 6 model 207, this machine's) gets the
 * Prescott (SSE3) kernels, which ran attnd's GEMMs 2 to 5 times slower
 * than the AVX-512 ones the CPU has (README, "BLAS kernels").
 */
#include "attn.h"
#include "kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OpenBLAS's own calls, if the CBLAS we link is OpenBLAS. Declared weak
 * so any other CBLAS links too. */
extern void openblas_set_num_threads(int n) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

void attn__blas_single(void)
{
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
}

const char *attn_blas_core(void)
{
    return openblas_get_corename ? openblas_get_corename() : NULL;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* OpenBLAS core names without AVX2/FMA kernels: what it falls back to on
 * a CPU it does not know, or knew before it had wider units. */
static int pre_avx2(const char *core)
{
    static const char *const old[] = {
        "Prescott", "Core2",  "Penryn",    "Dunnington", "Nehalem",
        "Atom",     "Katmai", "Coppermine", "Northwood", "Banias",
        "Athlon",   "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat",
        "Bulldozer", "Piledriver", "Steamroller", "Excavator",
        "Sandybridge", "Unknown"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (strcmp(core, old[i]) == 0)
            return 1;
    return 0;
}
#endif

const char *attn_blas_core_wanted(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const char *have = attn_blas_core();
    if (!have || getenv("OPENBLAS_CORETYPE") || !pre_avx2(have))
        return NULL;
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks the OS saves the wide registers */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

/* thp_tunables: GLIBC_TUNABLES with glibc.malloc.hugetlb=1 added (in
 * out), or NULL when it names that tunable already (the caller's choice
 * wins) or out is too small. With it glibc's malloc (2.35 and later; older
 * ones ignore it) asks for transparent huge pages (MADV_HUGEPAGE) on what
 * it maps: in a VM that faults each 4 KiB page in at ~3 us a KiB
 * (bench/ROUNDS.md, "Eighth round"), a large request's buffers and the weights
 * are faulted in 2 MiB at a time, and the weights take fewer TLB
 * entries. */
static const char *thp_tunables(char *out, size_t cap)
{
    const char *t = getenv("GLIBC_TUNABLES");
    int n;
    if (t && strstr(t, "glibc.malloc.hugetlb"))
        return NULL;
    n = snprintf(out, cap, "%s%sglibc.malloc.hugetlb=1", t ? t : "", t && *t ? ":" : "");
    return n > 0 && (size_t)n < cap ? out : NULL;
}

void attn_blas_reexec(char **argv)
{
    char self[4096], tun[1024];
    ssize_t n;
    const char *core = attn_blas_core_wanted();
    const char *thp = thp_tunables(tun, sizeof tun);
    int threads = !getenv("OPENBLAS_NUM_THREADS");
    if (!threads && !core && !thp)
        return;
    /* exec the binary's own path, not /proc/self/exe: the process name
     * (ps, pgrep, /proc/PID/comm) comes from the path's last part, and an
     * operator looks for "attnd", not "exe" */
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1)
        return;
    self[n] = 0;
    const char *old_tun = getenv("GLIBC_TUNABLES");
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", old_tun ? old_tun : "");
    if (threads)
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (core)
        setenv("OPENBLAS_CORETYPE", core, 1);
    if (thp)
        setenv("GLIBC_TUNABLES", thp, 1);
    execv(self, argv);
    /* the exec failed: go on as we are */
    if (threads)
        unsetenv("OPENBLAS_NUM_THREADS");
    if (core)
        unsetenv("OPENBLAS_CORETYPE");
    if (thp && old_tun)
        setenv("GLIBC_TUNABLES", saved, 1);
    else if (thp)
        unsetenv("GLIBC_TUNABLES");
}

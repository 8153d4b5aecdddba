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

void attn_blas_reexec(char **argv)
{
    char self[4096];
    ssize_t n;
    const char *core = attn_blas_core_wanted();
    int threads = !getenv("OPENBLAS_NUM_THREADS");
    if (!threads && !core)
        return;
    /* exec the binary's own path, not /proc/self/exe: the process name
     * (ps, pgrep, /proc/PID/comm) comes from the path's last part, and an
     * operator looks for "attnd", not "exe" */
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1)
        return;
    self[n] = 0;
    if (threads)
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (core)
        setenv("OPENBLAS_CORETYPE", core, 1);
    execv(self, argv);
    /* the exec failed: go on as we are */
    if (threads)
        unsetenv("OPENBLAS_NUM_THREADS");
    if (core)
        unsetenv("OPENBLAS_CORETYPE");
}

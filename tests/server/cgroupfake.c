/*
 * cgroupfake.c - an LD_PRELOAD library for tests/server/memfit.test.mjs:
 * attnd reads a cgroup memory limit of the test's making (server/memfit.c),
 * without root, a cgroup of its own or a setting in the user's manual.
 *
 * CGROUPFAKE_DIR names a folder. An open of /proc/self/cgroup opens
 * <dir>/proc-self-cgroup instead, and an open of a path under
 * /sys/fs/cgroup/ opens <dir>/<the rest of it> (so a v2 limit goes in
 * <dir>/memory.max, a v1 one in <dir>/memory/memory.limit_in_bytes). Each
 * such open is written to stderr as "cgroupfake: <path> -> <new path>", so
 * a test can tell that the shim was loaded and read. Other paths, and
 * every path without CGROUPFAKE_DIR, open as they would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYS_CG "/sys/fs/cgroup/"

/* redirect: path's stand-in in buf, or path itself. */
static const char *redirect(const char *path, char *buf, size_t n)
{
    const char *dir = getenv("CGROUPFAKE_DIR"), *rest = NULL;
    char line[4096 + 64];
    int len;
    if (!dir || !path)
        return path;
    if (strcmp(path, "/proc/self/cgroup") == 0)
        rest = "proc-self-cgroup";
    else if (strncmp(path, SYS_CG, strlen(SYS_CG)) == 0)
        rest = path + strlen(SYS_CG);
    if (!rest || snprintf(buf, n, "%s/%s", dir, rest) >= (int)n)
        return path;
    len = snprintf(line, sizeof line, "cgroupfake: %s -> %s\n", path, buf);
    if (len > 0)
        (void)!write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    return buf;
}

static mode_t mode_of(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define WRAP(name, ...)                                                      \
    static int (*real)(__VA_ARGS__);                                         \
    if (!real)                                                               \
        real = (int (*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

int open(const char *path, int flags, ...)
{
    char buf[4096];
    va_list ap;
    mode_t mode;
    WRAP("open", const char *, int, ...);
    va_start(ap, flags);
    mode = mode_of(flags, ap);
    va_end(ap);
    return real(redirect(path, buf, sizeof buf), flags, mode);
}

int open64(const char *path, int flags, ...)
{
    char buf[4096];
    va_list ap;
    mode_t mode;
    WRAP("open64", const char *, int, ...);
    va_start(ap, flags);
    mode = mode_of(flags, ap);
    va_end(ap);
    return real(redirect(path, buf, sizeof buf), flags, mode);
}

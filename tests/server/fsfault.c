/*
 * fsfault.c - an LD_PRELOAD library for tests/server/upload_faults.test.mjs:
 * the repository's filesystem fails the way real ones do, where an upload
 * writes and publishes (server/upload.c), without root or a special mount.
 *
 * FSFAULT_CTL names a file of words, read again at each call it judges
 * (a test changes the faults while attnd runs; an empty or missing file:
 * none):
 *
 *   no-rename-flags  renameat2 with RENAME_EXCHANGE or RENAME_NOREPLACE
 *                    answers as a filesystem without them (EINVAL, after
 *                    the checks the kernel makes first: ENOENT for an
 *                    exchange with nothing at newpath, EEXIST for a
 *                    no-replace onto something)
 *   rename-in=E      rename(2) from the staging area into the repository
 *                    fails with errno E (EIO, ENOSPC: the names rename(3)
 *                    knows), except of a folder named "...~old" (the
 *                    two-rename publish putting the old folder back)
 *   write=E          a write to a file created in the staging area writes
 *                    half of what it is given, and the next one fails
 *                    with E (a disk that fills)
 *   fsync=E          fsync of a file created in the staging area fails
 *   fsync-dir=E      fsync of a folder in the staging area fails
 *   fsync-repo=E     fsync of a folder outside the staging area (the
 *                    repository) fails
 *
 * Each fault it makes is written to stderr as "fsfault: <call> <path>:
 * <errno name>", so a test can tell that the fault happened (and a shim
 * not loaded from a test that passes for nothing).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STAGING "/.attnd-staging/"
#define MAX_FD 65536

/* what each descriptor opened in the staging area (or the repository's
 * folder) may be made to do: */
enum { F_FILE = 1, F_DIR = 2, F_REPO_DIR = 4, F_HALF = 8 };
static unsigned char fds[MAX_FD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_fsync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);

__attribute__((constructor)) static void init(void)
{
    real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    real_open64 = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open64");
    real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    real_renameat2 = (int (*)(int, const char *, int, const char *, unsigned))dlsym(
        RTLD_NEXT, "renameat2");
}

static const struct {
    const char *name;
    int e;
} errnos[] = {{"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT},
              {"EROFS", EROFS}, {"EINVAL", EINVAL}, {"EACCES", EACCES}};

/* fault: the errno the control file gives key ("key=E"), 1 for a bare
 * word key, 0 when it says nothing of it. */
static int fault(const char *key)
{
    const char *ctl = getenv("FSFAULT_CTL");
    char buf[512], *p, *save;
    size_t kl = strlen(key);
    ssize_t n;
    int fd;
    if (!ctl || (fd = real_open(ctl, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    real_close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    for (p = strtok_r(buf, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save)) {
        if (strncmp(p, key, kl) != 0)
            continue;
        if (p[kl] == 0)
            return 1;
        if (p[kl] != '=')
            continue;
        for (size_t i = 0; i < sizeof errnos / sizeof *errnos; i++)
            if (strcmp(p + kl + 1, errnos[i].name) == 0)
                return errnos[i].e;
    }
    return 0;
}

/* told: "fsfault: <call> <path>: <E>" on stderr; errno = e; -1 */
static int told(const char *call, const char *path, int e)
{
    char line[4300];
    const char *name = "?";
    int n;
    for (size_t i = 0; i < sizeof errnos / sizeof *errnos; i++)
        if (errnos[i].e == e)
            name = errnos[i].name;
    n = snprintf(line, sizeof line, "fsfault: %s %s: %s\n", call, path, name);
    if (n > 0)
        real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    errno = e;
    return -1;
}

static void note_open(int fd, const char *path, int flags)
{
    unsigned char what = 0;
    if (fd < 0 || fd >= MAX_FD)
        return;
    if (strstr(path, STAGING))
        what = flags & O_DIRECTORY ? F_DIR : flags & (O_WRONLY | O_RDWR) ? F_FILE : 0;
    else if (flags & O_DIRECTORY)
        what = F_REPO_DIR;
    pthread_mutex_lock(&mu);
    fds[fd] = what;
    pthread_mutex_unlock(&mu);
}

static unsigned char fd_what(int fd)
{
    unsigned char w;
    if (fd < 0 || fd >= MAX_FD)
        return 0;
    pthread_mutex_lock(&mu);
    w = fds[fd];
    pthread_mutex_unlock(&mu);
    return w;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    int fd;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    fd = real_open(path, flags, mode);
    note_open(fd, path, flags);
    return fd;
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    int fd;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    fd = (real_open64 ? real_open64 : real_open)(path, flags, mode);
    note_open(fd, path, flags);
    return fd;
}

int close(int fd)
{
    if (fd >= 0 && fd < MAX_FD) {
        pthread_mutex_lock(&mu);
        fds[fd] = 0;
        pthread_mutex_unlock(&mu);
    }
    return real_close(fd);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    unsigned char w = fd_what(fd);
    int e;
    if (!(w & F_FILE) || !(e = fault("write")))
        return real_write(fd, buf, n);
    if (!(w & F_HALF) && n > 1) { /* half fits, then the disk is full */
        pthread_mutex_lock(&mu);
        fds[fd] |= F_HALF;
        pthread_mutex_unlock(&mu);
        return real_write(fd, buf, n / 2);
    }
    return told("write", "(a staged file)", e);
}

int fsync(int fd)
{
    unsigned char w = fd_what(fd);
    const char *key = w & F_FILE ? "fsync" : w & F_DIR ? "fsync-dir"
                      : w & F_REPO_DIR ? "fsync-repo" : NULL;
    int e;
    if (!key || (e = fault(key)) <= 1)
        return real_fsync(fd);
    return told(key, w & F_FILE ? "(a staged file)" : w & F_DIR ? "(a staged folder)"
                                                                : "(the repository)", e);
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned flags)
{
    if ((flags & (RENAME_EXCHANGE | RENAME_NOREPLACE)) && fault("no-rename-flags") == 1) {
        if ((flags & RENAME_EXCHANGE) && !exists(newpath)) {
            errno = ENOENT; /* the kernel's lookup, before the filesystem */
            return -1;
        }
        if ((flags & RENAME_NOREPLACE) && exists(newpath)) {
            errno = EEXIST;
            return -1;
        }
        return told(flags & RENAME_EXCHANGE ? "renameat2(RENAME_EXCHANGE)"
                                            : "renameat2(RENAME_NOREPLACE)",
                    newpath, EINVAL);
    }
    return real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

int rename(const char *oldpath, const char *newpath)
{
    size_t n = strlen(oldpath);
    int e;
    if (strstr(oldpath, STAGING) && !strstr(newpath, STAGING) &&
        !(n > 4 && strcmp(oldpath + n - 4, "~old") == 0) && (e = fault("rename-in")) > 1)
        return told("rename", newpath, e);
    return real_rename(oldpath, newpath);
}

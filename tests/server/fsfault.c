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
 *   hold-publish=G   the first upload to sync its staged folder (its last
 *                    step before the publish, outside upload.c's publish
 *                    lock) once the file G exists waits there until G is
 *                    removed, then goes on; it claims the hold by creating
 *                    "G.held", so later uploads pass (a test removes both
 *                    to hold another). Written to stderr as "fsfault:
 *                    hold-publish <G>: held", then "...: released".
 *
 * Each fault it makes is written to stderr as "fsfault: <call> <path>:
 * <errno name>", so a test can tell that the fault happened (and a shim
 * not loaded from a test that passes for nothing).
 *
 * It follows descriptors through open, open64, openat and openat64 (a
 * path relative to a staged folder is staged), and forgets them at close
 * and closedir (which closes its descriptor inside libc). opendir's own
 * descriptor is opened inside libc and not followed: upload.c syncs only
 * folders it opens with open(2).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STAGING "/.attnd-staging/"
#define MAX_FD 65536

/* what each descriptor opened in the staging area (or the repository's
 * folder) may be made to do. Atomics, not a lock: write and close run in
 * signal handlers too (attnd's crash report writes to stderr from one),
 * where a lock held by the interrupted thread would never be given back. */
enum { F_FILE = 1, F_DIR = 2, F_REPO_DIR = 4, F_HALF = 8 };
static _Atomic unsigned char fds[MAX_FD];

typedef int open_fn(const char *, int, ...);
typedef int openat_fn(int, const char *, int, ...);
typedef int close_fn(int);
typedef int closedir_fn(DIR *);
typedef ssize_t write_fn(int, const void *, size_t);
typedef int fsync_fn(int);
typedef int rename_fn(const char *, const char *);
typedef int renameat2_fn(int, const char *, int, const char *, unsigned);

/* next(slot, name): the definition of name after this library's (libc's),
 * looked up at its first call rather than in a constructor: the dynamic
 * loader runs the constructors of libraries loaded after this one (another
 * preloaded library, a dependency of attnd's) before this library's, and
 * a call of theirs would find a pointer not yet set (with a constructor
 * here, a library opening a file in its own constructor crashed attnd at
 * start). NULL when there is none. */
static void *next(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (!f) {
        f = dlsym(RTLD_NEXT, name); /* every thread finds the same one */
        atomic_store_explicit(slot, f, memory_order_release);
    }
    return f;
}
#define NEXT(type, name)                                                       \
    static type *real_##name(void)                                             \
    {                                                                          \
        static _Atomic(void *) slot;                                           \
        return (type *)next(&slot, #name);                                     \
    }
NEXT(open_fn, open)
NEXT(open_fn, open64)
NEXT(openat_fn, openat)
NEXT(openat_fn, openat64)
NEXT(close_fn, close)
NEXT(closedir_fn, closedir)
NEXT(write_fn, write)
NEXT(fsync_fn, fsync)
NEXT(rename_fn, rename)
NEXT(renameat2_fn, renameat2)

/* needs_mode: does an open with flags take a mode argument? O_TMPFILE
 * holds O_DIRECTORY, so "flags & O_TMPFILE" is true of every folder's
 * open, whose caller passed no mode (glibc's __OPEN_NEEDS_MODE). */
static int needs_mode(int flags)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

static const struct {
    const char *name;
    int e;
} errnos[] = {{"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT},
              {"EROFS", EROFS}, {"EINVAL", EINVAL}, {"EACCES", EACCES}};

/* read_ctl: the control file's text into buf (n bytes); 0 when there is
 * none or it is empty. */
static int read_ctl(char *buf, size_t n)
{
    const char *ctl = getenv("FSFAULT_CTL");
    ssize_t got;
    int fd;
    if (!ctl || (fd = real_open()(ctl, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    got = read(fd, buf, n - 1);
    real_close()(fd);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    return 1;
}

/* fault: the errno the control file gives key ("key=E"), 1 for a bare
 * word key, 0 when it says nothing of it. */
static int fault(const char *key)
{
    char buf[512], *p, *save;
    size_t kl = strlen(key);
    if (!read_ctl(buf, sizeof buf))
        return 0;
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

/* fault_path: the path the control file gives key ("key=PATH") in out (n
 * bytes); 0 when it gives none. */
static int fault_path(const char *key, char *out, size_t n)
{
    char buf[512], *p, *save;
    size_t kl = strlen(key);
    if (!read_ctl(buf, sizeof buf))
        return 0;
    for (p = strtok_r(buf, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save))
        if (strncmp(p, key, kl) == 0 && p[kl] == '=' && p[kl + 1])
            return snprintf(out, n, "%s", p + kl + 1) < (int)n;
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
        real_write()(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    errno = e;
    return -1;
}

/* note_open: what fd, just opened at path (relative to the folder at, or
 * to the working folder: AT_FDCWD) with flags, may be made to do. A file
 * or folder in the staging area: its path says so, or it is relative to a
 * staged folder; a folder elsewhere: the repository's (or another whose
 * fsync no upload checks). O_TMPFILE makes a file, though it holds
 * O_DIRECTORY. */
static void note_open(int fd, int at, const char *path, int flags)
{
    unsigned char what = 0, where;
    int dir = (flags & O_DIRECTORY) && (flags & O_TMPFILE) != O_TMPFILE;
    int file = !dir && (flags & (O_WRONLY | O_RDWR)) != 0;
    if (fd < 0 || fd >= MAX_FD)
        return;
    where = path[0] != '/' && at >= 0 && at < MAX_FD
                ? atomic_load_explicit(&fds[at], memory_order_relaxed)
                : 0;
    if (strstr(path, STAGING) || (where & F_DIR) ||
        ((where & F_REPO_DIR) && strncmp(path, STAGING + 1, sizeof STAGING - 2) == 0))
        what = dir ? F_DIR : file ? F_FILE : 0;
    else if (dir)
        what = F_REPO_DIR;
    atomic_store_explicit(&fds[fd], what, memory_order_relaxed);
}

static unsigned char fd_what(int fd)
{
    if (fd < 0 || fd >= MAX_FD)
        return 0;
    return atomic_load_explicit(&fds[fd], memory_order_relaxed);
}

static void forget(int fd)
{
    if (fd >= 0 && fd < MAX_FD)
        atomic_store_explicit(&fds[fd], 0, memory_order_relaxed);
}

/* MODE_ARG: the mode an open's caller passed, when flags say it passed
 * one (reading one that was not passed is undefined). */
#define MODE_ARG(flags, last, mode)                                            \
    do {                                                                       \
        if (needs_mode(flags)) {                                               \
            va_list ap;                                                        \
            va_start(ap, last);                                                \
            (mode) = (mode_t)va_arg(ap, int);                                  \
            va_end(ap);                                                        \
        }                                                                      \
    } while (0)

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    int fd;
    MODE_ARG(flags, flags, mode);
    fd = real_open()(path, flags, mode);
    note_open(fd, AT_FDCWD, path, flags);
    return fd;
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    open_fn *f = real_open64();
    int fd;
    MODE_ARG(flags, flags, mode);
    fd = (f ? f : real_open())(path, flags, mode);
    note_open(fd, AT_FDCWD, path, flags);
    return fd;
}

int openat(int at, const char *path, int flags, ...)
{
    mode_t mode = 0;
    int fd;
    MODE_ARG(flags, flags, mode);
    fd = real_openat()(at, path, flags, mode);
    note_open(fd, at, path, flags);
    return fd;
}

int openat64(int at, const char *path, int flags, ...)
{
    mode_t mode = 0;
    openat_fn *f = real_openat64();
    int fd;
    MODE_ARG(flags, flags, mode);
    fd = (f ? f : real_openat())(at, path, flags, mode);
    note_open(fd, at, path, flags);
    return fd;
}

int close(int fd)
{
    forget(fd);
    return real_close()(fd);
}

/* closedir closes its descriptor inside libc, past close above: without
 * this, the number of a folder model_opendir opened (rm_tree's, on a
 * staged folder) kept its mark for whatever took the number next. */
int closedir(DIR *d)
{
    forget(dirfd(d));
    return real_closedir()(d);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    unsigned char w = fd_what(fd);
    int e;
    if (!(w & F_FILE) || !(e = fault("write")))
        return real_write()(fd, buf, n);
    if (!(w & F_HALF) && n > 1) { /* half fits, then the disk is full */
        atomic_fetch_or_explicit(&fds[fd], (unsigned char)F_HALF,
                                 memory_order_relaxed);
        return real_write()(fd, buf, n / 2);
    }
    return told("write", "(a staged file)", e);
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* say: a line on stderr, as told's. */
static void say(const char *what, const char *path)
{
    char line[4300];
    int n = snprintf(line, sizeof line, "fsfault: hold-publish %s: %s\n", path, what);
    if (n > 0)
        real_write()(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* hold: hold-publish (above), at a staged folder's fsync. */
static void hold(void)
{
    char gate[4096], claim[4200];
    struct timespec ts = {0, 10 * 1000 * 1000};
    int fd;
    if (!fault_path("hold-publish", gate, sizeof gate) || !exists(gate))
        return;
    snprintf(claim, sizeof claim, "%s.held", gate);
    if ((fd = real_open()(claim, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        return; /* another upload holds it, or held it */
    real_close()(fd);
    say("held", gate);
    while (exists(gate))
        nanosleep(&ts, NULL);
    say("released", gate);
}

int fsync(int fd)
{
    unsigned char w = fd_what(fd);
    const char *key = w & F_FILE ? "fsync" : w & F_DIR ? "fsync-dir"
                      : w & F_REPO_DIR ? "fsync-repo" : NULL;
    int e;
    if (w & F_DIR)
        hold();
    if (!key || (e = fault(key)) <= 1)
        return real_fsync()(fd);
    return told(key, w & F_FILE ? "(a staged file)" : w & F_DIR ? "(a staged folder)"
                                                                : "(the repository)", e);
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
    if (!real_renameat2()) { /* a libc without it */
        errno = ENOSYS;
        return -1;
    }
    return real_renameat2()(olddirfd, oldpath, newdirfd, newpath, flags);
}

int rename(const char *oldpath, const char *newpath)
{
    size_t n = strlen(oldpath);
    int e;
    if (strstr(oldpath, STAGING) && !strstr(newpath, STAGING) &&
        !(n > 4 && strcmp(oldpath + n - 4, "~old") == 0) && (e = fault("rename-in")) > 1)
        return told("rename", newpath, e);
    return real_rename()(oldpath, newpath);
}

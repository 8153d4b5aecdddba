/*
 * test_model_repo.c - core/model_repo.c's names and folders (split from
 * test_model.c):
 *   - model_name_valid: the names a repository serves and those it refuses;
 *   - model_opendir: a folder's stream, close-on-exec, and under
 *     ThreadSanitizer a number libuv closed unseen, opened again by another
 *     thread.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/model.h"
#include "tests/check_main.h"

/* path: "<ATTN_TEST_DATA>/core/<a>/<b>" in one of a few rotating buffers. */
static const char *path(const char *a, const char *b)
{
    static char buf[4][1024];
    static int k;
    const char *r = getenv("ATTN_TEST_DATA");
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/core/%s%s%s", r ? r : "tests", a,
             b ? "/" : "", b ? b : "");
    return buf[k];
}

/* opener: waits for main's relaxed flag (no order ThreadSanitizer can see)
 * and opens the model corpus's folder, which takes the number main's
 * socket had. */
static int opener_go, opener_fd;
static void *opener(void *arg)
{
    while (!__atomic_load_n(&opener_go, __ATOMIC_RELAXED))
        sched_yield();
    DIR *d = model_opendir(arg);
    opener_fd = d ? dirfd(d) : -1;
    if (d)
        closedir(d);
    return NULL;
}

/* model_opendir: a folder's stream, close-on-exec; NULL with errno
 * otherwise. Under ThreadSanitizer: a socket libuv's way
 * (syscall(SYS_close), which it does not see) closed by one thread and a
 * folder another thread opens under its number are not one object to it
 * (with opendir(3) this test ends in "data race ... closedir"). */
START_TEST(test_opendir)
{
    DIR *d = model_opendir(path("model_corpus", NULL));
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(fcntl(dirfd(d), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    int seen = 0;
    for (struct dirent *de; (de = readdir(d));)
        seen += strcmp(de->d_name, "good") == 0;
    ck_assert_int_eq(seen, 1);
    closedir(d);
    errno = 0;
    ck_assert_ptr_null(model_opendir(path("model_corpus",
                                          "good/model.safetensors")));
    ck_assert_int_eq(errno, ENOTDIR);
    ck_assert_ptr_null(model_opendir(path("no_such_repo", NULL)));
    ck_assert_int_eq(errno, ENOENT);

    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path("model_corpus", NULL));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, opener, dir), 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct epoll_event ev = {.events = EPOLLIN};
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), 0);
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, s, &ev), 0);
    syscall(SYS_close, s);
    __atomic_store_n(&opener_go, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    close(ep);
    ck_assert_int_eq(opener_fd, s); /* the lowest free number: the socket's */
}
END_TEST

START_TEST(test_names)
{
    static const char *const good[] = {"demo", "a", "My-model_2.1", "x.y",
                                       "x."};
    static const char *const bad[] = {"", ".", "..", "a..b", "a/b", "../x",
                                      ".hidden", ".upload-x-1-0",
                                      "a b", "a\\b", "caf\xc3\xa9", "a\nb",
                                      NULL};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(model_name_valid(good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!model_name_valid(bad[i]), "%s", bad[i]);
    char longname[130];
    memset(longname, 'a', 129);
    longname[129] = 0;
    ck_assert(!model_name_valid(longname));
    longname[128] = 0;
    ck_assert(model_name_valid(longname));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_repo");
    TCase *tc = tcase_create("model_repo");
    tcase_add_test(tc, test_opendir);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

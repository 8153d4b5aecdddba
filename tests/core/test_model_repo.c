/*
 * test_model_repo.c - core/model_repo.c's names and folders (split from
 * test_model.c):
 *   - model_name_valid: the names a repository serves and those it refuses;
 *   - model_opendir: a folder's stream, close-on-exec, and under
 *     ThreadSanitizer a number libuv closed unseen, opened again by another
 *     thread;
 *   - a repository attnd may not read or search: named, with what to do,
 *     by a load, the listing and --check-models;
 *   - the listing of a large repository: every folder, sorted.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* as_user: this process loses, for good, what lets root read and search
 * any folder (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), as attnd run by
 * another user has neither. Check runs each test in a child of its own,
 * so only that test loses them; with CK_FORK=no it would be every test
 * after it: -1 then (and when they cannot be dropped), 0 otherwise. */
static int as_user(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];
    const char *fork = getenv("CK_FORK");
    unsigned drop = CAP_TO_MASK(CAP_DAC_OVERRIDE) |
                    CAP_TO_MASK(CAP_DAC_READ_SEARCH);
    if (geteuid() != 0)
        return 0;
    if ((fork && strcmp(fork, "no") == 0) || syscall(SYS_capget, &h, c) < 0)
        return -1;
    c[0].effective &= ~drop; /* both below 32: the first word */
    c[0].permitted &= ~drop;
    c[0].inheritable &= ~drop;
    return syscall(SYS_capset, &h, c) < 0 ? -1 : 0;
}

/* A repository attnd may not read (mode 0) or only read, not search (0600:
 * its names, but nothing in them): a load, the listing and --check-models
 * name the repository and what to do, not a model's folder ("<repo>/good:
 * cannot read") nor, for 0600, an empty repository (each folder, which
 * stat cannot reach, taken for a stray file). */
START_TEST(test_unreadable)
{
    static const mode_t modes[] = {0, 0600};
    char repo[256], sub[300], err[ATTN_ERRMAX], want[ATTN_ERRMAX];
    if (as_user() < 0)
        return; /* root's rights stay: nothing would be denied */
    tu_tmp(repo, sizeof repo, "attn_denied_repo_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(repo));
    snprintf(sub, sizeof sub, "%s/good", repo);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(want, sizeof want, "%s: cannot read the model repository: "
             "Permission denied; give attnd's user read and search (r-x) "
             "permission on it, or point --models elsewhere", repo);
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        model *m = NULL;
        char **names = NULL, *out = NULL;
        size_t len = 0;
        ck_assert_int_eq(chmod(repo, modes[i]), 0);
        ck_assert_int_eq(model_load_repo(&m, repo, "good", err), ATTN_EIO);
        ck_assert_ptr_null(m);
        ck_assert_str_eq(err, want);
        ck_assert_int_eq(model_repo_list(repo, &names, err), ATTN_EIO);
        ck_assert_ptr_null(names);
        ck_assert_str_eq(err, want);
        FILE *fp = open_memstream(&out, &len);
        ck_assert_int_eq(model_check_repo(repo, fp, NULL), ATTN_EIO);
        fclose(fp);
        ck_assert_ptr_nonnull(strstr(out, want));
        free(out);
    }
    ck_assert_int_eq(chmod(repo, 0700), 0);
    ck_assert_int_eq(rmdir(sub), 0);
    ck_assert_int_eq(rmdir(repo), 0);
}
END_TEST

/* A repository of more folders than any fixed table of ours held (4096
 * once: the index then answered 503): every folder is listed, in strcmp
 * order, and the stray file and the dot folder are not. */
START_TEST(test_many)
{
    enum { N = 5000 };
    char repo[256], sub[300];
    char err[ATTN_ERRMAX], **names = NULL;
    tu_tmp(repo, sizeof repo, "attn_many_repo_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(repo));
    for (int i = N - 1; i >= 0; i--) { /* made backwards: the sort shows */
        snprintf(sub, sizeof sub, "%s/m%05d", repo, i);
        ck_assert_int_eq(mkdir(sub, 0755), 0);
    }
    snprintf(sub, sizeof sub, "%s/.hidden", repo);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/README", repo);
    FILE *f = fopen(sub, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    int n = model_repo_list(repo, &names, err);
    ck_assert_msg(n == N, "%d folders listed: %s", n, n < 0 ? err : "");
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof want, "m%05d", i);
        ck_assert_str_eq(names[i], want);
    }
    model_repo_list_free(names, n);
    ck_assert_int_eq(unlink(sub), 0);
    snprintf(sub, sizeof sub, "%s/.hidden", repo);
    ck_assert_int_eq(rmdir(sub), 0);
    for (int i = 0; i < N; i++) {
        snprintf(sub, sizeof sub, "%s/m%05d", repo, i);
        ck_assert_int_eq(rmdir(sub), 0);
    }
    ck_assert_int_eq(rmdir(repo), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_repo");
    TCase *tc = tcase_create("model_repo");
    tcase_add_test(tc, test_opendir);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_unreadable);
    tcase_add_test(tc, test_many);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

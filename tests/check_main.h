/*
 * check_main.h - the one main every Check suite shares (header-only: each
 * tests/<layer>/test_*.c is its own binary).
 *
 *     static Suite *example_suite(void) { ...build and return it... }
 *     TU_MAIN(example_suite)
 */
#ifndef ATTN_CHECK_MAIN_H
#define ATTN_CHECK_MAIN_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* tu_tmp(buf, n, name): buf = "<the run's scratch folder>/name" (name may
 * end in XXXXXX for mkdtemp/mkstemp). Tests make their files and folders
 * there: tu_run removes the whole folder after the last test, from the
 * parent process, so a test that fails (its forked child exits at the
 * failed assertion, before its own cleanup or a checked teardown) leaves
 * nothing behind in /tmp. */
static inline char *tu_tmp(char *buf, size_t n, const char *name)
{
    const char *root = getenv("TMPDIR");
    snprintf(buf, n, "%s/%s", root && *root ? root : "/tmp", name);
    return buf;
}

/* tu_kv: key's value in kv, a NULL-terminated list of key, value pairs
 * (NULL: none), as a callback's ctx (maps_http's query-string lookup). */
static inline const char *tu_kv(void *ctx, const char *key)
{
    const char **kv = ctx;
    for (; kv[0]; kv += 2)
        if (strcmp(kv[0], key) == 0)
            return kv[1];
    return NULL;
}

static inline int tu_rm_entry(const char *p, const struct stat *st, int type,
                              struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return remove(p) < 0 ? -1 : 0;
}

/* tu_run: run every test of s (CK_NORMAL output, ending in Check's summary
 * line) with TMPDIR set to a scratch folder of its own (made under the
 * caller's TMPDIR or /tmp, removed with everything in it afterwards; see
 * tu_tmp), free the runner and s; EXIT_SUCCESS when none failed, else
 * EXIT_FAILURE (also when the scratch folder cannot be made or removed). */
static inline int tu_run(Suite *s)
{
    char root[4096];
    tu_tmp(root, sizeof root, "attnd-check-XXXXXX");
    if (!mkdtemp(root) || setenv("TMPDIR", root, 1) < 0) {
        perror(root);
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (nftw(root, tu_rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0) {
        perror(root);
        failed = 1;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* tu_timeout(tc, s): tc's cases may each take s seconds, or
 * CK_DEFAULT_TIMEOUT's when that is more (make check-unit sets it to
 * CK_TIMEOUT: 60, 300 on a sanitized build). tcase_set_timeout alone
 * overrides that variable: a case given 60 s for a plain run by hand
 * (Check's own default is 4 s) kept 60 under ThreadSanitizer, where
 * test_panels' batched case took 40 s on a loaded machine. */
static inline void tu_timeout(TCase *tc, double s)
{
    const char *e = getenv("CK_DEFAULT_TIMEOUT");
    double d = e ? strtod(e, NULL) : 0;
    tcase_set_timeout(tc, d > s ? d : s);
}

/* TU_MAIN(fn): main() running the suite fn() builds. */
#define TU_MAIN(suite_fn)                                                      \
    int main(void)                                                             \
    {                                                                          \
        return tu_run(suite_fn());                                             \
    }

#endif

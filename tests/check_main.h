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
#include <stdlib.h>

/* tu_run: run every test of s (CK_NORMAL output, ending in Check's summary
 * line), free the runner and s; EXIT_SUCCESS when none failed, else
 * EXIT_FAILURE. */
static inline int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* TU_MAIN(fn): main() running the suite fn() builds. */
#define TU_MAIN(suite_fn)                                                      \
    int main(void)                                                             \
    {                                                                          \
        return tu_run(suite_fn());                                             \
    }

#endif

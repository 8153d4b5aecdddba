/* test_err.c - core/err.c: every code has its own text; unknown codes too. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"

START_TEST(distinct_texts)
{
    static const int codes[] = {ATTN_OK,        ATTN_EINVAL,  ATTN_ENOMEM,
                                ATTN_EOVERFLOW, ATTN_EFORMAT, ATTN_EIO,
                                ATTN_ENOTFOUND};
    for (size_t i = 0; i < 7; i++) {
        const char *a = attn_strerror(codes[i]);
        ck_assert(a && *a);
        ck_assert_str_ne(a, "unknown error");
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(a, attn_strerror(codes[j]));
    }
    ck_assert_str_eq(attn_strerror(-999), "unknown error");
    ck_assert_str_eq(attn_strerror(ATTN_EINVAL), "invalid argument");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, distinct_texts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

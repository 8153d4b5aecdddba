/* test_err.c - core/err.c: every code has its own text; unknown codes too. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "tests/check_main.h"

START_TEST(distinct_texts)
{
    static const int codes[] = {ATTN_OK,        ATTN_EINVAL,  ATTN_ENOMEM,
                                ATTN_EOVERFLOW, ATTN_EFORMAT, ATTN_EIO,
                                ATTN_ENOTFOUND, ATTN_ERANGE,  ATTN_EFULL,
                                ATTN_ECHANGED};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
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

static Suite *err_suite(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, distinct_texts);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(err_suite)

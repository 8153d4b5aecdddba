/* test_guard.c - memory-budget's arithmetic (server/guard.c: srv_mem_take,
 * srv_mem_hold, srv_mem_give) at its edges: a reservation that fills the
 * budget exactly fits, one byte more does not; what an answer holds past
 * the budget refuses every reservation until given back; 0 is no budget. */
#include <check.h>
#include <stdint.h>

#include "server/srv.h"
#include "tests/check_main.h"

START_TEST(exactly_the_budget_fits)
{
    static srv s;
    s.cfg.memory_budget = 1000;
    ck_assert_int_eq(srv_mem_take(&s, 1001), -1);
    ck_assert_uint_eq(s.mem_used, 0);
    ck_assert_int_eq(srv_mem_take(&s, 1000), 0);
    ck_assert_int_eq(srv_mem_take(&s, 1), -1);
    ck_assert_int_eq(srv_mem_take(&s, 0), -1); /* full: nothing more */
    srv_mem_give(&s, 400);
    ck_assert_int_eq(srv_mem_take(&s, 401), -1);
    ck_assert_int_eq(srv_mem_take(&s, 400), 0);
    ck_assert_uint_eq(s.mem_used, 1000);
    srv_mem_give(&s, 2000); /* more than counted: 0, not a wrap */
    ck_assert_uint_eq(s.mem_used, 0);
}
END_TEST

START_TEST(held_past_the_budget_refuses_until_given_back)
{
    static srv s;
    s.cfg.memory_budget = 1000;
    ck_assert_int_eq(srv_mem_take(&s, 600), 0);
    srv_mem_hold(&s, 700); /* an answer already made */
    ck_assert_uint_eq(s.mem_used, 1300);
    ck_assert_int_eq(srv_mem_take(&s, 1), -1);
    ck_assert_int_eq(srv_mem_take(&s, SIZE_MAX), -1); /* no wrap either */
    srv_mem_give(&s, 700);
    ck_assert_int_eq(srv_mem_take(&s, 400), 0);
    ck_assert_uint_eq(s.mem_used, 1000);
}
END_TEST

START_TEST(no_budget_takes_anything)
{
    static srv s;
    s.cfg.memory_budget = 0;
    ck_assert_int_eq(srv_mem_take(&s, SIZE_MAX / 2), 0);
    ck_assert_int_eq(srv_mem_take(&s, 1), 0);
}
END_TEST

static Suite *guard_suite(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("memory-budget");
    tcase_add_test(tc, exactly_the_budget_fits);
    tcase_add_test(tc, held_past_the_budget_refuses_until_given_back);
    tcase_add_test(tc, no_budget_takes_anything);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(guard_suite)

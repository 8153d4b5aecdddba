/*
 * test_memory.c - memtrim.c's trim and memfit.c's load check against K/V
 * pools of the test's making, where memtrim.test.mjs and memfit.test.mjs
 * can reach the states below only by racing attnd's own timing:
 *
 *   - a burst of K/V pages taken and freed wholly between two of the
 *     trim's 1 s ticks (memtrim.test's burst falls there only when the
 *     client is quick enough): here the pages are taken and freed by the
 *     test while the loop, and so the trim's timer, is not running;
 *   - a replaced instance still held (by a running step, in attnd) whose
 *     pool keeps pages of an ended sequence for reuse (memfit.test's
 *     reload test gets a held instance only when its step outlasts the
 *     load, and the kept pages would have to outlive memtrim's shed):
 *     here the instance is put on its entry's retired list by hand.
 *
 * What memtrim.c and memfit.c call outside themselves and the pools: the
 * clock (srv_now_ns, trim_work's timing) and srv_log (the last line kept)
 * are stood in for here, before libattnd.a, so log.o and sched.o are not
 * pulled in. Sizes: pages of 64 tokens of 512 bytes (one kv head of 64,
 * v 64, FP32): 32 KiB, as models/demo's. Expected numbers are worked out
 * in the comments, never taken from the code under test.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/kv.h"
#include "server/srv.h"
#include "tests/check_main.h"

#define PAGE 32768u
#define MiB (1024u * 1024u)

static char g_log[2048]; /* the last srv_log line */

uint64_t srv_now_ns(void)
{
    return 0; /* trim_work's time: not checked here */
}

void srv_log(srv *s, const char *level, const char *fmt, ...)
{
    va_list ap;
    (void)s, (void)level;
    va_start(ap, fmt);
    vsnprintf(g_log, sizeof g_log, fmt, ap);
    va_end(ap);
}

static const attn_config g_cfg = {.d_model = 64, .d_model_ctx = 64,
                                  .n_heads = 1, .n_kv_heads = 1,
                                  .head_dim = 64, .v_head_dim = 64};

static attn_kv_pool *pool(size_t max_bytes)
{
    attn_kv_pool *p;
    char err[ATTN_ERRMAX];
    ck_assert_int_eq(attn_kv_pool_create(&p, &g_cfg, ATTN_KV_F32, 64, max_bytes,
                                         err), 0);
    ck_assert_uint_eq(attn_kv_page_bytes(p), PAGE);
    return p;
}

/* ticks: runs s's loop until n more of the trim's ticks have run. */
static void ticks(srv *s, int n)
{
    uint64_t to = s->trim_checks + (uint64_t)n;
    while (s->trim_checks < to)
        uv_run(s->loop, UV_RUN_ONCE);
}

/* 720 pages (22.5 MiB) taken and freed between two ticks: the pool keeps
 * 256 for reuse (8 MiB, still malloc's), 464 (14.5 MiB, past the trim's
 * least of 8 MiB) go back to malloc. The tick after the burst sees the
 * pool's peak since the tick before (720 pages) and held 256: 464 pages to
 * give, all of them fallen since that tick, so it waits a tick (the burst
 * may not be over); the next one sees no new fall and queues the trim,
 * with the 256 kept pages still kept (the shed, 5 ticks in, not yet run).
 * Were the pools read only as they are at the ticks (256 pages at both),
 * nothing would fall between them: no trim until the shed. */
START_TEST(trim_sees_a_burst_between_two_ticks)
{
    srv s;
    uv_loop_t loop;
    srv_inst in;
    srv_entry e;
    attn_kv kv;
    char err[ATTN_ERRMAX];
    memset(&s, 0, sizeof s);
    memset(&in, 0, sizeof in);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    s.loop = &loop;
    in.kv_pool = pool(1024 * PAGE);
    in.refs = 1;
    snprintf(e.name, sizeof e.name, "demo");
    e.inst = &in;
    e.s = &s;
    s.models = &e;
    srv_memtrim_start(&s);
    uv_ref((uv_handle_t *)&s.trim_timer); /* attnd's is unref'd: run it */
    ticks(&s, 1);
    ck_assert_uint_eq(s.trims, 0);

    attn_kv_init(&kv, in.kv_pool); /* the loop not running: no tick */
    ck_assert_int_eq(attn_kv_reserve(&kv, 720 * 64, err), 0);
    attn_kv_free(&kv);
    ck_assert_uint_eq(attn_kv_pool_used(in.kv_pool), 0);
    ck_assert_uint_eq(attn_kv_pool_kept(in.kv_pool), 256 * PAGE);

    ticks(&s, 1);
    ck_assert_msg(!s.trimming && s.trims == 0,
                  "a trim at the tick right after the burst");
    ticks(&s, 1);
    ck_assert_msg(s.trimming || s.trims == 1,
                  "no trim queued at the second tick after a burst between "
                  "two ticks (the pool's peak between them not seen)");
    while (s.trims < 1)
        uv_run(&loop, UV_RUN_ONCE);
    ck_assert_uint_eq(s.trims, 1);
    ck_assert_int_eq(s.trimming, 0);
    ck_assert_uint_eq(attn_kv_pool_kept(in.kv_pool), 256 * PAGE);

    srv_memtrim_stop(&s);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    attn_kv_pool_destroy(in.kv_pool);
}
END_TEST

/* A reload left the old instance on the entry's retired list, held by a
 * sequence (its running step, in attnd) with 64 pages (2 MiB), its pool
 * also keeping 256 pages (8 MiB) of a sequence that ended: both stay
 * resident until the instance goes. The bounds: --memory-budget 32 MiB +
 * --maps-bytes 16 MiB + --kv-bytes 64 MiB x 1 (the new instance's pool) +
 * 0 MiB of weights (no model: the instances are pools only) + 128 MiB of
 * room (--threads 1) = 240 MiB; with the old instance's 10 MiB, 250 MiB,
 * past the limit of 246 MiB (its 2 MiB in use alone, 242 MiB, are not). */
START_TEST(load_counts_replaced_instances_kept_pages)
{
    srv s;
    srv_inst cur, old;
    srv_entry e;
    attn_kv seq, ended;
    char err[ATTN_ERRMAX];
    memset(&s, 0, sizeof s);
    memset(&cur, 0, sizeof cur);
    memset(&old, 0, sizeof old);
    memset(&e, 0, sizeof e);
    g_log[0] = 0;
    s.cfg.memory_budget = 32 * (size_t)MiB;
    s.cfg.maps_bytes = 16 * (size_t)MiB;
    s.cfg.kv_bytes = 64 * (size_t)MiB;
    s.threads = 1;
    s.mem_limit = 246 * (long long)MiB;
    snprintf(s.mem_limit_file, sizeof s.mem_limit_file, "memory.max");
    snprintf(e.name, sizeof e.name, "demo");
    e.s = &s;
    cur.kv_pool = pool(s.cfg.kv_bytes);
    cur.refs = 1;
    old.kv_pool = pool(s.cfg.kv_bytes);
    old.refs = 1;
    old.retired_of = &e;
    e.inst = &cur;
    e.retired = &old;
    s.models = &e;
    attn_kv_init(&seq, old.kv_pool);
    ck_assert_int_eq(attn_kv_reserve(&seq, 64 * 64, err), 0);
    attn_kv_init(&ended, old.kv_pool);
    ck_assert_int_eq(attn_kv_reserve(&ended, 256 * 64, err), 0);
    attn_kv_free(&ended); /* its 256 pages kept for reuse */
    ck_assert_uint_eq(attn_kv_pool_used(old.kv_pool), 64 * PAGE);
    ck_assert_uint_eq(attn_kv_pool_kept(old.kv_pool), 256 * PAGE);

    srv_memfit_loaded(&s, &e);
    ck_assert_msg(strstr(g_log, "+ 10.0 MiB held by 1 replaced instance until "
                         "their jobs and sequences end") &&
                  strstr(g_log, "= 250 MiB, past the memory limit of 246 MiB"),
                  "no warning, or not for 64 + 256 pages held: '%s'", g_log);

    attn_kv_free(&seq);
    attn_kv_pool_destroy(old.kv_pool);
    attn_kv_pool_destroy(cur.kv_pool);
}
END_TEST

static Suite *memory_suite(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tu_timeout(tc, 30); /* the trim's ticks are 1 s of real time */
    tcase_add_test(tc, trim_sees_a_burst_between_two_ticks);
    tcase_add_test(tc, load_counts_replaced_instances_kept_pages);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(memory_suite)

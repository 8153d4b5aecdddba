/*
 * test_model_nomem.c - model_load when memory runs out: whichever
 * allocation of a load fails, the load reports ATTN_ENOMEM with a message
 * of its own (the daemon sends it to the client: a message left unwritten
 * went out as the bytes of an old stack), and holds nothing after.
 *
 * tests/fail_alloc.h fails the k-th allocation and counts the blocks held
 * (for jansson's calls and libc's fopen too). Every k of a load of
 * each fixture model is tried, from its folder and from memory (as an
 * upload's). The sanitizer builds replace malloc
 * themselves: there the test only loads each model.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/json_mem.h"
#include "core/model.h"
#include "tests/check_main.h"
#include "tests/fail_alloc.h"

static const char *const fixtures[] = {"mha", "canonical", "gqa_rope", "cross",
                                       "f16", "bf16", "qproj", "mha_nested"};

/* one fixture, from its folder (model_load) or from memory (model_load_mem,
 * as a load request's upload) */
typedef struct {
    char dir[1024];
    char *config, *st;
    size_t config_len, st_len;
} fixture;

static int from_dir(model **m, const fixture *fx, char *err)
{
    return model_load(m, fx->dir, err);
}

static int from_mem(model **m, const fixture *fx, char *err)
{
    return model_load_mem(m, "upload", fx->config, fx->config_len, fx->st, fx->st_len, err);
}

static char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "%s", path);
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    rewind(fp);
    char *b = malloc(*len + 1);
    ck_assert(b && fread(b, 1, *len, fp) == *len);
    fclose(fp);
    return b;
}

/* every_allocation: load fx failing each of its allocations in turn */
static void every_allocation(const char *what, const fixture *fx,
                             int (*load)(model **, const fixture *, char *))
{
    char err[ATTN_ERRMAX];
    model *m = NULL;
    long n, k, failed = 0;
    fail_at = -1; /* count, fail none */
    calls = 0;
    ck_assert_msg(load(&m, fx, err) == 0, "%s: %s", what, err);
    n = calls;
    fail_at = 0;
    model_destroy(m);
    ck_assert(!FAILING || n > 5);
    for (k = 1; FAILING && k <= n; k++) {
        long before = held;
        int rc;
        memset(err, 0x7f, sizeof err); /* what a stack may hold */
        err[sizeof err - 1] = 0;
        m = NULL;
        fail_at = k;
        calls = 0;
        rc = load(&m, fx, err);
        fail_at = 0;
        if (rc == 0) { /* an allocation it can do without */
            ck_assert(m != NULL);
            model_destroy(m);
        } else {
            failed++;
            ck_assert_msg(rc == ATTN_ENOMEM, "%s, allocation %ld of %ld failing: %d %s",
                          what, k, n, rc, err);
            ck_assert_msg(m == NULL, "%s, allocation %ld: a model and an error", what, k);
            ck_assert_msg((unsigned char)err[0] != 0x7f && strlen(err) < sizeof err - 1 &&
                              strstr(err, "memory"),
                          "%s, allocation %ld of %ld failing: no message of its own: '%.40s'",
                          what, k, n, err);
        }
        ck_assert_msg(held == before, "%s, allocation %ld failing: %ld blocks left held",
                      what, k, held - before);
    }
    ck_assert(!FAILING || failed > n / 2);
}

START_TEST(load_fails_cleanly_at_every_allocation)
{
    const char *root = getenv("ATTN_TEST_DATA") ? getenv("ATTN_TEST_DATA") : "tests";
    char what[1100];
    attn_json_init(); /* as attnd: jansson through core/json_mem.c */
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        fixture fx;
        snprintf(fx.dir, sizeof fx.dir, "%s/core/model_fixtures/%s", root, fixtures[f]);
        fx.config = slurp(fx.dir, "config.json", &fx.config_len);
        fx.st = slurp(fx.dir, "model.safetensors", &fx.st_len);
        every_allocation(fx.dir, &fx, from_dir);
        snprintf(what, sizeof what, "%s from memory", fx.dir);
        every_allocation(what, &fx, from_mem);
        free(fx.config);
        free(fx.st);
    }
}
END_TEST

static Suite *model_nomem_suite(void)
{
    Suite *s = suite_create("model_nomem");
    TCase *tc = tcase_create("model_nomem");
    tu_timeout(tc, 60);
    tcase_add_test(tc, load_fails_cleanly_at_every_allocation);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(model_nomem_suite)

/* test_config.c - the settings table: defaults, env, flags, bounds,
 * actions and --help (server/config.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "tests/check_main.h"

static int load(srv_config *c, srv_action *act, const char **arg, char *err,
                int argc, char **argv)
{
    return srv_config_load(c, argc, argv, act, arg, err);
}

START_TEST(defaults)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX], *argv[] = {"attnd", NULL};
    unsetenv("ATTND_PORT");
    unsetenv("ATTND_HOST");
    ck_assert_int_eq(load(&c, &act, &arg, err, 1, argv), 0);
    ck_assert_int_eq(act, SRV_RUN);
    ck_assert_str_eq(c.host, "127.0.0.1");
    ck_assert_int_eq(c.port, 8080);
    ck_assert_str_eq(c.models, "models");
    ck_assert_int_eq(c.max_body, 64LL << 20);
    ck_assert_int_eq(c.deadline_ms, 30000);
    ck_assert_str_eq(c.log_format, "text");
    ck_assert_str_eq(c.api_key, "");
    ck_assert_int_eq(c.kv_bytes, 4096LL << 20);
    ck_assert_str_eq(c.kv_dtype, "f32");
    ck_assert_int_eq(c.max_sequences, 1024);
    ck_assert_int_eq(c.sequence_idle_ms, 60000);
    srv_config_free(&c);
    ck_assert_ptr_null(c.host);
}
END_TEST

START_TEST(env_then_flags)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX];
    char *argv[] = {"attnd", "--port", "9001", "--models=/m", NULL};
    setenv("ATTND_PORT", "7000", 1);
    setenv("ATTND_HOST", "0.0.0.0", 1);
    setenv("ATTND_MAX_BATCH", "3", 1);
    ck_assert_int_eq(load(&c, &act, &arg, err, 4, argv), 0);
    ck_assert_int_eq(c.port, 9001); /* the flag wins */
    ck_assert_str_eq(c.host, "0.0.0.0");
    ck_assert_int_eq(c.max_batch, 3);
    ck_assert_str_eq(c.models, "/m");
    srv_config_free(&c);
    /* a variable under a flag is not read: a Service link's value, which
     * no setting takes, does not stop the start */
    setenv("ATTND_PORT", "tcp://10.96.0.1:80", 1);
    ck_assert_int_eq(load(&c, &act, &arg, err, 4, argv), 0);
    ck_assert_int_eq(c.port, 9001);
    srv_config_free(&c);
    unsetenv("ATTND_PORT");
    unsetenv("ATTND_HOST");
    unsetenv("ATTND_MAX_BATCH");
}
END_TEST

START_TEST(errors_name_the_setting)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX];
    char *a1[] = {"attnd", "--max-batch", "0", NULL};
    char *a2[] = {"attnd", "--deadline-ms", "12x", NULL};
    char *a3[] = {"attnd", "--bogus", "1", NULL};
    char *a4[] = {"attnd", "stray", NULL};
    char *a5[] = {"attnd", "--log-format", "yaml", NULL};
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a1), -1);
    ck_assert_str_eq(err, "--max-batch: 0 is outside [1, 4096]");
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a2), -1);
    ck_assert_str_eq(err, "--deadline-ms: '12x' is not an integer");
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a3), -1);
    ck_assert_str_eq(err, "--bogus: unknown flag (try --help)");
    ck_assert_int_eq(load(&c, &act, &arg, err, 2, a4), -1);
    ck_assert_ptr_nonnull(strstr(err, "stray"));
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a5), -1);
    ck_assert_ptr_nonnull(strstr(err, "--log-format"));
    setenv("ATTND_QUEUE_SIZE", "-5", 1);
    {
        char *a6[] = {"attnd", NULL};
        ck_assert_int_eq(load(&c, &act, &arg, err, 1, a6), -1);
        ck_assert_str_eq(err, "ATTND_QUEUE_SIZE: -5 is outside [1, 1000000]");
    }
    unsetenv("ATTND_QUEUE_SIZE");
    {
        char *a7[] = {"attnd", "--kv-dtype", "fp8", NULL};
        char *a8[] = {"attnd", "--kv-dtype=bf16", NULL};
        ck_assert_int_eq(load(&c, &act, &arg, err, 3, a7), -1);
        ck_assert_str_eq(err, "--kv-dtype: K/V dtype 'fp8' is not f32, f16 or bf16");
        ck_assert_int_eq(load(&c, &act, &arg, err, 2, a8), 0);
        ck_assert_str_eq(c.kv_dtype, "bf16");
        srv_config_free(&c);
    }
}
END_TEST

/* one port for both doors: without --reuse-port the gRPC bind failed
 * saying another server held it and advising --reuse-port 1; with it,
 * the kernel split one port's connections between the REST and the gRPC
 * listener (most REST requests then failed) */
START_TEST(doors_need_their_own_ports)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX];
    char *a1[] = {"attnd", "--port", "9000", "--grpc-port", "9000",
                  "--reuse-port", "1", NULL};
    char *a2[] = {"attnd", "--port", "8001", NULL}; /* gRPC's default */
    char *a3[] = {"attnd", "--port", "0", "--grpc-port", "0", NULL};
    char *a4[] = {"attnd", "--port", "0", "--grpc-port", "-1", NULL};
    ck_assert_int_eq(load(&c, &act, &arg, err, 7, a1), -1);
    ck_assert_str_eq(err, "--port 9000, --grpc-port 9000: the REST and gRPC "
                          "doors need a port each (--grpc-port 0: no gRPC)");
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a2), -1);
    ck_assert_ptr_nonnull(strstr(err, "--grpc-port 8001: the REST and gRPC"));
    ck_assert_int_eq(load(&c, &act, &arg, err, 5, a3), 0); /* free; off */
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 5, a4), 0); /* two free */
    srv_config_free(&c);
}
END_TEST

/* A budget that cannot hold the largest body with what it reserves
 * beside it (REST: max-body + 1) left that body 503 "retry shortly" for
 * good: it is refused at start, saying what to set. */
START_TEST(budget_holds_the_largest_body)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX];
    char *a1[] = {"attnd", "--memory-budget", "2000000", "--max-body",
                  "2000000", "--max-json-body", "1000000", "--request-memory",
                  "1000000", NULL};
    char *a2[] = {"attnd", "--memory-budget", "2131072", "--max-body",
                  "2000000", "--max-json-body", "1000000", "--request-memory",
                  "1000000", NULL};
    char *a3[] = {"attnd", "--memory-budget", "2000000", "--max-body",
                  "1000000", "--max-json-body", "1997000", "--request-memory",
                  "1000000", NULL};
    char *a4[] = {"attnd", "--memory-budget", "3000000", "--max-body",
                  "1000000", "--max-json-body", "1000000", "--request-memory",
                  "3000001", NULL};
    char *a5[] = {"attnd", "--memory-budget", "0", "--max-body", "2000000",
                  NULL};
    /* a request of request-memory is held beside its connection's state
     * (REST 36 KiB, gRPC ~87 KiB): a budget of request-memory exactly
     * started, and answered such a request 503 for good */
    char *a6[] = {"attnd", "--memory-budget", "3000000", "--request-memory",
                  "3000000", "--max-body", "1000000", "--max-json-body",
                  "1000000", NULL};
    char *a7[] = {"attnd", "--memory-budget", "3131071", "--request-memory",
                  "3000000", "--max-body", "1000000", "--max-json-body",
                  "1000000", NULL};
    char *a8[] = {"attnd", "--memory-budget", "3131072", "--request-memory",
                  "3000000", "--max-body", "1000000", "--max-json-body",
                  "1000000", NULL};
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a1), -1);
    ck_assert_str_eq(err, "--memory-budget 2000000: below --max-body 2000000 "
                          "plus the 131072 bytes a body reserves beside its own: "
                          "a body that large could never be served; set "
                          "--memory-budget to at least 2131072 (or 0: no budget)");
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a2), 0);
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a3), -1);
    ck_assert_ptr_nonnull(strstr(err, "below --max-json-body 1997000 plus"));
    ck_assert_ptr_nonnull(strstr(err, "at least 2128072"));
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a4), -1);
    ck_assert_ptr_nonnull(strstr(err, "below --request-memory 3000001"));
    ck_assert_ptr_nonnull(strstr(err, "at least 3131073"));
    ck_assert_int_eq(load(&c, &act, &arg, err, 5, a5), 0); /* no budget */
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a6), -1);
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a7), -1);
    ck_assert_str_eq(err, "--memory-budget 3131071: below --request-memory "
                          "3000000 plus the 131072 bytes a request holds "
                          "beside it (its connection's state, and a gRPC "
                          "call's): a request that large could never be "
                          "served; set --memory-budget to at least 3131072 "
                          "(or 0: no budget)");
    ck_assert_int_eq(load(&c, &act, &arg, err, 9, a8), 0);
    srv_config_free(&c);
}
END_TEST

/* The API key as a secret's file leaves it (a Kubernetes secret made from
 * a file keeps its newline): the white space after it is dropped, from the
 * variable and the flag; one of only white space, which would turn the
 * key off, or with a control character inside is refused naming where it
 * came from. */
START_TEST(api_key_trimmed)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX], *argv[] = {"attnd", NULL, NULL};
    setenv("ATTND_API_KEY", "s3cret\n", 1);
    ck_assert_int_eq(load(&c, &act, &arg, err, 1, argv), 0);
    ck_assert_str_eq(c.api_key, "s3cret");
    srv_config_free(&c);
    unsetenv("ATTND_API_KEY");
    argv[1] = "--api-key=k \t\r\n";
    ck_assert_int_eq(load(&c, &act, &arg, err, 2, argv), 0);
    ck_assert_str_eq(c.api_key, "k");
    srv_config_free(&c);
    setenv("ATTND_API_KEY", "\n", 1);
    ck_assert_int_lt(load(&c, &act, &arg, err, 1, argv), 0);
    ck_assert_str_eq(err, "ATTND_API_KEY: only white space; set a key or "
                          "leave it empty (no key)");
    setenv("ATTND_API_KEY", "", 1); /* empty: no key, as before */
    ck_assert_int_eq(load(&c, &act, &arg, err, 1, argv), 0);
    ck_assert_str_eq(c.api_key, "");
    srv_config_free(&c);
    unsetenv("ATTND_API_KEY");
    argv[1] = "--api-key=a\nb";
    ck_assert_int_lt(load(&c, &act, &arg, err, 2, argv), 0);
    ck_assert_str_eq(err, "--api-key: a control character at byte 1, which "
                          "no Authorization header can carry");
}
END_TEST

START_TEST(actions)
{
    srv_config c;
    srv_action act;
    const char *arg;
    char err[SRV_ERRMAX];
    char *a1[] = {"attnd", "--check-models", "dir", NULL};
    char *a2[] = {"attnd", "--health-check=http://127.0.0.1:1/", NULL};
    char *a3[] = {"attnd", "--version", NULL};
    char *a4[] = {"attnd", "--port", "1", "--help", NULL};
    ck_assert_int_eq(load(&c, &act, &arg, err, 3, a1), 0);
    ck_assert_int_eq(act, SRV_CHECK_MODELS);
    ck_assert_str_eq(arg, "dir");
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 2, a2), 0);
    ck_assert_int_eq(act, SRV_HEALTH_CHECK);
    ck_assert_str_eq(arg, "http://127.0.0.1:1/");
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 2, a3), 0);
    ck_assert_int_eq(act, SRV_VERSION);
    srv_config_free(&c);
    ck_assert_int_eq(load(&c, &act, &arg, err, 4, a4), 0);
    ck_assert_int_eq(act, SRV_HELP);
    srv_config_free(&c);
}
END_TEST

START_TEST(help_has_every_row)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    srv_config_help(f, "attnd");
    fclose(f);
#define HAS(fl, n, t, d, lo, hi, h)                                           \
    ck_assert_msg(strstr(buf, "--" n " ") != NULL, "--help lacks --%s", n);
    SRV_SETTINGS(HAS)
#undef HAS
    ck_assert_ptr_nonnull(strstr(buf, "ATTND_BATCH_DELAY_US"));
    free(buf);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, env_then_flags);
    tcase_add_test(tc, errors_name_the_setting);
    tcase_add_test(tc, doors_need_their_own_ports);
    tcase_add_test(tc, budget_holds_the_largest_body);
    tcase_add_test(tc, api_key_trimmed);
    tcase_add_test(tc, actions);
    tcase_add_test(tc, help_has_every_row);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(config_suite)

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

static int argc_of(char **argv)
{
    int n = 0;
    while (argv[n])
        n++;
    return n;
}

/* A command line and what loading it gives: load's result, and what err
 * says: the whole of it (is) or parts of it (has); NULL: not looked at. */
typedef struct {
    char **argv; /* NULL-ended */
    int rc;
    const char *is;
    const char *has[2];
} load_case;

/* check_loads: each case loaded and checked (a load that starts is freed),
 * a failure naming the case by its place and first argument. */
static void check_loads(const load_case *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        srv_config c;
        srv_action act;
        const char *arg;
        char err[SRV_ERRMAX] = "";
        int rc = load(&c, &act, &arg, err, argc_of(k[i].argv), k[i].argv);
        ck_assert_msg(rc == k[i].rc,
                      "case %zu (%s): load gave %d, want %d (%s)", i,
                      k[i].argv[1], rc, k[i].rc, err);
        if (rc == 0)
            srv_config_free(&c);
        if (k[i].is)
            ck_assert_str_eq(err, k[i].is);
        for (size_t j = 0; j < 2; j++)
            ck_assert_msg(!k[i].has[j] || strstr(err, k[i].has[j]),
                          "case %zu (%s): '%s' lacks '%s'", i, k[i].argv[1],
                          err, k[i].has[j]);
    }
}

#define N_CASES(k) (sizeof k / sizeof k[0])

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
    const load_case k[] = {
        {(char *[]){"attnd", "--max-batch", "0", NULL}, -1,
         "--max-batch: 0 is outside [1, 4096]", {NULL}},
        {(char *[]){"attnd", "--deadline-ms", "12x", NULL}, -1,
         "--deadline-ms: '12x' is not an integer", {NULL}},
        {(char *[]){"attnd", "--bogus", "1", NULL}, -1,
         "--bogus: unknown flag (try --help)", {NULL}},
        {(char *[]){"attnd", "stray", NULL}, -1, NULL, {"stray"}},
        {(char *[]){"attnd", "--log-format", "yaml", NULL}, -1, NULL,
         {"--log-format"}},
    };
    check_loads(k, N_CASES(k));
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
    const load_case k[] = {
        {(char *[]){"attnd", "--port", "9000", "--grpc-port", "9000",
                    "--reuse-port", "1", NULL}, -1,
         "--port 9000, --grpc-port 9000: the REST and gRPC "
         "doors need a port each (--grpc-port 0: no gRPC)", {NULL}},
        /* gRPC's default */
        {(char *[]){"attnd", "--port", "8001", NULL}, -1, NULL,
         {"--grpc-port 8001: the REST and gRPC"}},
        /* free; off */
        {(char *[]){"attnd", "--port", "0", "--grpc-port", "0", NULL}, 0, NULL,
         {NULL}},
        /* two free */
        {(char *[]){"attnd", "--port", "0", "--grpc-port", "-1", NULL}, 0, NULL,
         {NULL}},
    };
    check_loads(k, N_CASES(k));
}
END_TEST

/* BUDGET(budget, max-body, max-json-body, request-memory): the command
 * line that sets the four */
#define BUDGET(b, body, json, req)                                        \
    ((char *[]){"attnd", "--memory-budget", b, "--max-body", body,        \
                "--max-json-body", json, "--request-memory", req, NULL})

/* A budget that cannot hold the largest body with what it reserves
 * beside it (REST: max-body + 1) left that body 503 "retry shortly" for
 * good: it is refused at start, saying what to set. */
START_TEST(budget_holds_the_largest_body)
{
    const load_case k[] = {
        {BUDGET("2000000", "2000000", "1000000", "1000000"), -1,
         "--memory-budget 2000000: below --max-body 2000000 "
         "plus the 131072 bytes a body reserves beside its own: "
         "a body that large could never be served; set "
         "--memory-budget to at least 2131072 (or 0: no budget)", {NULL}},
        {BUDGET("2131072", "2000000", "1000000", "1000000"), 0, NULL, {NULL}},
        {BUDGET("2000000", "1000000", "1997000", "1000000"), -1, NULL,
         {"below --max-json-body 1997000 plus", "at least 2128072"}},
        {BUDGET("3000000", "1000000", "1000000", "3000001"), -1, NULL,
         {"below --request-memory 3000001", "at least 3131073"}},
        /* no budget */
        {(char *[]){"attnd", "--memory-budget", "0", "--max-body", "2000000",
                    NULL}, 0, NULL, {NULL}},
        /* a request of request-memory is held beside its connection's
         * state (REST 36 KiB, gRPC ~87 KiB): a budget of request-memory
         * exactly started, and answered such a request 503 for good */
        {BUDGET("3000000", "1000000", "1000000", "3000000"), -1, NULL, {NULL}},
        {BUDGET("3131071", "1000000", "1000000", "3000000"), -1,
         "--memory-budget 3131071: below --request-memory "
         "3000000 plus the 131072 bytes a request holds "
         "beside it (its connection's state, and a gRPC "
         "call's): a request that large could never be "
         "served; set --memory-budget to at least 3131072 "
         "(or 0: no budget)", {NULL}},
        {BUDGET("3131072", "1000000", "1000000", "3000000"), 0, NULL, {NULL}},
    };
    check_loads(k, N_CASES(k));
}
END_TEST
#undef BUDGET

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
    const struct {
        char **argv;
        srv_action act;
        const char *arg; /* NULL: not looked at */
    } k[] = {
        {(char *[]){"attnd", "--check-models", "dir", NULL}, SRV_CHECK_MODELS,
         "dir"},
        {(char *[]){"attnd", "--health-check=http://127.0.0.1:1/", NULL},
         SRV_HEALTH_CHECK, "http://127.0.0.1:1/"},
        {(char *[]){"attnd", "--version", NULL}, SRV_VERSION, NULL},
        {(char *[]){"attnd", "--port", "1", "--help", NULL}, SRV_HELP, NULL},
    };
    for (size_t i = 0; i < N_CASES(k); i++) {
        srv_config c;
        srv_action act;
        const char *arg;
        char err[SRV_ERRMAX];
        ck_assert_int_eq(
            load(&c, &act, &arg, err, argc_of(k[i].argv), k[i].argv), 0);
        ck_assert_int_eq(act, k[i].act);
        if (k[i].arg)
            ck_assert_str_eq(arg, k[i].arg);
        srv_config_free(&c);
    }
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

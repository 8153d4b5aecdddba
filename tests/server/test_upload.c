/* test_upload.c - models uploaded in a load request (server/upload.c):
 * parameter checks, base64, and the atomic publish into the repository. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/upload.h"
#include "tests/check_main.h"

static char repo[256];
static char *st_b64; /* the tiny fixture's model.safetensors, base64 */

static char *b64(const unsigned char *p, size_t n)
{
    static const char t[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 5), *q = o;
    size_t i;
    for (i = 0; i + 2 < n; i += 3) {
        *q++ = t[p[i] >> 2];
        *q++ = t[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
        *q++ = t[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
        *q++ = t[p[i + 2] & 63];
    }
    if (i < n) {
        *q++ = t[p[i] >> 2];
        *q++ = t[((p[i] & 3) << 4) | (i + 1 < n ? p[i + 1] >> 4 : 0)];
        *q++ = i + 1 < n ? t[(p[i + 1] & 15) << 2] : '=';
        *q++ = '=';
    }
    *q = 0;
    return o;
}

static void setup(void)
{
    const char *data = getenv("ATTN_TEST_DATA");
    char path[512];
    FILE *f;
    long n;
    unsigned char *buf;
    snprintf(path, sizeof path, "%s/server/fixtures/models/tiny/model.safetensors",
             data ? data : "tests");
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "fixture %s missing", path);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    st_b64 = b64(buf, (size_t)n);
    free(buf);
    snprintf(repo, sizeof repo, "/tmp/attnd-test-upload-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(repo));
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void teardown(void)
{
    free(st_b64);
    rm_rf(repo);
}

/* entries: names in dir (sorted, joined by ','), hidden ones included. */
static void entries(const char *dir, char *out, size_t n)
{
    struct dirent **list;
    int i, k = scandir(dir, &list, NULL, alphasort);
    out[0] = 0;
    for (i = 0; i < k; i++) {
        if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, "..")) {
            if (out[0])
                strncat(out, ",", n - strlen(out) - 1);
            strncat(out, list[i]->d_name, n - strlen(out) - 1);
        }
        free(list[i]);
    }
    free(list);
}

static int install(const char *name, const char *body, char *err, model **m)
{
    return srv_upload_install(repo, name, body, strlen(body), m, err, 512);
}

START_TEST(plain_bodies)
{
    ck_assert_int_eq(srv_upload_is_plain("{}", 2), 1);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"x\":1}}", 22), 1);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"config\":\"{}\"}}", 30), 0);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"file:a\":\"\"}}", 28), 0);
    ck_assert_int_eq(srv_upload_is_plain("nope", 4), 0);
}
END_TEST

START_TEST(publishes_atomically)
{
    char *body = malloc(strlen(st_b64) + 200), err[512], list[512], path[600];
    model *m = NULL;
    sprintf(body, "{\"parameters\":{\"config\":\"{\\\"n_heads\\\": 2}\","
                  "\"file:model.safetensors\":\"%s\"}}", st_b64);
    ck_assert_int_eq(install("up", body, err, &m), 0);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(model_config(m)->n_heads, 2);
    ck_assert_int_eq(model_config(m)->d_model, 8);
    model_destroy(m);
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "up"); /* no staging folder left */
    snprintf(path, sizeof path, "%s/up", repo);
    entries(path, list, sizeof list);
    ck_assert_str_eq(list, "config.json,model.safetensors");
    /* a second upload without config drops the old config.json */
    sprintf(body, "{\"parameters\":{\"file:model.safetensors\":\"%s\"}}", st_b64);
    ck_assert_int_eq(install("up", body, err, &m), 400); /* n_heads unknown */
    ck_assert_ptr_nonnull(strstr(err, "upload of model 'up'"));
    ck_assert_ptr_null(m);
    entries(path, list, sizeof list); /* the failed upload changed nothing */
    ck_assert_str_eq(list, "config.json,model.safetensors");
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "up");
    free(body);
}
END_TEST

START_TEST(bad_parameters_are_named)
{
    char err[512];
    model *m = NULL;
    ck_assert_int_eq(install("a", "[]", err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "body"));
    ck_assert_int_eq(install("a", "{\"parameters\": 3}", err, &m), 400);
    ck_assert_str_eq(err, "parameters: must be an object");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"config\":5}}", err, &m), 400);
    ck_assert_str_eq(err, "parameters.config: must be a JSON string");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"config\":\"[1]\"}}", err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "parameters.config: not a JSON object"));
    ck_assert_int_eq(install("a", "{\"parameters\":{\"file:model.safetensors\":\"a*b\"}}", err, &m), 400);
    ck_assert_str_eq(err, "parameters[\"file:model.safetensors\"]: not valid base64");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"file:model.safetensors\":\"abcde\"}}", err, &m), 400);
    ck_assert_int_eq(install("a", "{\"parameters\":{\"file:x.bin\":\"AAAA\"}}", err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "file:x.bin"));
    ck_assert_int_eq(install("a", "{\"parameters\":{}}", err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "missing"));
    ck_assert_int_eq(install("a", "{\"parameters\":{\"file:model.safetensors\":\"AAAA\"}}", err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "upload of model 'a'"));
    {
        char list[512];
        entries(repo, list, sizeof list);
        ck_assert_str_eq(list, ""); /* nothing written, nothing staged */
    }
}
END_TEST

static Suite *upload_suite(void)
{
    Suite *s = suite_create("upload");
    TCase *tc = tcase_create("upload");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, plain_bodies);
    tcase_add_test(tc, publishes_atomically);
    tcase_add_test(tc, bad_parameters_are_named);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(upload_suite)

/* test_upload.c - models uploaded in a load request (server/upload.c):
 * parameter checks, base64, and the atomic publish into the repository. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/upload.h"
#include "tests/check_main.h"
#include "tests/tu_file.h"

static char repo[256];
static char *st_b64; /* the tiny fixture's model.safetensors, base64 */
static unsigned char *st_a, *st_b; /* the fixture, and it with one weight changed */
static size_t st_n;
static char *st_b64b; /* st_b, base64 */

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
    st_n = (size_t)n;
    st_a = buf;
    st_b = malloc(st_n);
    memcpy(st_b, buf, st_n);
    st_b[st_n - 4] ^= 1; /* lowest mantissa bit of the last weight */
    st_b64b = b64(st_b, st_n);
    tu_tmp(repo, sizeof repo, "attnd-test-upload-XXXXXX");
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
    free(st_b64b);
    free(st_a);
    free(st_b);
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
    int lasting;
    return srv_upload_install(repo, name, body, strlen(body), m, &lasting, err,
                              512);
}

typedef struct racer {
    const char *body;
    pthread_barrier_t *go;
    int rounds, fails;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    int i;
    for (i = 0; i < r->rounds; i++) {
        char err[512];
        model *m = NULL;
        int lasting;
        pthread_barrier_wait(r->go);
        if (srv_upload_install(repo, "race", r->body, strlen(r->body), &m,
                               &lasting, err, sizeof err) != 0)
            r->fails++;
        model_destroy(m);
        pthread_barrier_wait(r->go);
    }
    return NULL;
}

START_TEST(plain_bodies)
{
    ck_assert_int_eq(srv_upload_is_plain("{}", 2), 1);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"x\":1}}", 22), 1);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"config\":\"{}\"}}", 30), 0);
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"file:a\":\"\"}}", 28), 0);
    ck_assert_int_eq(srv_upload_is_plain("nope", 4), 0);
    /* a key twice: an upload, refused (keys_twice), not the last copy */
    ck_assert_int_eq(srv_upload_is_plain("{\"parameters\":{\"x\":1,\"x\":1}}", 30), 0);
}
END_TEST

/* A key twice is named with where it is, as the infer path words it;
 * strings holding brackets, quotes and escapes do not mislead the count. */
START_TEST(keys_twice)
{
    static const char *const cases[][2] = {
        {"{\"parameters\":{\"file:model.safetensors\":\"QQ==\"},\"parameters\":{}}",
         "request body: duplicate key \"parameters\""},
        {"{\"a\":\"{[\\\"\",\"parameters\":{\"x\":\"}\",\"c\\u0061usal\":1,"
         "\"causal\":2}}",
         "parameters: duplicate key \"causal\""},
        {"{\"p\":{\"x\":[1]},\"parameters\":{\"y\":{},\"y\":1}}",
         "parameters: duplicate key \"y\""},
        {"{\"parameters\":[{\"y\":1,\"y\":1}]}",
         "request body: invalid JSON: duplicate object key near '\"y\"'"},
        {"{\"parameters\":{\"o\":{\"y\":1,\"y\":1}}}",
         "request body: invalid JSON: duplicate object key near '\"y\"'"},
        {"{\"other\":{\"y\":1,\"y\":1}}",
         "request body: invalid JSON: duplicate object key near '\"y\"'"},
    };
    char err[512];
    model *m = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(srv_upload_is_plain(cases[i][0], strlen(cases[i][0])), 0);
        ck_assert_int_eq(install("a", cases[i][0], err, &m), 400);
        ck_assert_str_eq(err, cases[i][1]);
        ck_assert_ptr_null(m);
    }
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
    /* in the request's terms: no staging folder, the parameters named */
    {
        const char *want = "upload of model 'up': parameters.config: missing, and "
                           "parameters[\"file:model.safetensors\"] __metadata__ "
                           "has no n_heads; ";
        ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    }
    ck_assert_ptr_null(strstr(err, ".attnd-staging"));
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
    ck_assert_str_eq(err, "body: expected a JSON object, got an array");
    ck_assert_int_eq(install("a", "{\"parameters\": 3}", err, &m), 400);
    ck_assert_str_eq(err, "parameters: must be an object");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"config\":5}}", err, &m), 400);
    ck_assert_str_eq(err, "parameters.config: must be a JSON string");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"config\":\"[1]\"}}", err, &m), 400);
    ck_assert_str_eq(err, "parameters.config: expected a JSON object, got an array");
    ck_assert_int_eq(install("a", "{\"parameters\":{\"file:model.safetensors\":\"a*b\"}}", err, &m), 400);
    ck_assert_str_eq(err, "parameters[\"file:model.safetensors\"]: not valid base64: "
                          "character 1 ('*') is not in the base64 alphabet");
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

/* parse_b64: parse {"parameters":{"file:model.safetensors":"<text>"}} into u;
 * srv_upload_parse's status, err holding its message. */
static int parse_b64(const char *text, srv_upload *u, char *err)
{
    char body[256];
    snprintf(body, sizeof body, "{\"parameters\":{\"file:model.safetensors\":\"%s\"}}",
             text);
    return srv_upload_parse(u, body, strlen(body), err, 512);
}

/* One text per byte string: the padding a length needs or none, nothing
 * after it, one alphabet, no bits past the data. "AAAA=" and "AA===" were
 * taken (the '=' at the end were all stripped, however many). */
START_TEST(base64_is_strict)
{
    static const struct { const char *text, *why; } bad[] = {
        {"AAAA=", "1 '=' after 4 characters of data; padding is none after a multiple of 4"},
        {"AAAA==", "2 '=' after 4 characters of data; padding is none after a multiple of 4"},
        {"AAA==", "2 '=' after 3 characters of data; padding is '=' (or none) after 4k+3"},
        {"AA=", "1 '=' after 2 characters of data; padding is '==' (or none) after 4k+2"},
        {"AA===", "3 '=' after 2 characters of data; padding is '==' (or none) after 4k+2"},
        {"====", "4 '=' after 0 characters of data; padding is none after a multiple of 4"},
        {"AA==AA==", "character 2 is '=' (padding) before the end of the data"},
        {"AAAAA", "5 characters of data (not counting '=') cannot be base64: one is left over (a length of 4k+1)"},
        {"AB==", "its last character ('B') has bits set past the data (not the base64 of any bytes)"},
        {"AAB", "its last character ('B') has bits set past the data (not the base64 of any bytes)"},
        {"A+_A", "mixes the standard ('+', '/') and the URL-safe ('-', '_') alphabets"},
        {"AA A", "character 2 (byte 0x20) is not in the base64 alphabet"},
    };
    static const struct { const char *text; size_t len; unsigned char last; } good[] = {
        {"", 0, 0}, {"AA==", 1, 0}, {"AA", 1, 0}, {"AAE=", 2, 1}, {"AAE", 2, 1},
        {"+/+/", 3, 0xbf}, {"-_-_", 3, 0xbf}, {"AAAA", 3, 0},
    };
    char err[512], want[512];
    srv_upload u;
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(parse_b64(bad[i].text, &u, err) == 400, "'%s' was taken", bad[i].text);
        snprintf(want, sizeof want, "parameters[\"file:model.safetensors\"]: not "
                 "valid base64: %s", bad[i].why);
        ck_assert_str_eq(err, want);
    }
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(parse_b64(good[i].text, &u, err) == 0, "'%s': %s", good[i].text, err);
        ck_assert_uint_eq(u.st_len, good[i].len);
        if (u.st_len)
            ck_assert_uint_eq(u.st[u.st_len - 1], good[i].last);
        srv_upload_free(&u);
    }
}
END_TEST

/* Two uploads of one name at once, 60 times: the folder always holds one
 * upload's config.json with that same upload's weights (issue 11: they
 * were renamed one file at a time and could mix). */
START_TEST(concurrent_uploads_never_mix)
{
    enum { ROUNDS = 60 };
    char *ba = malloc(strlen(st_b64) + 200), *bb = malloc(strlen(st_b64b) + 200);
    pthread_barrier_t go;
    racer ra = {0}, rb = {0};
    pthread_t ta, tb;
    int i, mixed = 0;
    char p[600], list[512];
    sprintf(ba, "{\"parameters\":{\"config\":\"{\\\"n_heads\\\": 2, "
                "\\\"description\\\": \\\"A\\\"}\","
                "\"file:model.safetensors\":\"%s\"}}", st_b64);
    sprintf(bb, "{\"parameters\":{\"config\":\"{\\\"n_heads\\\": 2, "
                "\\\"description\\\": \\\"B\\\"}\","
                "\"file:model.safetensors\":\"%s\"}}", st_b64b);
    pthread_barrier_init(&go, NULL, 3);
    ra = (racer){ba, &go, ROUNDS, 0};
    rb = (racer){bb, &go, ROUNDS, 0};
    pthread_create(&ta, NULL, race, &ra);
    pthread_create(&tb, NULL, race, &rb);
    for (i = 0; i < ROUNDS; i++) {
        size_t nc = 0, nw = 0;
        char *c, *w;
        pthread_barrier_wait(&go); /* both start */
        pthread_barrier_wait(&go); /* both done */
        snprintf(p, sizeof p, "%s/race/config.json", repo);
        c = tu_slurp(p, &nc);
        snprintf(p, sizeof p, "%s/race/model.safetensors", repo);
        w = tu_slurp(p, &nw);
        ck_assert_uint_eq(nw, st_n);
        if (memcmp(w, strstr(c, "\"A\"") ? st_a : st_b, st_n) != 0)
            mixed++;
        free(c);
        free(w);
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&go);
    ck_assert_int_eq(ra.fails, 0);
    ck_assert_int_eq(rb.fails, 0);
    ck_assert_msg(mixed == 0, "%d of %d rounds mixed one upload's config with "
                  "the other's weights", mixed, ROUNDS);
    snprintf(p, sizeof p, "%s/race", repo);
    entries(p, list, sizeof list);
    ck_assert_str_eq(list, "config.json,model.safetensors");
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "race"); /* nothing left staged */
    free(ba);
    free(bb);
}
END_TEST

/* What a crash leaves (a staging folder of a dead process, an old-style
 * .upload-* folder) is removed at start; a folder set aside by an
 * interrupted two-rename publish goes back; hidden names are refused. */
START_TEST(sweep_and_hidden_names)
{
    char p[700], list[512], note[256], err[512];
    model *m = NULL;
    FILE *f;
    snprintf(p, sizeof p, "%s/.upload-x-1-0", repo); /* pid 1 is not us... */
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/.upload-x-1-0/model.safetensors.tmp", repo);
    f = fopen(p, "w");
    fputs("partial", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR, repo);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR "/a.b~%ld~0", repo, (long)getpid());
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR "/a.b~%ld~0/config.json", repo,
             (long)getpid());
    f = fopen(p, "w");
    fputs("{}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR "/back~%ld~1~old", repo,
             (long)getpid());
    ck_assert_int_eq(mkdir(p, 0755), 0);
    /* pid 1 (init) is alive and not ours: its folder stays, unless we run
     * as pid 1 ourselves, where it is ours from a previous life */
    ck_assert_int_eq(srv_upload_sweep(repo, note, sizeof note), getpid() == 1 ? 3 : 2);
    ck_assert_ptr_nonnull(strstr(note, "interrupted upload"));
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, getpid() == 1 ? "back" : ".upload-x-1-0,back");
    ck_assert_int_eq(srv_upload_sweep(repo, note, sizeof note), 0);
    ck_assert_str_eq(note, "");
    snprintf(p, sizeof p, "{\"parameters\":{\"file:model.safetensors\":\"%s\"}}", st_b64);
    ck_assert_int_eq(install(".hidden", p, err, &m), 400);
    ck_assert_ptr_nonnull(strstr(err, "model name '.hidden'"));
    ck_assert_ptr_null(m);
}
END_TEST

/* A model folder that is a symbolic link (an alias, latest -> v3, or one
 * to a folder outside the repository) is replaced by an upload: the link
 * goes, what it points to is left as it was. The old folder, exchanged
 * into the staging area, was removed through the link: v3's files were
 * deleted, and the link stayed behind in .attnd-staging (removed again,
 * through it, at each start); a stray file of the name stayed there too. */
START_TEST(upload_over_a_symlink_keeps_its_target)
{
    char *body = malloc(strlen(st_b64) + 200), err[512], list[512], p[700];
    char v3[300];
    model *m = NULL;
    struct stat sb;
    FILE *f;
    snprintf(v3, sizeof v3, "%s/v3", repo);
    ck_assert_int_eq(mkdir(v3, 0755), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", v3);
    ck_assert_ptr_nonnull(f = fopen(p, "wb"));
    ck_assert_uint_eq(fwrite(st_a, 1, st_n, f), st_n);
    fclose(f);
    snprintf(p, sizeof p, "%s/config.json", v3);
    ck_assert_ptr_nonnull(f = fopen(p, "w"));
    fputs("{\"n_heads\": 2}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/latest", repo);
    ck_assert_int_eq(symlink(v3, p), 0); /* ln -s "$PWD/v3" latest */
    sprintf(body, "{\"parameters\":{\"config\":\"{\\\"n_heads\\\": 2}\","
                  "\"file:model.safetensors\":\"%s\"}}", st_b64b);
    ck_assert_int_eq(install("latest", body, err, &m), 0);
    model_destroy(m);
    entries(v3, list, sizeof list); /* the link's target: untouched */
    ck_assert_str_eq(list, "config.json,model.safetensors");
    snprintf(p, sizeof p, "%s/latest", repo); /* a folder of its own now */
    ck_assert_int_eq(lstat(p, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    entries(repo, list, sizeof list); /* nothing left staged */
    ck_assert_str_eq(list, "latest,v3");
    /* a relative link: the same */
    snprintf(p, sizeof p, "%s/alias", repo);
    ck_assert_int_eq(symlink("v3", p), 0);
    ck_assert_int_eq(install("alias", body, err, &m), 0);
    model_destroy(m);
    entries(v3, list, sizeof list);
    ck_assert_str_eq(list, "config.json,model.safetensors");
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "alias,latest,v3");
    /* a stray file of the name: replaced, and not left staged either */
    snprintf(p, sizeof p, "%s/notes", repo);
    ck_assert_ptr_nonnull(f = fopen(p, "w"));
    fclose(f);
    ck_assert_int_eq(install("notes", body, err, &m), 0);
    model_destroy(m);
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "alias,latest,notes,v3");
    /* a link such an upload left staged is removed at start, not what it
     * points to */
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR, repo);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/" SRV_STAGING_DIR "/old~%ld~0", repo, (long)getpid());
    ck_assert_int_eq(symlink(v3, p), 0);
    ck_assert_int_eq(srv_upload_sweep(repo, err, sizeof err), 1);
    entries(v3, list, sizeof list);
    ck_assert_str_eq(list, "config.json,model.safetensors");
    entries(repo, list, sizeof list);
    ck_assert_str_eq(list, "alias,latest,notes,v3");
    free(body);
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
    tcase_add_test(tc, keys_twice);
    tcase_add_test(tc, base64_is_strict);
    tcase_add_test(tc, concurrent_uploads_never_mix);
    tcase_add_test(tc, sweep_and_hidden_names);
    tcase_add_test(tc, upload_over_a_symlink_keeps_its_target);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(upload_suite)

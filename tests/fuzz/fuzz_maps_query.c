/*
 * fuzz_maps_query.c - libFuzzer harness: GET /v2/maps... with an arbitrary
 * path and query string (server/maps_http.c) against a store holding two
 * retained maps (one with mask, scores and values). make fuzz-long.
 * Input: the path selector (first byte), then the query string as MHD
 * would hand it over (split at '&' and '=', %XX decoded).
 * Beyond "no crash, no leak, no UB": the status is 200, 400 or 404, and a
 * JSON answer parses.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/maps.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static maps_store *store;
static char id_a[MAPS_ID_MAX], id_b[MAPS_ID_MAX];

#define NQ 16
typedef struct query {
    int n;
    char *key[NQ], *val[NQ];
} query;

static const char *arg(void *ctx, const char *key)
{
    query *q = ctx;
    for (int i = 0; i < q->n; i++)
        if (strcmp(q->key[i], key) == 0)
            return q->val[i];
    return NULL;
}

static int hexv(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* unescape: %XX and '+' in place (as MHD does for arguments). */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '%' && hexv(s[1]) >= 0 && hexv(s[2]) >= 0) {
            *o++ = (char)(hexv(s[1]) * 16 + hexv(s[2]));
            s += 2;
        } else {
            *o++ = *s == '+' ? ' ' : *s;
        }
    }
    *o = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static float att[2 * 2 * 5 * 5], scores[2 * 2 * 5 * 5], v[2 * 1 * 5 * 3];
    static uint8_t mask[5 * 5];
    static const int32_t tv[2] = {5, 3}, sv[2] = {4, 5};
    static const char *const tokens[] = {"a", "b", "c", "d", "e"};
    char err[256];
    (void)argc;
    (void)argv;
    for (int i = 0; i < 100; i++) {
        att[i] = (float)(i % 5) / 10.0f;
        scores[i] = (float)i - 50.0f;
    }
    for (int i = 0; i < 30; i++)
        v[i] = (float)i;
    for (int i = 0; i < 25; i++)
        mask[i] = (uint8_t)(i % 5 <= i / 5);
    if (maps_store_create(&store, 1 << 20) < 0)
        abort();
    maps_put_args a = {.model = "m", .b = 2, .h = 2, .t = 5, .s = 5,
                       .attention = att, .causal = 1, .t_valid = tv,
                       .s_valid = sv, .tokens = tokens, .n_tokens = 5,
                       .mask = mask, .mask_planes = 1, .scores = scores,
                       .v = v, .kv_h = 1, .dv = 3, .dk = 4,
                       .vnorm = v, .norm_of = MAPS_NORM_VO};
    if (maps_put(store, &a, id_a, err) < 0)
        abort();
    maps_put_args b = {.model = "n", .b = 1, .h = 1, .t = 5, .s = 5,
                       .attention = att};
    if (maps_put(store, &b, id_b, err) < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[128], *qs;
    query q = {0};
    maps_reply rep;
    if (size < 1 || size > 4096)
        return 0;
    switch (data[0] % 6) {
    case 0: snprintf(path, sizeof path, "/v2/maps"); break;
    case 1: snprintf(path, sizeof path, "/v2/maps/%s", id_a); break;
    case 2: snprintf(path, sizeof path, "/v2/maps/%s/attention", id_a); break;
    case 3: snprintf(path, sizeof path, "/v2/maps/%s/attention", id_b); break;
    case 4: snprintf(path, sizeof path, "/v2/maps/m9-000000/attention"); break;
    default: snprintf(path, sizeof path, "/v2/maps/%s/other", id_b); break;
    }
    qs = malloc(size);
    memcpy(qs, data + 1, size - 1);
    qs[size - 1] = 0;
    for (char *p = qs, *next; p && *p && q.n < NQ; p = next) {
        char *eq;
        next = strchr(p, '&');
        if (next)
            *next++ = 0;
        eq = strchr(p, '=');
        if (eq)
            *eq++ = 0;
        unescape(p);
        if (eq)
            unescape(eq);
        q.key[q.n] = p;
        q.val[q.n++] = eq ? eq : (char *)"";
    }
    memset(&rep, 0, sizeof rep);
    if (maps_http_get(store, path, arg, &q, &rep) == 0) {
        if (rep.status != 200 && rep.status != 400 && rep.status != 404) {
            fprintf(stderr, "status %d\n", rep.status);
            abort();
        }
        if (rep.content_type && strstr(rep.content_type, "json")) {
            json_error_t je;
            json_t *j = json_loadb(rep.body, rep.len, 0, &je);
            if (!j) {
                fprintf(stderr, "bad JSON answer: %s\n", je.text);
                abort();
            }
            json_decref(j);
        }
    }
    free(rep.body);
    free(qs);
    return 0;
}

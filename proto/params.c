/*
 * params.c - parameter names both decoders (decode.c's JSON, pb.c's
 * protobuf) refuse rather than ignore.
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/attn.h"

#include "oip_internal.h"

/* oip__shm_param: see oip_internal.h. */
int oip__shm_param(const char *key)
{
    return !strcmp(key, "shared_memory_region") ||
           !strcmp(key, "shared_memory_byte_size") ||
           !strcmp(key, "shared_memory_offset");
}

/* The names attnd reads, each list NULL-terminated. */
const char *const oip__request_params[] = {
    "causal", "retain", "binary_data_output", "sequence_id", "sequence_start",
    "sequence_end", "sequence_position", "scale", "tokens", NULL};
const char *const oip__output_params[] = {
    "binary_data", "classification", "shared_memory_region",
    "shared_memory_byte_size", "shared_memory_offset", NULL};
const char *const oip__input_params[] = {
    "binary_data_size", "shared_memory_region", "shared_memory_byte_size",
    "shared_memory_offset", NULL};

/* fold: s lowercased without '_', '-', '.' and ' ' into out (n bytes);
 * its length, or n when it does not fit. */
static size_t fold(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (; *s; s++) {
        char c = *s;
        if (c == '_' || c == '-' || c == '.' || c == ' ')
            continue;
        if (k + 1 >= n)
            return n;
        out[k++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    out[k] = 0;
    return k;
}

/* osa: the optimal string alignment distance of a and b (edits: insert,
 * delete, substitute, swap two neighbours), both under 40 bytes. */
static size_t osa(const char *a, size_t la, const char *b, size_t lb)
{
    size_t d[40][40];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* oip__misspelt: see oip_internal.h. */
const char *oip__misspelt(const char *key, const char *const *known)
{
    char k[40], w[40];
    size_t lk = fold(key, k, sizeof k);
    if (lk == sizeof k || lk == 0)
        return NULL;
    for (size_t i = 0; known[i]; i++) {
        if (!strcmp(key, known[i]))
            return NULL;
    }
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; known[i]; i++) {
        size_t lw = fold(known[i], w, sizeof w);
        size_t dist;
        if (lk + 1 < lw || lw + 1 < lk)
            continue;
        if ((dist = osa(k, lk, w, lw)) <= 1 && dist < best_d) /* nearest */
            best = known[i], best_d = dist;
    }
    return best;
}

/* oip__tensor_param: see oip_internal.h. */
int oip__tensor_param(int output, size_t i, const char *key, int strict,
                      char *err)
{
    const char *list = output ? "outputs" : "inputs";
    char where[48];
    if (oip__shm_param(key))
        return oip__fail(err, ATTN_EINVAL, OIP_NO_SHM, list, i, key,
                         output ? OIP_NO_SHM_OUT : OIP_NO_SHM_IN);
    snprintf(where, sizeof where, "%s[%zu].parameters", list, i);
    return oip__param_check(where, key, output ? oip__output_params
                                               : oip__input_params,
                            strict, err);
}

/* oip__param_check: see oip_internal.h. */
int oip__param_check(const char *where, const char *key,
                     const char *const *known, int strict, char *err)
{
    const char *m = oip__misspelt(key, known);
    if (m)
        return oip__fail(err, ATTN_EINVAL, OIP_MISSPELT, where, key, m);
    if (!strict)
        return 0;
    char names[256] = "";
    size_t n = 0;
    for (size_t i = 0; known[i]; i++) {
        if (!strcmp(key, known[i]))
            return 0;
        if (oip__shm_param(known[i]))
            continue; /* guarded, and refused: not read */
        n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0,
                              "%s%s", n ? ", " : "", known[i]);
        if (n >= sizeof names)
            n = sizeof names - 1;
    }
    return oip__fail(err, ATTN_EINVAL, "%s.%.64s: not a parameter attnd "
                     "reads, refused under strict-parameters (it reads %s)",
                     where, key, names);
}

int oip__tokens_shape(oip__tokens_kind kind, void *ctx, size_t count,
                      int max_tokens, int *items, size_t *n, char *err)
{
    size_t len0 = 0, len, i, total = 0;
    long j;
    int k;

    *items = 0;
    *n = 0;
    if (count == 0)
        return 0;
    if (kind(ctx, 0, -1, &len0) != 1) { /* one list for every item */
        if (count > (size_t)max_tokens)
            return oip__fail(err, ATTN_EOVERFLOW, "parameters.tokens: %zu "
                             "entries, at most %d", count, max_tokens);
        for (i = 0; i < count; i++) {
            if ((k = kind(ctx, i, -1, &len)) != 0)
                return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]: "
                                 "expected a string%s", i, k == 1 ?
                                 " (one list for every batch item; or "
                                 "every entry a list, one per item)" : "");
            if (len >= OIP_MAX_TOKEN)
                return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]: "
                                 "longer than %d bytes", i,
                                 OIP_MAX_TOKEN - 1);
        }
        *n = count;
        return 0;
    }
    for (i = 0; i < count; i++) { /* one list per batch item */
        if (kind(ctx, i, -1, &len) != 1)
            return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]: "
                             "expected a list of strings, as tokens[0] is "
                             "(one list per batch item)", i);
        if (len != len0)
            return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]: %zu "
                             "label%s, tokens[0] has %zu (every batch item's "
                             "list is as long)", i, len, len == 1 ? "" : "s",
                             len0);
        if ((total += len) > (size_t)max_tokens)
            return oip__fail(err, ATTN_EOVERFLOW, "parameters.tokens: more "
                             "than %d entries in all", max_tokens);
        for (j = 0; j < (long)len; j++) {
            size_t sl;
            if (kind(ctx, i, j, &sl) != 0)
                return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]"
                                 "[%ld]: expected a string", i, j);
            if (sl >= OIP_MAX_TOKEN)
                return oip__fail(err, ATTN_EINVAL, "parameters.tokens[%zu]"
                                 "[%ld]: longer than %d bytes", i, j,
                                 OIP_MAX_TOKEN - 1);
        }
    }
    *items = len0 ? (int)count : 0;
    *n = total;
    return 0;
}

/* kind of an oip__jv tree's entry (oip__tokens_kind) */
static const oip__jv *jv_entry(const oip__jv *t, size_t i, long j)
{
    const oip__jv *v = oip__jat(t, i);
    return j < 0 ? v : oip__jat(v, (size_t)j);
}

static int jv_kind(void *ctx, size_t i, long j, size_t *len)
{
    const oip__jv *v = jv_entry(ctx, i, j);

    if (!v)
        return -1;
    *len = v->len;
    return v->type == OIP__JSTR ? 0 : v->type == OIP__JARR ? 1 : -1;
}

int oip__tokens_jv(oip_params *pr, const oip__jv *t, int max_tokens,
                   size_t *bytes, char *err)
{
    size_t n, i, per;
    int items, rc;

    if (t->type != OIP__JARR)
        return oip__fail(err, ATTN_EINVAL, "parameters.tokens: expected an "
                         "array of strings");
    if ((rc = oip__tokens_shape(jv_kind, (void *)t, t->len, max_tokens,
                                &items, &n, err)))
        return rc;
    if (n == 0)
        return 0;
    pr->tokens = calloc(n, sizeof *pr->tokens);
    if (!pr->tokens)
        return oip__fail(err, ATTN_ENOMEM, "parameters.tokens: out of memory");
    per = items ? n / (size_t)items : n;
    for (i = 0; i < n; i++) {
        const oip__jv *s = items ? jv_entry(t, i / per, (long)(i % per))
                                 : oip__jat(t, i);
        pr->tokens[i] = malloc(s->len + 1);
        if (!pr->tokens[i])
            return oip__fail(err, ATTN_ENOMEM,
                             "parameters.tokens: out of memory");
        memcpy(pr->tokens[i], s->str, s->len + 1);
        pr->n_tokens = (int)i + 1;
        *bytes += s->len + 1 + sizeof(char *);
    }
    pr->token_items = items;
    return 0;
}

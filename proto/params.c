/*
 * params.c - parameter names both decoders (decode.c's JSON, pb.c's
 * protobuf) refuse rather than ignore.
 */
#include <stdint.h>
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

/*
 * st_build.h - a safetensors file made up in memory, for the tests/core
 * suites of core/model.c (header-only: each suite is its own binary).
 */
#ifndef ATTN_TEST_ST_BUILD_H
#define ATTN_TEST_ST_BUILD_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One tensor of a made-up file: (rows, cols), or (rows) when cols is 0. */
typedef struct spec {
    const char *name;
    int rows, cols;
} spec;

#define MAX_T 12

/* st_build: a safetensors file of the tensors t[0..] (up to the first NULL
 * name), F32, values small and seeded; malloc'd, its length in *len. */
static inline unsigned char *st_build(const spec *t, size_t *len)
{
    char hdr[2048];
    size_t at = 0, off = 0;
    for (int i = 0; i < MAX_T && t[i].name; i++) {
        size_t c = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        char shape[32];
        if (t[i].cols)
            snprintf(shape, sizeof shape, "%d,%d", t[i].rows, t[i].cols);
        else
            snprintf(shape, sizeof shape, "%d", t[i].rows);
        at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],"
                               "\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "{", t[i].name, shape, off * 4,
                               (off + c) * 4);
        off += c;
    }
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "}");
    ck_assert_uint_lt(at, sizeof hdr - 8);
    while (at % 8)
        hdr[at++] = ' ';
    *len = 8 + at + off * sizeof(float);
    unsigned char *st = malloc(*len);
    ck_assert_ptr_nonnull(st);
    for (int b = 0; b < 8; b++)
        st[b] = (unsigned char)((uint64_t)at >> (8 * b));
    memcpy(st + 8, hdr, at);
    for (size_t i = 0; i < off; i++) {
        float v = (float)((int)(i * 7919 % 13) - 6) / 16;
        memcpy(st + 8 + at + i * sizeof(float), &v, sizeof v);
    }
    return st;
}

#endif

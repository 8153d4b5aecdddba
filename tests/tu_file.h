/*
 * tu_file.h - a whole file into memory, for the Check suites of every
 * layer (header-only: each suite is its own binary).
 */
#ifndef ATTN_TU_FILE_H
#define ATTN_TU_FILE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

/* tu_slurp: path's bytes (*len of them), malloc'd with a NUL after them
 * for text; the calling test fails when the file cannot be read (tests run
 * from the repository root). */
static inline void *tu_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b;
    long n;
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(fread(b, 1, (size_t)n, f) == (size_t)n, "cannot read %s",
                  path);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

#endif

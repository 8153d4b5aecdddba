/*
 * test_st.c - core/st.c: the malformed-file corpus (one file per rule, each
 * with the exact error it must give), valid edge cases, dtype conversion
 * against hand-computed values, transposed conversion, and robustness
 * against every truncation and byte flip of a valid file.
 *
 * Corpus: tests/core/st_corpus/, written by tests/core/make_st_corpus.py.
 * ATTN_TEST_DATA points at tests/ (default "tests").
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/st.h"
#include "tests/check_main.h"
#include "tests/tu_file.h"

static char *data_path(const char *rel)
{
    const char *root = getenv("ATTN_TEST_DATA");
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/core/st_corpus/%s", root ? root : "tests",
             rel);
    return buf;
}

/* The corpus: file, and the exact message after "<path>: ". */
static const struct {
    const char *file;
    const char *msg;
} corpus[] = {
    {"too_short.safetensors",
     "file is 3 bytes, too short for the 8-byte header length (rule: header "
     "length); is this a safetensors file?"},
    {"header_too_large.safetensors",
     "header length 100000001 exceeds the limit of 100000000 bytes (rule: "
     "header length); is this a safetensors file?"},
    {"header_past_eof.safetensors",
     "header length 64 runs past the end of the file (7 bytes follow the "
     "length) (rule: header inside the file); the file is truncated or not "
     "safetensors"},
    {"header_one_past_eof.safetensors",
     "header length 8 runs past the end of the file (7 bytes follow the "
     "length) (rule: header inside the file); the file is truncated or not "
     "safetensors"},
    {"header_not_object_start.safetensors",
     "header does not start with '{' (rule: header is a JSON object)"},
    {"header_bad_json.safetensors",
     "header is not valid JSON: string or '}' expected near end of file at "
     "byte 22 (rule: header JSON, duplicate keys rejected)"},
    {"header_bad_utf8.safetensors",
     "header is not valid JSON: unable to decode byte 0xff near '\"' at byte "
     "2 (rule: header JSON, duplicate keys rejected)"},
    {"header_trailing_garbage.safetensors",
     "header is not valid JSON: end of file expected near '{' at byte 3 "
     "(rule: header JSON, duplicate keys rejected)"},
    {"duplicate_key.safetensors",
     "header is not valid JSON: duplicate object key near '\"a\"' at byte 57 "
     "(rule: header JSON, duplicate keys rejected)"},
    {"metadata_not_string.safetensors",
     "__metadata__ value of 'n_heads' is not a string (rule: metadata values "
     "are strings)"},
    {"entry_not_object.safetensors",
     "tensor 'a': entry must be an object with dtype, shape and data_offsets "
     "(rule: tensor entry)"},
    {"dtype_missing.safetensors",
     "tensor 'a': dtype is missing or not a string (rule: tensor entry)"},
    {"dtype_unknown.safetensors",
     "tensor 'a': unknown dtype 'F24' (rule: dtype; known: BOOL, U8, I8, "
     "F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)"},
    {"shape_negative.safetensors",
     "tensor 'a': shape entry 1 is not a non-negative integer (rule: tensor "
     "entry)"},
    {"offsets_bad.safetensors",
     "tensor 'a': data_offsets must be two non-negative integers [begin, "
     "end] (rule: tensor entry)"},
    {"offsets_reversed.safetensors",
     "tensor 'a': data_offsets [4, 0] end before they begin (rule: offsets)"},
    {"shape_overflow.safetensors",
     "tensor 'a': shape [4294967296, 4294967296] has more elements than fit "
     "in 64 bits (rule: size overflow)"},
    {"bytes_overflow.safetensors",
     "tensor 'a': shape [2305843009213693952, 2] x 8 bytes (F64) overflows "
     "64 bits (rule: size overflow)"},
    {"size_mismatch.safetensors",
     "tensor 'a': dtype F32 x shape [2, 3] = 24 bytes but data_offsets [0, "
     "20] hold 20 (rule: dtype x shape = byte length)"},
    {"offsets_not_zero.safetensors",
     "tensor 'a': data_offsets begin at 4 but the first tensor must begin at "
     "0 (rule: offsets start at 0)"},
    {"offsets_gap.safetensors",
     "tensor 'b': data_offsets begin at 8 but the previous tensor 'a' ends "
     "at 4 (rule: offsets contiguous, gap)"},
    {"offsets_overlap.safetensors",
     "tensor 'b': data_offsets begin at 4 but the previous tensor 'a' ends "
     "at 8 (rule: offsets contiguous, overlap)"},
    {"data_past_eof.safetensors",
     "tensor 'b': data_offsets end at 12 but the file has only 8 data bytes; "
     "the file is truncated (rule: tensors inside the file)"},
    {"trailing_bytes.safetensors",
     "tensors end at byte 4 of the data but the file has 8 data bytes (4 "
     "trailing) (rule: last tensor ends at end of file)"},
};
#define N_CORPUS (int)(sizeof corpus / sizeof corpus[0])

START_TEST(test_corpus_file)
{
    char err[ATTN_ERRMAX], want[ATTN_ERRMAX + 1100];
    const char *path = data_path(corpus[_i].file);
    st_file *f = (st_file *)1;
    int rc = st_open(&f, path, err);
    ck_assert_int_eq(rc, ATTN_EFORMAT);
    ck_assert_ptr_null(f);
    snprintf(want, sizeof want, "%s: %s", path, corpus[_i].msg);
    ck_assert_str_eq(err, want);

    /* the same bytes from memory give the same message under a label */
    size_t len;
    unsigned char *b = tu_slurp(path, &len);
    rc = st_parse(&f, b, len, "upload", err);
    ck_assert_int_eq(rc, ATTN_EFORMAT);
    snprintf(want, sizeof want, "upload: %s", corpus[_i].msg);
    ck_assert_str_eq(err, want);
    free(b);
}
END_TEST

START_TEST(test_ok_basic)
{
    char err[ATTN_ERRMAX];
    st_file *f;
    ck_assert_int_eq(st_open(&f, data_path("ok_basic.safetensors"), err), 0);
    ck_assert_uint_eq(st_count(f), 2);
    const st_tensor *a = st_find(f, "a"), *b = st_find(f, "b");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(st_find(f, "c"));
    ck_assert_int_eq(a->dtype, ST_F32);
    ck_assert_int_eq(a->rank, 1);
    ck_assert_uint_eq(a->shape[0], 2);
    ck_assert_uint_eq(a->count, 2);
    float v[3];
    ck_assert_int_eq(st_to_f32(a, v), 0);
    ck_assert_int_eq(st_to_f32(b, v + 2), 0);
    ck_assert(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f);
    ck_assert_str_eq(st_meta(f, "format"), "pt");
    ck_assert_str_eq(st_meta(f, "n_heads"), "2");
    ck_assert_ptr_null(st_meta(f, "nope"));
    ck_assert_uint_eq(st_meta_count(f), 2);
    const char *k, *val;
    ck_assert_int_eq(st_meta_at(f, 1, &k, &val), 0);
    ck_assert_int_eq(st_meta_at(f, 2, &k, &val), ATTN_ENOTFOUND);
    ck_assert_uint_eq(st_file_bytes(f), 180);
    st_close(f);
}
END_TEST

START_TEST(test_ok_unordered)
{
    char err[ATTN_ERRMAX];
    st_file *f;
    ck_assert_int_eq(st_open(&f, data_path("ok_unordered.safetensors"), err),
                     0);
    ck_assert_uint_eq(st_count(f), 3);
    /* sorted by offset: early [0,8), empty [8,8), late [8,12) */
    ck_assert_str_eq(st_tensor_at(f, 0)->name, "early");
    ck_assert_str_eq(st_tensor_at(f, 1)->name, "empty");
    ck_assert_str_eq(st_tensor_at(f, 2)->name, "late");
    ck_assert_ptr_null(st_tensor_at(f, 3));
    const st_tensor *e = st_find(f, "early"), *z = st_find(f, "empty"),
                    *l = st_find(f, "late");
    float v[4];
    ck_assert_int_eq(st_to_f32(e, v), 0);
    ck_assert(v[0] == 1.0f && v[1] == 2.0f && v[2] == -1.0f && v[3] == 0.0f);
    ck_assert_uint_eq(z->count, 0);
    ck_assert_int_eq(z->rank, 2);
    ck_assert_int_eq(l->rank, 0);
    ck_assert_uint_eq(l->count, 1);
    ck_assert_int_eq(st_to_f32(l, v), 0);
    ck_assert(v[0] == 5.0f);
    st_close(f);

    ck_assert_int_eq(st_open(&f, data_path("ok_empty.safetensors"), err), 0);
    ck_assert_uint_eq(st_count(f), 0);
    ck_assert_uint_eq(st_meta_count(f), 0);
    st_close(f);
}
END_TEST

START_TEST(test_open_errors)
{
    char err[ATTN_ERRMAX];
    st_file *f;
    char missing[1024];
    snprintf(missing, sizeof missing, "%s",
             data_path("no_such_file.safetensors"));
    ck_assert_int_eq(st_open(&f, missing, err), ATTN_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "no_such_file.safetensors: cannot "
                                      "open: No such file or directory"));
    ck_assert_int_eq(st_open(&f, data_path(""), err), ATTN_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    /* a NULL err is allowed */
    ck_assert_int_eq(st_open(&f, missing, NULL), ATTN_ENOTFOUND);
    ck_assert_int_eq(st_parse(&f, "", 0, NULL, err), ATTN_EFORMAT);
    ck_assert_str_eq(err, "(buffer): file is 0 bytes, too short for the "
                          "8-byte header length (rule: header length); is "
                          "this a safetensors file?");
    st_close(NULL);
}
END_TEST

START_TEST(test_f16)
{
    static const struct {
        uint16_t h;
        float f;
    } v[] = {
        {0x0000, 0.0f},          {0x3c00, 1.0f},
        {0xc000, -2.0f},         {0x7bff, 65504.0f},
        {0x0001, 0x1p-24f},      {0x03ff, 1023 * 0x1p-24f},
        {0x0400, 0x1p-14f},      {0x3555, 0.333251953125f},
        {0x8001, -0x1p-24f},     {0x4248, 3.140625f},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(st_f16_to_f32(v[i].h) == v[i].f, "f16 0x%04x",
                      v[i].h);
    ck_assert(isinf(st_f16_to_f32(0x7c00)) && st_f16_to_f32(0x7c00) > 0);
    ck_assert(isinf(st_f16_to_f32(0xfc00)) && st_f16_to_f32(0xfc00) < 0);
    ck_assert(isnan(st_f16_to_f32(0x7e00)));
    ck_assert(signbit(st_f16_to_f32(0x8000)));
    ck_assert(st_bf16_to_f32(0x3f80) == 1.0f);
    ck_assert(st_bf16_to_f32(0xc049) == -3.140625f);
    ck_assert(st_bf16_to_f32(0x0001) == 0x1p-133f);
    ck_assert(isinf(st_bf16_to_f32(0x7f80)));
    ck_assert(isnan(st_bf16_to_f32(0x7fc0)));
}
END_TEST

/* The bulk F16 path (st_to_f32: F16C instructions where the CPU has them,
 * else branch-light C) agrees bit for bit with the one-element reference
 * (st_f16_to_f32, checked above by hand) on all 65536 inputs (NaNs: NaN of
 * the same sign). Lengths that are not multiples of 8 use both paths. */
START_TEST(test_f16_exhaustive)
{
    const size_t n = 65536, len = 8 + 72 + 2 * n;
    unsigned char *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    char hdr[73];
    int h = snprintf(hdr, sizeof hdr,
                     "{\"w\":{\"dtype\":\"F16\",\"shape\":[65536],"
                     "\"data_offsets\":[0,131072]}}");
    ck_assert_int_le(h, 72);
    memset(hdr + h, ' ', (size_t)(72 - h));
    memset(b, 0, 8);
    b[0] = 72;
    memcpy(b + 8, hdr, 72);
    for (size_t i = 0; i < n; i++) {
        b[80 + 2 * i] = (unsigned char)i;
        b[81 + 2 * i] = (unsigned char)(i >> 8);
    }
    char err[ATTN_ERRMAX];
    st_file *f;
    ck_assert_msg(st_parse(&f, b, len, "mem", err) == 0, "%s", err);
    float *out = malloc(n * sizeof(float));
    ck_assert_int_eq(st_to_f32(st_find(f, "w"), out), 0);
    for (size_t i = 0; i < n; i++) {
        float want = st_f16_to_f32((uint16_t)i);
        if (isnan(want)) /* a hardware path may quiet signalling NaNs */
            ck_assert_msg(isnan(out[i]) && signbit(out[i]) == signbit(want),
                          "f16 0x%04zx", i);
        else
            ck_assert_msg(memcmp(&out[i], &want, 4) == 0, "f16 0x%04zx", i);
    }
    /* the portable path, whatever this CPU has: bit for bit, NaNs too */
    st__f16_scalar(b + 80, n, out);
    for (size_t i = 0; i < n; i++) {
        float want = st_f16_to_f32((uint16_t)i);
        ck_assert_msg(memcmp(&out[i], &want, 4) == 0, "scalar f16 0x%04zx",
                      i);
    }
    free(out);
    st_close(f);
    free(b);
}
END_TEST

/* elem: element (r, c) of the test matrix, (r * cols + c) mod 2039: exact
 * in F32 and F16 (integers below 2048); BF16 keeps its top 16 bits. */
static float elem(st_dtype dt, int r, int c, int cols)
{
    float f = (float)((r * cols + c) % 2039);
    if (dt == ST_BF16) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        bits &= 0xffff0000u;
        memcpy(&f, &bits, 4);
    }
    return f;
}

/* build: a one-tensor file in memory, (rows, cols) of dtype dt holding
 * elem(). */
static unsigned char *build(st_dtype dt, int rows, int cols, size_t *len)
{
    size_t es = st_dtype_size(dt), n = (size_t)rows * cols * es;
    char hdr[256];
    int h = snprintf(hdr, sizeof hdr,
                     "{\"w\":{\"dtype\":\"%s\",\"shape\":[%d,%d],"
                     "\"data_offsets\":[0,%zu]}}",
                     st_dtype_name(dt), rows, cols, n);
    *len = 8 + (size_t)h + n;
    unsigned char *b = malloc(*len);
    ck_assert(b != NULL);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, (size_t)h);
    unsigned char *d = b + 8 + h;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float f = elem(dt, r, c, cols);
            uint32_t bits;
            memcpy(&bits, &f, 4);
            size_t at = ((size_t)r * cols + c) * es;
            if (dt == ST_F32)
                memcpy(d + at, &f, 4);
            else if (dt == ST_BF16) {
                d[at] = (unsigned char)(bits >> 16);
                d[at + 1] = (unsigned char)(bits >> 24);
            } else { /* F16 of small integers and halves: exact encoding */
                uint32_t s = bits >> 31, e = (bits >> 23) & 0xff,
                         m = bits & 0x7fffff;
                uint16_t hv = f == 0 ? 0
                                     : (uint16_t)(s << 15 | (e - 112) << 10 |
                                                  m >> 13);
                d[at] = (unsigned char)hv;
                d[at + 1] = (unsigned char)(hv >> 8);
            }
        }
    return b;
}

START_TEST(test_rows_transposed)
{
    static const st_dtype dts[] = {ST_F32, ST_F16, ST_BF16};
    const int rows = 71, cols = 141; /* several tiles, ragged edges */
    for (int k = 0; k < 3; k++) {
        size_t len;
        unsigned char *b = build(dts[k], rows, cols, &len);
        char err[ATTN_ERRMAX];
        st_file *f;
        ck_assert_int_eq(st_parse(&f, b, len, "mem", err), 0);
        const st_tensor *t = st_find(f, "w");
        float *out = malloc(sizeof(float) * rows * cols);
        /* rows 5..69 transposed: out[c * 65 + r] = w[5 + r][c] */
        ck_assert_int_eq(st_rows_to_f32(t, 5, 65, 1, out), 0);
        for (int r = 0; r < 65; r++)
            for (int c = 0; c < cols; c++)
                ck_assert_msg(out[c * 65 + r] == elem(dts[k], 5 + r, c, cols),
                              "%s (%d,%d)", st_dtype_name(dts[k]), r, c);
        /* rows 2..4 as they are */
        ck_assert_int_eq(st_rows_to_f32(t, 2, 3, 0, out), 0);
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < cols; c++)
                ck_assert(out[r * cols + c] == elem(dts[k], 2 + r, c, cols));
        ck_assert_int_eq(st_rows_to_f32(t, 64, 8, 0, out), ATTN_EINVAL);
        free(out);
        st_close(f);
        free(b);
    }
}
END_TEST

START_TEST(test_wrong_dtype_convert)
{
    char err[ATTN_ERRMAX];
    st_file *f;
    size_t len;
    unsigned char *b = build(ST_F32, 2, 2, &len);
    /* relabel as I32: same size, so the file stays valid */
    unsigned char *p = (unsigned char *)strstr((char *)b + 8, "F32");
    memcpy(p, "I32", 3);
    ck_assert_int_eq(st_parse(&f, b, len, "mem", err), 0);
    float out[4];
    ck_assert_int_eq(st_to_f32(st_find(f, "w"), out), ATTN_EFORMAT);
    ck_assert_int_eq(st_rows_to_f32(st_find(f, "w"), 0, 2, 1, out),
                     ATTN_EINVAL);
    st_close(f);
    free(b);
}
END_TEST

/* Every prefix of a valid file is rejected; every single-byte change either
 * parses or is rejected cleanly (the sanitizers catch anything worse). */
START_TEST(test_truncations_and_flips)
{
    size_t len;
    unsigned char *b = tu_slurp(data_path("ok_basic.safetensors"), &len);
    unsigned char *c = malloc(len);
    char err[ATTN_ERRMAX];
    st_file *f;
    for (size_t n = 0; n < len; n++) {
        memcpy(c, b, n);
        ck_assert_msg(st_parse(&f, c, n, "cut", err) == ATTN_EFORMAT,
                      "prefix %zu accepted", n);
    }
    static const unsigned char vals[] = {0x00, 0x01, 0x22, 0x2c, 0x30,
                                         0x39, 0x5b, 0x7b, 0x7d, 0xff};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < len; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(c, b, len);
            c[i] = vals[v];
            int rc = st_parse(&f, c, len, "flip", err);
            ck_assert(rc == 0 || rc == ATTN_EFORMAT);
            if (rc == 0) {
                ok++;
                for (size_t t = 0; t < st_count(f); t++) {
                    const st_tensor *tt = st_tensor_at(f, t);
                    ck_assert(tt->data + (tt->end - tt->begin) <= c + len);
                }
                st_close(f);
            } else {
                bad++;
                ck_assert_ptr_nonnull(strstr(err, "flip: "));
            }
        }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(bad, 0);
    free(c);
    free(b);
}
END_TEST

/* st_shape_str: the shape as messages print it, cut short to cap bytes. */
START_TEST(test_shape_str)
{
    const uint64_t dims[2] = {2, 3};
    st_tensor t = {.name = "w", .rank = 2, .shape = dims};
    char buf[16];
    ck_assert_str_eq(st_shape_str(&t, buf, sizeof buf), "[2, 3]");
    ck_assert_str_eq(st_shape_str(&t, buf, 4), "[2,");
    t.rank = 0;
    ck_assert_str_eq(st_shape_str(&t, buf, sizeof buf), "[]");
}
END_TEST

/* truncated_file: a file with tensor 'a', F32 [16384] (64 KiB: pages past
 * the header), opened, then cut to 4 KiB as a `cp` over it would. */
static st_file *truncated_file(char *path)
{
    static const char head[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[16384],\"data_offsets\":[0,65536]}}";
    uint64_t n = sizeof head - 1;
    char err[ATTN_ERRMAX];
    st_file *f = NULL;
    float *zeros = calloc(16384, sizeof *zeros);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_ptr_nonnull(zeros);
    ck_assert_int_eq(write(fd, &n, 8), 8); /* little-endian host (st.c) */
    ck_assert_int_eq(write(fd, head, n), (ssize_t)n);
    ck_assert_int_eq(write(fd, zeros, 65536), 65536);
    close(fd);
    free(zeros);
    ck_assert_int_eq(st_open(&f, path, err), 0);
    ck_assert_int_eq(truncate(path, 4096), 0);
    return f;
}

START_TEST(test_guard_truncated)
{
    char path[1024];
    tu_tmp(path, sizeof path, "attn-st-guard-XXXXXX");
    st_file *f;
    float *dst = malloc(16384 * sizeof *dst);
    volatile int faulted = 0;
    st_guard g;
    ck_assert_ptr_nonnull(dst);
    st_guard_install();
    f = truncated_file(path);
    if (ST_GUARD(g, f)) {
        faulted = 1;
    } else {
        st_to_f32(st_find(f, "a"), dst);
        st_guard_end(&g);
    }
    ck_assert_int_eq(faulted, 1);
    /* the guard is closed: a second one works the same */
    faulted = 0;
    if (ST_GUARD(g, f))
        faulted = 1;
    else {
        st_to_f32(st_find(f, "a"), dst);
        st_guard_end(&g);
    }
    ck_assert_int_eq(faulted, 1);
    st_close(f);
    unlink(path);
    free(dst);
}
END_TEST

/* without a guard the fault still kills (Check expects SIGBUS) */
START_TEST(test_guard_unguarded_dies)
{
    char path[1024];
    tu_tmp(path, sizeof path, "attn-st-guard-XXXXXX");
    float *dst = malloc(16384 * sizeof *dst);
    st_file *f;
    st_guard_install();
    f = truncated_file(path);
    unlink(path);
    st_to_f32(st_find(f, "a"), dst);
    st_close(f);
    free(dst);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("st");
    TCase *tc = tcase_create("st");
    tcase_add_loop_test(tc, test_corpus_file, 0, N_CORPUS);
    tcase_add_test(tc, test_ok_basic);
    tcase_add_test(tc, test_ok_unordered);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_f16);
    tcase_add_test(tc, test_f16_exhaustive);
    tcase_add_test(tc, test_rows_transposed);
    tcase_add_test(tc, test_wrong_dtype_convert);
    tcase_add_test(tc, test_truncations_and_flips);
    tcase_add_test(tc, test_shape_str);
    tcase_add_test(tc, test_guard_truncated);
    tcase_add_test_raise_signal(tc, test_guard_unguarded_dies, SIGBUS);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(suite)

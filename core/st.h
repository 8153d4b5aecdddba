/*
 * st.h - safetensors files: map, validate, look up, convert to F32.
 *
 * Layout of a file: 8 bytes little-endian u64 N, then N bytes of JSON header
 * (an object: tensor name -> {"dtype", "shape", "data_offsets": [begin,
 * end]}, plus an optional "__metadata__" object of string -> string, or
 * null), then
 * the data buffer; offsets are relative to the start of the buffer.
 *
 * Validation follows the reference implementation (huggingface/safetensors):
 *   - the file holds at least the 8-byte length; N <= ST_MAX_HEADER
 *     (100 MB) and 8 + N <= file size;
 *   - the header starts with '{', is valid UTF-8 JSON, an object, without
 *     duplicate keys (trailing spaces are allowed, as writers pad with them);
 *   - every entry has a known dtype, a shape of non-negative integers and two
 *     integer data_offsets with begin <= end;
 *   - sorted by offset, tensors start at 0 and are contiguous (no gap, no
 *     overlap);
 *   - element count x dtype size = end - begin, with overflow-checked
 *     products;
 *   - the last tensor ends exactly at the end of the file.
 * Every error message starts with the file's label, names the tensor and
 * the rule broken.
 *
 * An st_file is read-only after st_open/st_parse and may be shared by
 * threads. Tensor data points into the mapping (st_open) or into the
 * caller's buffer (st_parse); it is not aligned.
 */
#ifndef ATTN_ST_H
#define ATTN_ST_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER ((uint64_t)100000000) /* header bytes, as the reference */

typedef enum st_dtype {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_N_DTYPES
} st_dtype;

typedef struct st_tensor {
    const char *name;     /* owned by the st_file */
    st_dtype dtype;
    int rank;             /* 0 for a scalar */
    const uint64_t *shape; /* (rank) */
    uint64_t count;       /* product of shape (1 for a scalar) */
    uint64_t begin, end;  /* data_offsets within the buffer */
    const unsigned char *data; /* (end - begin) bytes, unaligned */
} st_tensor;

typedef struct st_file st_file; /* opaque */

/* st_dtype_name: "F32", ...; st_dtype_size: bytes per element. */
const char *st_dtype_name(st_dtype t);
size_t st_dtype_size(st_dtype t);

/*
 * st_open: map the file at path read-only and validate it. On success *out
 * owns the mapping (released by st_close). Returns 0, ATTN_ENOTFOUND (no
 * such file), ATTN_EIO (cannot open, stat or map: not attnd's to read, a
 * failing disk), ATTN_EFORMAT (not a regular file, or a rule above is
 * broken), ATTN_ENOMEM (memory or descriptors); err
 * (ATTN_ERRMAX bytes, may be NULL) starts with path. Nothing is left
 * allocated on failure. Any thread.
 */
int st_open(st_file **out, const char *path, char *err);

/*
 * st_parse: the same over a buffer the caller owns (a file received over
 * HTTP). buf must stay valid and unchanged until st_close; label names it in
 * messages (e.g. "model.safetensors").
 */
int st_parse(st_file **out, const void *buf, size_t len, const char *label,
             char *err);

/* st_close: unmap and free; NULL is fine. */
void st_close(st_file *f);

/* Tensors in file order (sorted by data offset). */
size_t st_count(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, size_t i);

/* st_find: the tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* st_label: the path or label given at open. */
const char *st_label(const st_file *f);

/* st_meta: the __metadata__ value for key, or NULL. st_meta_count and
 * st_meta_at iterate over all entries (in header order). */
const char *st_meta(const st_file *f, const char *key);
size_t st_meta_count(const st_file *f);
int st_meta_at(const st_file *f, size_t i, const char **key,
               const char **value);

/* st_shape_str: t's shape as "[2, 3]" ("[]" for a scalar) into buf, cap
 * bytes (cut short when it does not fit); returns buf. For messages. */
const char *st_shape_str(const st_tensor *t, char *buf, size_t cap);

/* st_file_bytes: size of the file or buffer. */
size_t st_file_bytes(const st_file *f);

/*
 * st_to_f32: convert all of t (F32, F16 or BF16) to dst, t->count floats.
 * Returns 0, or ATTN_EFORMAT when t's dtype is another one. Any thread.
 */
int st_to_f32(const st_tensor *t, float *dst);

/*
 * st_rows_to_f32: convert rows [r0, r0 + nr) of a rank-2 tensor (R, C) of
 * dtype F32/F16/BF16 to dst, either as they are, (nr, C), or transposed,
 * (C, nr). Returns 0, or ATTN_EINVAL (other dtype or rank, rows out of
 * range). Any thread.
 */
int st_rows_to_f32(const st_tensor *t, uint64_t r0, uint64_t nr,
                   int transpose, float *dst);

/* st__f16_scalar: the portable bulk F16 path (internal; st_to_f32 uses
 * F16C instructions instead where the CPU has them). Exposed for tests. */
void st__f16_scalar(const unsigned char *p, size_t n, float *dst);

/* Single-element conversions (exact; NaN and Inf are preserved). */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t b);

/*
 * Reads of a mapped file that another process truncates meanwhile (a `cp`
 * over model.safetensors while it loads) fault with SIGBUS, which kills the
 * process. st_guard_install (once, at start, before threads: the daemon's
 * main) installs a SIGBUS handler; code that reads a file's mapping opens a
 * guard with ST_GUARD(g, f), which is 0 at once and non-zero when such a
 * read faulted inside f's mapping on this thread (the guard is then closed:
 * free what the reads held and fail with ATTN_ECHANGED), and closes it with
 * st_guard_end(&g) on every path. A SIGBUS anywhere else, or without the
 * handler, still kills. Variables changed inside the guard and read after a
 * fault must be volatile. The file's header is read(), not mapped (st_open),
 * so only tensor data needs a guard.
 */
typedef struct st_guard {
    sigjmp_buf jb;
    const unsigned char *lo, *hi; /* the mapping */
    struct st_guard *prev;        /* this thread's enclosing guard */
} st_guard;
void st_guard_install(void);
void st__guard_push(st_guard *g, const st_file *f);
void st_guard_end(st_guard *g);
#define ST_GUARD(g, f) (st__guard_push(&(g), (f)), sigsetjmp((g).jb, 1))

#endif

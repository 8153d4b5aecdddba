/*
 * st.c - safetensors: map, validate (as the reference implementation does)
 * and look up; the SIGBUS guard of reads of a mapping. Conversion to F32 is
 * st_convert.c's. See st.h for the rules.
 *
 * The header is JSON, so this file uses jansson (JSON_REJECT_DUPLICATES,
 * exact lengths) although core/ otherwise uses only libc: a second,
 * hand-written JSON parser in the engine would be more code to trust, not
 * less.
 */
#include "st.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn.h"
#include "json_mem.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; add byte swaps for this host");

struct st_file {
    char *label;             /* path or caller's label */
    const unsigned char *base; /* whole file or buffer */
    size_t len;              /* bytes at base */
    void *map;               /* mmap'd region (st_open) or NULL */
    size_t map_len;
    unsigned char *head;     /* st_open: the length and header, read() (a
                                file truncated meanwhile would fault in the
                                JSON parser, past any guard); else NULL */
    json_t *root;            /* header; owns names and metadata strings */
    st_tensor *tensors;      /* (n_tensors) sorted by data offset */
    size_t n_tensors;
    uint64_t *shapes;        /* all tensors' dims, back to back */
    const char **meta_keys;  /* (n_meta) */
    const char **meta_vals;  /* (n_meta) */
    size_t n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},     [ST_U8] = {"U8", 1},
    [ST_I8] = {"I8", 1},         [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},       [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},     [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},       [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},       [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_N_DTYPES ? dtypes[t].name : "?";
}

size_t st_dtype_size(st_dtype t)
{
    return (unsigned)t < ST_N_DTYPES ? dtypes[t].size : 0;
}

static int dtype_parse(const char *s, st_dtype *out)
{
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* seterr: "<label>: <message>" into err (may be NULL). */
static void seterr(char *err, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, const char *label, const char *fmt, ...)
{
    if (!err)
        return;
    int n = snprintf(err, ATTN_ERRMAX, "%s: ", label);
    if (n < 0 || n >= ATTN_ERRMAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, ATTN_ERRMAX - (size_t)n, fmt, ap);
    va_end(ap);
}

/* quote: a printable, bounded copy of a name for messages (control bytes
 * become '?', long names are cut with "..."). */
static const char *quote(const char *s, char *buf, size_t cap)
{
    size_t i = 0, j = 0;
    for (; s[i] && j + 4 < cap; i++)
        buf[j++] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i] && j + 4 >= cap) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = 0;
    return buf;
}

#define QN 96 /* bytes kept of a tensor name in a message */

static uint64_t rd_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* get_u64: a non-negative JSON integer. */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* st_shape_str: see st.h. */
const char *st_shape_str(const st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", i ? ", " : "",
                              (unsigned long long)t->shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

/* parse_metadata: __metadata__ must be an object of string values. */
static int parse_metadata(st_file *f, json_t *meta, char *err)
{
    char q[QN];
    if (!json_is_object(meta)) {
        seterr(err, f->label,
               "__metadata__ must be an object of string values (rule: "
               "metadata)");
        return ATTN_EFORMAT;
    }
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) {
        seterr(err, f->label, "out of memory reading __metadata__");
        return ATTN_ENOMEM;
    }
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (!json_is_string(v)) {
            seterr(err, f->label,
                   "__metadata__ value of '%s' is not a string (rule: "
                   "metadata values are strings)",
                   quote(key, q, sizeof q));
            return ATTN_EFORMAT;
        }
        f->meta_keys[f->n_meta] = key;
        f->meta_vals[f->n_meta] = json_string_value(v);
        f->n_meta++;
    }
    return 0;
}

/* parse_entry: one tensor's dtype, shape and offsets into t (shape dims go
 * to dims, which has room for the entry's shape). */
static int parse_entry(st_file *f, const char *name, json_t *v, st_tensor *t,
                       uint64_t *dims, char *err)
{
    char q[QN];
    quote(name, q, sizeof q);
    t->name = name;
    t->shape = dims;
    if (!json_is_object(v)) {
        seterr(err, f->label,
               "tensor '%s': entry must be an object with dtype, shape and "
               "data_offsets (rule: tensor entry)",
               q);
        return ATTN_EFORMAT;
    }
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) {
        seterr(err, f->label,
               "tensor '%s': dtype is missing or not a string (rule: tensor "
               "entry)",
               q);
        return ATTN_EFORMAT;
    }
    if (dtype_parse(json_string_value(dt), &t->dtype) < 0) {
        char d[32];
        seterr(err, f->label,
               "tensor '%s': unknown dtype '%s' (rule: dtype; known: BOOL, "
               "U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, "
               "F32, F64, I64, U64)",
               q, quote(json_string_value(dt), d, sizeof d));
        return ATTN_EFORMAT;
    }
    if (!json_is_array(sh)) {
        seterr(err, f->label,
               "tensor '%s': shape is missing or not an array (rule: tensor "
               "entry)",
               q);
        return ATTN_EFORMAT;
    }
    t->rank = (int)json_array_size(sh);
    for (int i = 0; i < t->rank; i++)
        if (get_u64(json_array_get(sh, (size_t)i), &dims[i]) < 0) {
            seterr(err, f->label,
                   "tensor '%s': shape entry %d is not a non-negative integer "
                   "(rule: tensor entry)",
                   q, i);
            return ATTN_EFORMAT;
        }
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        get_u64(json_array_get(off, 0), &t->begin) < 0 ||
        get_u64(json_array_get(off, 1), &t->end) < 0) {
        seterr(err, f->label,
               "tensor '%s': data_offsets must be two non-negative integers "
               "[begin, end] (rule: tensor entry)",
               q);
        return ATTN_EFORMAT;
    }
    if (t->end < t->begin) {
        seterr(err, f->label,
               "tensor '%s': data_offsets [%llu, %llu] end before they begin "
               "(rule: offsets)",
               q, (unsigned long long)t->begin, (unsigned long long)t->end);
        return ATTN_EFORMAT;
    }
    /* element count and bytes, overflow-checked */
    uint64_t count = 1, bytes;
    char s[160];
    for (int i = 0; i < t->rank; i++)
        if (__builtin_mul_overflow(count, dims[i], &count)) {
            seterr(err, f->label,
                   "tensor '%s': shape %s has more elements than fit in 64 "
                   "bits (rule: size overflow)",
                   q, st_shape_str(t, s, sizeof s));
            return ATTN_EFORMAT;
        }
    if (__builtin_mul_overflow(count, (uint64_t)dtypes[t->dtype].size,
                               &bytes)) {
        seterr(err, f->label,
               "tensor '%s': shape %s x %zu bytes (%s) overflows 64 bits "
               "(rule: size overflow)",
               q, st_shape_str(t, s, sizeof s), dtypes[t->dtype].size,
               dtypes[t->dtype].name);
        return ATTN_EFORMAT;
    }
    t->count = count;
    if (bytes != t->end - t->begin) {
        seterr(err, f->label,
               "tensor '%s': dtype %s x shape %s = %llu bytes but "
               "data_offsets [%llu, %llu] hold %llu (rule: dtype x shape = "
               "byte length)",
               q, dtypes[t->dtype].name, st_shape_str(t, s, sizeof s),
               (unsigned long long)bytes, (unsigned long long)t->begin,
               (unsigned long long)t->end,
               (unsigned long long)(t->end - t->begin));
        return ATTN_EFORMAT;
    }
    return 0;
}

/* check_layout: sorted tensors start at 0, are contiguous and the last one
 * ends exactly at the end of the data buffer (data bytes long). */
static int check_layout(st_file *f, uint64_t data, char *err)
{
    char q[QN], p[QN];
    uint64_t at = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        quote(t->name, q, sizeof q);
        if (i == 0 && t->begin != 0) {
            seterr(err, f->label,
                   "tensor '%s': data_offsets begin at %llu but the first "
                   "tensor must begin at 0 (rule: offsets start at 0)",
                   q, (unsigned long long)t->begin);
            return ATTN_EFORMAT;
        }
        if (i > 0 && t->begin != at) {
            quote(f->tensors[i - 1].name, p, sizeof p);
            seterr(err, f->label,
                   "tensor '%s': data_offsets begin at %llu but the previous "
                   "tensor '%s' ends at %llu (rule: offsets contiguous, %s)",
                   q, (unsigned long long)t->begin, p,
                   (unsigned long long)at, t->begin > at ? "gap" : "overlap");
            return ATTN_EFORMAT;
        }
        if (t->end > data) {
            seterr(err, f->label,
                   "tensor '%s': data_offsets end at %llu but the file has "
                   "only %llu data byte%s; the file is truncated (rule: "
                   "tensors inside the file)",
                   q, (unsigned long long)t->end, (unsigned long long)data,
                   data == 1 ? "" : "s");
            return ATTN_EFORMAT;
        }
        at = t->end;
    }
    if (at != data) {
        seterr(err, f->label,
               "tensors end at byte %llu of the data but the file has %llu "
               "data byte%s (%llu trailing) (rule: last tensor ends at end of "
               "file)",
               (unsigned long long)at, (unsigned long long)data,
               data == 1 ? "" : "s", (unsigned long long)(data - at));
        return ATTN_EFORMAT;
    }
    return 0;
}

/* parse: validate f->base/f->len and build the tensor table; the length
 * and header come from f->head when st_open read them. */
static int parse(st_file *f, char *err)
{
    const unsigned char *b = f->head ? f->head : f->base;
    if (f->len < 8) {
        seterr(err, f->label,
               "file is %zu byte%s, too short for the 8-byte header length "
               "(rule: header length); is this a safetensors file?",
               f->len, f->len == 1 ? "" : "s");
        return ATTN_EFORMAT;
    }
    uint64_t n = rd_u64le(b);
    if (n > ST_MAX_HEADER) {
        seterr(err, f->label,
               "header length %llu exceeds the limit of %llu bytes (rule: "
               "header length); is this a safetensors file?",
               (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
        return ATTN_EFORMAT;
    }
    if (n > f->len - 8) {
        seterr(err, f->label,
               "header length %llu runs past the end of the file (%zu %s "
               "the length) (rule: header inside the file); the file "
               "is truncated or not safetensors",
               (unsigned long long)n, f->len - 8,
               f->len - 8 == 1 ? "byte follows" : "bytes follow");
        return ATTN_EFORMAT;
    }
    const char *hdr = (const char *)b + 8;
    if (n == 0 || hdr[0] != '{') {
        seterr(err, f->label,
               "header does not start with '{' (rule: header is a JSON "
               "object)");
        return ATTN_EFORMAT;
    }
    json_error_t je;
    int nomem;
    f->root = attn_json_parse(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je, &nomem);
    if (nomem) {
        seterr(err, f->label, "out of memory reading the header");
        return ATTN_ENOMEM;
    }
    if (!f->root) {
        seterr(err, f->label,
               "header is not valid JSON: %s at byte %d (rule: header JSON, "
               "duplicate keys rejected)",
               je.text, je.position);
        return ATTN_EFORMAT;
    }
    if (!json_is_object(f->root)) {
        seterr(err, f->label,
               "header is not a JSON object (rule: header is a JSON object)");
        return ATTN_EFORMAT;
    }
    /* size the tables */
    size_t n_t = 0, n_dims = 0;
    const char *key;
    json_t *v;
    json_object_foreach(f->root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        n_t++;
        json_t *sh = json_is_object(v) ? json_object_get(v, "shape") : NULL;
        if (json_is_array(sh))
            n_dims += json_array_size(sh);
    }
    f->tensors = calloc(n_t ? n_t : 1, sizeof *f->tensors);
    f->shapes = calloc(n_dims ? n_dims : 1, sizeof *f->shapes);
    if (!f->tensors || !f->shapes) {
        seterr(err, f->label, "out of memory for %zu tensors", n_t);
        return ATTN_ENOMEM;
    }
    size_t d = 0;
    int rc;
    json_object_foreach(f->root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (json_is_null(v)) /* the reference reads null as none */
                continue;
            if ((rc = parse_metadata(f, v, err)) < 0)
                return rc;
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        if ((rc = parse_entry(f, key, v, t, f->shapes + d, err)) < 0)
            return rc;
        d += (size_t)t->rank;
        f->n_tensors++;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_offset);
    uint64_t data = (uint64_t)f->len - 8 - n;
    if ((rc = check_layout(f, data, err)) < 0)
        return rc;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->base + 8 + n + f->tensors[i].begin;
    return 0;
}

static st_file *file_new(const char *label)
{
    st_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->label = strdup(label);
    if (!f->label) {
        free(f);
        return NULL;
    }
    return f;
}

int st_parse(st_file **out, const void *buf, size_t len, const char *label,
             char *err)
{
    *out = NULL;
    int rc = ATTN_ENOMEM;
    st_file *f = file_new(label ? label : "(buffer)");
    if (!f) {
        seterr(err, label ? label : "(buffer)", "out of memory");
        return ATTN_ENOMEM;
    }
    f->base = buf;
    f->len = len;
    if (!buf && len) {
        seterr(err, f->label, "NULL buffer");
        rc = ATTN_EINVAL;
        goto fail;
    }
    if ((rc = parse(f, err)) < 0)
        goto fail;
    *out = f;
    return 0;
fail:
    st_close(f);
    return rc;
}

/* pread_full: n bytes of fd at off into buf; the count read (short at
 * the end of the file), -1 on error. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* read_head: f->head gets the file's length field and, when the length is
 * within the limits parse checks, the header after it (parse reports the
 * rest). ATTN_ECHANGED when the file is shorter now than when mapped. */
static int read_head(st_file *f, int fd, char *err)
{
    unsigned char lenb[8];
    uint64_t n = 0;
    ssize_t got;
    if (f->len < 8)
        return 0;
    if ((got = pread_full(fd, lenb, 8, 0)) < 0) {
        seterr(err, f->label, "cannot read: %s", strerror(errno));
        return attn_errno_code(errno);
    }
    if (got == 8) {
        n = rd_u64le(lenb);
        if (n > ST_MAX_HEADER || n > f->len - 8)
            n = 0;
        if (!(f->head = malloc(8 + (size_t)n))) {
            seterr(err, f->label, "out of memory for a %llu-byte header",
                   (unsigned long long)n);
            return ATTN_ENOMEM;
        }
        memcpy(f->head, lenb, 8);
        if (n && (got = pread_full(fd, f->head + 8, (size_t)n, 8)) < 0) {
            seterr(err, f->label, "cannot read: %s", strerror(errno));
            return attn_errno_code(errno);
        }
    }
    if ((uint64_t)got < (n ? n : 8)) {
        seterr(err, f->label, "the file changed while it was read (%zu "
               "bytes when opened, fewer now): was it written over in place? "
               "Write a new file and rename it over the old one", f->len);
        return ATTN_ECHANGED;
    }
    return 0;
}

int st_open(st_file **out, const char *path, char *err)
{
    *out = NULL;
    int rc = ATTN_ENOMEM, fd = -1;
    st_file *f = file_new(path);
    if (!f) {
        seterr(err, path, "out of memory");
        return ATTN_ENOMEM;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        rc = attn_errno_code(e);
        seterr(err, path, "cannot open: %s%s", strerror(e),
               e == EACCES || e == EPERM
                   ? "; give attnd's user read permission on it"
                   : "");
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        seterr(err, path, "cannot stat: %s", strerror(errno));
        rc = ATTN_EIO;
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) { /* a folder, a FIFO: the file is wrong,
                                    not the disk */
        seterr(err, path, "not a regular file");
        rc = ATTN_EFORMAT;
        goto fail;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        seterr(err, path, "file too large to map");
        rc = ATTN_EIO;
        goto fail;
    }
    f->len = (size_t)st.st_size;
    if (f->len > 0) {
        void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = attn_errno_code(errno);
            seterr(err, path, "cannot map %zu bytes: %s", f->len,
                   strerror(errno));
            goto fail;
        }
        f->map = m;
        f->map_len = f->len;
        f->base = m;
    } else {
        f->base = (const unsigned char *)"";
    }
    if ((rc = read_head(f, fd, err)) < 0)
        goto fail;
    close(fd);
    fd = -1;
    if ((rc = parse(f, err)) < 0)
        goto fail;
    *out = f;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    st_close(f);
    return rc;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->head);
    json_decref(f->root);
    free(f->tensors);
    free(f->shapes);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->label);
    free(f);
}

size_t st_count(const st_file *f) { return f->n_tensors; }

const st_tensor *st_tensor_at(const st_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *st_label(const st_file *f) { return f->label; }
size_t st_file_bytes(const st_file *f) { return f->len; }
size_t st_meta_count(const st_file *f) { return f->n_meta; }

const char *st_meta(const st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}

int st_meta_at(const st_file *f, size_t i, const char **key,
               const char **value)
{
    if (i >= f->n_meta)
        return ATTN_ENOTFOUND;
    *key = f->meta_keys[i];
    *value = f->meta_vals[i];
    return 0;
}

/* The SIGBUS guard (st.h). One guard stack per thread; the handler leaves
 * through the innermost guard whose mapping holds the faulting address. */
static _Thread_local st_guard *guard_top;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    st_guard *g = guard_top;
    const unsigned char *a = si->si_addr;
    (void)sig;
    (void)uc;
    if (g && a >= g->lo && a < g->hi) {
        guard_top = g->prev;
        siglongjmp(g->jb, 1);
    }
    /* not a guarded read: back to the default, and the access faults again
     * and kills, as it would have */
    signal(SIGBUS, SIG_DFL);
}

void st_guard_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void st__guard_push(st_guard *g, const st_file *f)
{
    g->lo = f ? f->map : NULL;
    g->hi = f && f->map ? (const unsigned char *)f->map + f->map_len : NULL;
    g->prev = guard_top;
    guard_top = g;
}

void st_guard_end(st_guard *g)
{
    if (guard_top == g)
        guard_top = g->prev;
}

/*
 * fail_alloc.h - a Check binary's own allocation functions (header-only;
 * include it once, in the test's .c): glibc lets the executable's malloc,
 * calloc, realloc, aligned_alloc, posix_memalign and free win over libc's,
 * for the libraries' calls (jansson's, libc's strdup and fopen) too.
 *
 * While fail_at is k > 0, the k-th allocation since calls was set to 0
 * returns NULL with errno ENOMEM (-1: count, fail none); held counts the
 * blocks live. FAILING is 0 in the sanitizer builds, whose runtime replaces
 * malloc itself: there nothing fails and nothing is counted.
 */
#ifndef ATTN_FAIL_ALLOC_H
#define ATTN_FAIL_ALLOC_H

#include <errno.h>
#include <stddef.h>

/* unused by a test that only reads held, and in the sanitizer builds */
__attribute__((unused)) static long fail_at, calls, held;

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FAILING 1
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static int fails(void)
{
    if (!fail_at || ++calls != fail_at)
        return 0;
    errno = ENOMEM; /* as glibc's */
    return 1;
}

void *malloc(size_t n)
{
    void *p = fails() ? NULL : __libc_malloc(n);
    held += p != NULL;
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = fails() ? NULL : __libc_calloc(n, size);
    held += p != NULL;
    return p;
}

void *realloc(void *q, size_t n)
{
    void *p = fails() ? NULL : __libc_realloc(q, n);
    held += q == NULL && p != NULL;
    return p;
}

void *aligned_alloc(size_t align, size_t n)
{
    void *p = fails() ? NULL : __libc_memalign(align, n);
    held += p != NULL;
    return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = fails() ? NULL : __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    held++;
    *out = p;
    return 0;
}

void free(void *p)
{
    held -= p != NULL;
    __libc_free(p);
}
#else
#define FAILING 0
#endif

#endif

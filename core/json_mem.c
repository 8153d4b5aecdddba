/*
 * json_mem.c - jansson's parses when memory runs out.
 *
 * jansson answers a failed allocation inside a parse the way it answers a
 * malformed text (NULL, often with no message), and 2.14's lexer does
 * worse: it drops a byte it could not save and goes on, then walks past
 * its buffer or fails an assertion (akheron/jansson#362), which would take
 * attnd down with it. So, once attn_json_init has run, every allocation of
 * jansson's comes here, and inside attn_json_parse the parse's allocations
 * and frees are noted (the thread's lists): the first allocation that
 * fails leaves the parse at once (longjmp), every block the parse still
 * held is freed, and the caller is told it was memory, not the client's
 * text (503, not 400).
 *
 * Outside a parse, a failure is counted for the thread: a document built
 * with json_pack, json_object_set_new and json_array_append_new lacks the
 * part whose allocation failed, and json_dumps leaves out an object key it
 * could not write (2.14) yet returns the text. attn_json_dumps gives NULL
 * when anything failed since the caller's mark, so no answer goes out
 * with a part missing.
 */
#include "json_mem.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A parse's allocations and frees, each appended as it happens (no search:
 * a document nested 2,000 deep with a million values would make a search
 * per free quadratic); only a parse that runs out of memory works out which
 * blocks are still live: those allocated more often than freed. */
#define LIST_INLINE 64 /* a request's skeleton makes ~30 */

typedef struct plist {
    void **v; /* inl, or the heap once it outgrew it */
    size_t n, cap;
    void *inl[LIST_INLINE];
} plist;

static _Thread_local jmp_buf *parse_out; /* set inside attn_json_parse */
static _Thread_local plist allocs, frees;
static _Thread_local unsigned long failed; /* outside parses */

/* push: p onto l; -1 when l cannot grow */
static int push(plist *l, void *p)
{
    if (!l->v) {
        l->v = l->inl;
        l->cap = LIST_INLINE;
    }
    if (l->n == l->cap) {
        void **t = l->cap <= SIZE_MAX / 2 / sizeof *t ? malloc(2 * l->cap * sizeof *t) : NULL;
        if (!t)
            return -1;
        memcpy(t, l->v, l->n * sizeof *t);
        if (l->v != l->inl)
            free(l->v);
        l->v = t;
        l->cap *= 2;
    }
    l->v[l->n++] = p;
    return 0;
}

/* reset: l emptied, back to its inline part */
static void reset(plist *l)
{
    if (l->v && l->v != l->inl)
        free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return (x > y) - (x < y);
}

/* free_live: frees the blocks allocs holds more often than frees does (an
 * address malloc gave again after its free is in both) */
static void free_live(void)
{
    size_t i = 0, j = 0;
    if (!allocs.n)
        return;
    qsort(allocs.v, allocs.n, sizeof *allocs.v, by_address);
    if (frees.n)
        qsort(frees.v, frees.n, sizeof *frees.v, by_address);
    while (i < allocs.n) {
        uintptr_t a = (uintptr_t)allocs.v[i];
        while (j < frees.n && (uintptr_t)frees.v[j] < a)
            j++;
        if (j < frees.n && (uintptr_t)frees.v[j] == a)
            j++; /* this one was freed */
        else
            free(allocs.v[i]);
        i++;
    }
}

static void *json_malloc(size_t n)
{
    void *p = malloc(n);
    if (!parse_out) {
        failed += !p;
        return p;
    }
    if (!p || push(&allocs, p) < 0) {
        free(p);
        longjmp(*parse_out, 1);
    }
    return p;
}

static void json_free(void *p)
{
    if (parse_out && p && push(&frees, p) < 0)
        longjmp(*parse_out, 1); /* p stays live: free_live frees it */
    free(p);
}

void attn_json_init(void) { json_set_alloc_funcs(json_malloc, json_free); }

unsigned long attn_json_mark(void) { return failed; }

char *attn_json_dumps(const json_t *o, size_t flags, unsigned long mark)
{
    char *text = o ? json_dumps(o, flags) : NULL;
    if (text && failed != mark) {
        free(text);
        text = NULL;
    }
    return text;
}

json_t *attn_json_parse(const char *text, size_t len, size_t flags,
                       json_error_t *jerr, int *out_of_memory)
{
    jmp_buf out;
    json_t *o;
    *out_of_memory = 0;
    if (setjmp(out)) { /* an allocation failed: all of the parse goes */
        parse_out = NULL;
        free_live();
        reset(&allocs);
        reset(&frees);
        *out_of_memory = 1;
        return NULL;
    }
    parse_out = &out;
    o = json_loadb(text, len, flags, jerr);
    parse_out = NULL;
    reset(&allocs); /* what it allocated is o's now */
    reset(&frees);
    return o;
}

const char *attn_json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    default:
        return "null";
    }
}

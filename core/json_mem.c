/*
 * json_mem.c - jansson's parses when memory runs out.
 *
 * jansson answers a failed allocation inside a parse the way it answers a
 * malformed text (NULL, often with no message), and 2.14's lexer does
 * worse: it drops a byte it could not save and goes on, then walks past
 * its buffer or fails an assertion (akheron/jansson#362), which would take
 * attnd down with it. So, once attn_json_init has run, every allocation of
 * jansson's comes here, and inside attn_json_parse those of the parse are
 * noted (the thread's table): the first one that fails leaves the parse
 * at once (longjmp), everything the parse allocated is freed, and the
 * caller is told it was memory, not the client's text (503, not 400).
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
#include <stdlib.h>
#include <string.h>

#define NOTED_INLINE 64 /* a request's skeleton needs ~30 */

static _Thread_local jmp_buf *parse_out; /* set inside attn_json_parse */
/* this parse's allocations: noted_inline, or noted_heap once it outgrew it */
static _Thread_local void *noted_inline[NOTED_INLINE];
static _Thread_local void **noted_heap;
static _Thread_local size_t n_noted, noted_cap = NOTED_INLINE;
static _Thread_local unsigned long failed; /* outside parses */

static void **noted(void) { return noted_heap ? noted_heap : noted_inline; }

/* note: p joins this parse's table; -1 when the table cannot grow */
static int note(void *p)
{
    if (n_noted == noted_cap) {
        size_t cap = 2 * noted_cap;
        void **t = malloc(cap * sizeof *t);
        if (!t)
            return -1;
        memcpy(t, noted(), n_noted * sizeof *t);
        free(noted_heap);
        noted_heap = t;
        noted_cap = cap;
    }
    noted()[n_noted++] = p;
    return 0;
}

/* forget: this parse's table, emptied (and back to its inline part) */
static void forget(void)
{
    free(noted_heap);
    noted_heap = NULL;
    noted_cap = NOTED_INLINE;
    n_noted = 0;
}

static void *json_malloc(size_t n)
{
    void *p = malloc(n);
    if (!parse_out) {
        failed += !p;
        return p;
    }
    if (!p || note(p) < 0) {
        free(p);
        longjmp(*parse_out, 1);
    }
    return p;
}

static void json_free(void *p)
{
    void **t = noted();
    size_t i;
    if (parse_out && p) /* the lexer frees what it outgrew: the newest */
        for (i = n_noted; i-- > 0;)
            if (t[i] == p) {
                t[i] = t[--n_noted];
                break;
            }
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
        for (size_t i = 0; i < n_noted; i++)
            free(noted()[i]);
        forget();
        *out_of_memory = 1;
        return NULL;
    }
    parse_out = &out;
    o = json_loadb(text, len, flags, jerr);
    parse_out = NULL;
    forget(); /* what it allocated is o's now */
    return o;
}

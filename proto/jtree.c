/*
 * jtree.c - the skeleton of an infer request (jscan.c) as a tree the
 * decoder reads.
 *
 * The skeleton of a request is a few hundred bytes, yet parsing it with
 * jansson took 3 of the 5 us a sequence step's whole decode took (its
 * lexer reads byte by byte through a stream, and every value, key and
 * object table is an allocation of its own). The scanner has already
 * checked the grammar and the nesting, so most skeletons are read here in
 * one pass into one arena: ASCII strings without escapes, integers of at
 * most 18 digits, objects without a duplicate key. Anything else (an
 * escape, a non-ASCII byte, a longer integer, a real, a duplicate key)
 * goes to jansson as before, whose tree is then copied into the same
 * shape: the text jansson accepts, and its messages for the text it
 * refuses, stay jansson's. That way holds jansson's tree and the copy at
 * once, until the copy is made: up to about twice the estimate that
 * bounds a skeleton (JSON_VALUE_COST in decode.c), for a moment.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/json_mem.h"
#include "oip_internal.h"

/* ---- the arena ------------------------------------------------------------ */

#define BLOCK_BYTES 4096 /* a step's skeleton fits in one */

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(8) char data[]; /* nothing in a tree needs more */
} block;

/* take: n bytes of t's arena. Small pieces come from the head block; a
 * piece over BLOCK_BYTES / 8 that does not fit gets a block of its own,
 * kept behind the head, so a block is never left more than an eighth
 * unused (one block each for a run of 2 KiB strings would be twice the
 * estimate that bounds the tree, JSON_VALUE_COST in decode.c). */
static void *take(oip__jtree *t, size_t n)
{
    block *b = t->blocks;
    n = (n + 7) & ~(size_t)7;
    if (!b || b->cap - b->used < n) {
        int own = b && n > BLOCK_BYTES / 8;
        size_t cap = own || n > BLOCK_BYTES ? n : BLOCK_BYTES;
        block *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->cap = cap;
        if (own) { /* behind the head, full */
            nb->next = b->next;
            b->next = nb;
            nb->used = n;
            return nb->data;
        }
        nb->next = b;
        t->blocks = b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void oip__jtree_free(oip__jtree *t)
{
    while (t->blocks) {
        block *b = t->blocks;
        t->blocks = b->next;
        free(b);
    }
    t->root = NULL;
}

static char *copy_str(oip__jtree *t, const char *s, size_t n)
{
    char *d = take(t, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* ---- the fast pass -------------------------------------------------------- */

enum { OK = 0, SLOW = 1, NOMEM = 2 };

typedef struct pass {
    oip__jtree *t;
    const char *s, *end;
    oip__jv **stack; /* members of the open arrays and objects: inl, or
                        the heap once it outgrew it */
    size_t n, cap;
    int spaced; /* whitespace seen outside strings */
    int depth;  /* arrays and objects open */
    oip__jv *inl[64];
} pass;

static void ws(pass *p)
{
    const char *s0 = p->s;
    while (p->s < p->end &&
           (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t'))
        p->s++;
    p->spaced |= p->s != s0;
}

/* plain_string: p->s at '"'; an ASCII string without escapes, or SLOW */
static int plain_string(pass *p, const char **s, size_t *n)
{
    const char *q = ++p->s;
    while (q < p->end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c == '\\' || c < 0x20 || c > 0x7e)
            return SLOW;
        q++;
    }
    if (q >= p->end)
        return SLOW;
    *s = p->s;
    *n = (size_t)(q - p->s);
    p->s = q + 1;
    return OK;
}

static int push(pass *p, oip__jv *v)
{
    if (p->n == p->cap) {
        size_t cap = 2 * p->cap;
        oip__jv **s = malloc(cap * sizeof *s);
        if (!s)
            return NOMEM;
        memcpy(s, p->stack, p->n * sizeof *s);
        if (p->stack != p->inl)
            free(p->stack);
        p->stack = s;
        p->cap = cap;
    }
    p->stack[p->n++] = v;
    return OK;
}

static int by_key(const void *a, const void *b)
{
    const oip__jv *x = *(oip__jv *const *)a, *y = *(oip__jv *const *)b;
    return strcmp(x->key, y->key);
}

/* has_duplicate: do the n members at m share a key? (m is reordered) */
static int has_duplicate(oip__jv **m, size_t n)
{
    if (n <= 8) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (m[i]->klen == m[j]->klen && !strcmp(m[i]->key, m[j]->key))
                    return 1;
        return 0;
    }
    qsort(m, n, sizeof *m, by_key);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(m[i]->key, m[i - 1]->key))
            return 1;
    return 0;
}

static int value(pass *p, oip__jv *v);

/* members: the values (keyed, for an object) up to close, into v->kids.
 * The grammar is checked as it goes (a text the scanner has not seen may
 * come here: oip__json_compact_object); anything off is SLOW. */
static int members(pass *p, oip__jv *v, char close)
{
    size_t base = p->n;
    int rc;
    if (++p->depth > OIP_MAX_DEPTH)
        return SLOW; /* jansson's own bound says what is wrong */
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == close) {
        p->depth--;
        p->s++;
        return OK; /* empty */
    }
    for (;;) {
        oip__jv *m = take(p->t, sizeof *m);
        if (!m)
            return NOMEM;
        memset(m, 0, sizeof *m);
        if (v->type == OIP__JOBJ) {
            const char *k;
            if (p->s >= p->end || *p->s != '"')
                return SLOW;
            if ((rc = plain_string(p, &k, &m->klen)))
                return rc;
            if (!(m->key = copy_str(p->t, k, m->klen)))
                return NOMEM;
            ws(p);
            if (p->s >= p->end || *p->s != ':')
                return SLOW;
            p->s++;
            ws(p);
        }
        if ((rc = value(p, m)) || (rc = push(p, m)))
            return rc;
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            ws(p);
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            break;
        }
        return SLOW;
    }
    v->len = p->n - base;
    if (!(v->kids = take(p->t, v->len * sizeof *v->kids)))
        return NOMEM;
    memcpy(v->kids, p->stack + base, v->len * sizeof *v->kids);
    if (v->type == OIP__JOBJ && has_duplicate(p->stack + base, v->len))
        return SLOW; /* jansson says where */
    p->n = base;
    p->depth--;
    return OK;
}

static int word(pass *p, const char *w, size_t n)
{
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n))
        return SLOW;
    p->s += n;
    return OK;
}

static int value(pass *p, oip__jv *v)
{
    if (p->s >= p->end)
        return SLOW;
    switch (*p->s) {
    case '{':
        v->type = OIP__JOBJ;
        return members(p, v, '}');
    case '[':
        v->type = OIP__JARR;
        return members(p, v, ']');
    case '"': {
        const char *s;
        int rc = plain_string(p, &s, &v->len);
        if (rc)
            return rc;
        v->type = OIP__JSTR;
        return (v->str = copy_str(p->t, s, v->len)) ? OK : NOMEM;
    }
    case 't':
        v->type = OIP__JTRUE;
        return word(p, "true", 4);
    case 'f':
        v->type = OIP__JFALSE;
        return word(p, "false", 5);
    case 'n':
        v->type = OIP__JNULL;
        return word(p, "null", 4);
    default: {
        const char *q = p->s;
        int neg = *q == '-';
        long long x = 0;
        q += neg;
        const char *d0 = q;
        while (q < p->end && *q >= '0' && *q <= '9')
            q++;
        if (q == d0 || q - d0 > 18 || (*d0 == '0' && q - d0 > 1) ||
            (neg && *d0 == '0') ||
            (q < p->end && (*q == '.' || *q == 'e' || *q == 'E')))
            return SLOW; /* a real, an integer jansson bounds or writes
                            otherwise (-0 is 0), or no number */
        for (const char *d = d0; d < q; d++)
            x = 10 * x + (*d - '0');
        v->type = OIP__JINT;
        v->num = neg ? -x : x;
        p->s = q;
        return OK;
    }
    }
}

/* ---- jansson's tree, copied ----------------------------------------------- */

static int copy(oip__jtree *t, json_t *j, oip__jv *v)
{
    memset(v, 0, sizeof *v);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        size_t i = 0;
        v->type = OIP__JOBJ;
        v->len = json_object_size(j);
        if (v->len && !(v->kids = take(t, v->len * sizeof *v->kids)))
            return NOMEM;
        json_object_foreach(j, k, x) {
            oip__jv *m = take(t, sizeof *m);
            int rc;
            if (!m)
                return NOMEM;
            if ((rc = copy(t, x, m)))
                return rc;
            m->klen = strlen(k);
            if (!(m->key = copy_str(t, k, m->klen)))
                return NOMEM;
            v->kids[i++] = m;
        }
        return OK;
    }
    case JSON_ARRAY:
        v->type = OIP__JARR;
        v->len = json_array_size(j);
        if (v->len && !(v->kids = take(t, v->len * sizeof *v->kids)))
            return NOMEM;
        for (size_t i = 0; i < v->len; i++) {
            int rc;
            if (!(v->kids[i] = take(t, sizeof *v->kids[i])))
                return NOMEM;
            if ((rc = copy(t, json_array_get(j, i), v->kids[i])))
                return rc;
        }
        return OK;
    case JSON_STRING:
        v->type = OIP__JSTR;
        v->len = json_string_length(j);
        return (v->str = copy_str(t, json_string_value(j), v->len)) ? OK : NOMEM;
    case JSON_INTEGER:
        v->type = OIP__JINT;
        v->num = json_integer_value(j);
        return OK;
    case JSON_REAL:
        v->type = OIP__JREAL;
        v->real = json_real_value(j);
        return OK;
    case JSON_TRUE:
        v->type = OIP__JTRUE;
        return OK;
    case JSON_FALSE:
        v->type = OIP__JFALSE;
        return OK;
    default:
        v->type = OIP__JNULL;
        return OK;
    }
}

/* one_pass: text as a tree in t, in one pass (p->spaced tells whether it
 * had whitespace outside strings); OK, SLOW or NOMEM (t to be freed) */
static int one_pass(pass *p, oip__jtree *t, const char *text, size_t len)
{
    oip__jv *root;
    int rc;
    p->t = t;
    p->s = text;
    p->end = text + len;
    p->stack = p->inl;
    p->n = 0;
    p->cap = sizeof p->inl / sizeof p->inl[0];
    p->spaced = 0;
    p->depth = 0;
    t->blocks = NULL;
    t->root = NULL;
    if (!(root = take(t, sizeof *root)))
        return NOMEM;
    memset(root, 0, sizeof *root);
    ws(p);
    rc = value(p, root);
    ws(p);
    if (p->stack != p->inl)
        free(p->stack);
    if (!rc && p->s != p->end)
        rc = SLOW;
    if (!rc)
        t->root = root;
    return rc;
}

int oip__jtree_parse(oip__jtree *t, const char *text, size_t len, char *err)
{
    pass p;
    oip__jv *root;
    int rc;
    t->blocks = NULL;
    t->root = NULL;
    rc = oip__jtree_slow ? SLOW : one_pass(&p, t, text, len);
    if (rc == OK)
        return 0;
    oip__jtree_free(t);
    if (rc == SLOW) {
        json_error_t jerr;
        int nomem;
        json_t *j = attn_json_parse(text, len, JSON_REJECT_DUPLICATES, &jerr, &nomem);
        if (!j)
            return nomem ? oip__fail(err, ATTN_ENOMEM, "request body: out of memory")
                         : oip__fail(err, ATTN_EINVAL, "request body: invalid JSON: %s",
                                     jerr.text);
        root = take(t, sizeof *root);
        rc = root ? copy(t, j, root) : NOMEM;
        json_decref(j);
        if (rc == OK) {
            t->root = root;
            return 0;
        }
        oip__jtree_free(t);
    }
    return oip__fail(err, ATTN_ENOMEM, "request body: out of memory");
}

int oip__json_compact_object(const char *text, size_t len)
{
    pass p;
    oip__jtree t;
    int rc = one_pass(&p, &t, text, len);
    int yes = rc == OK && !p.spaced && t.root->type == OIP__JOBJ;
    oip__jtree_free(&t);
    return yes;
}

int oip__jtree_slow;

const oip__jv *oip__jget(const oip__jv *o, const char *key)
{
    if (!o || o->type != OIP__JOBJ)
        return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (!strcmp(o->kids[i]->key, key))
            return o->kids[i];
    return NULL;
}

const oip__jv *oip__jat(const oip__jv *a, size_t i)
{
    return a && a->type == OIP__JARR && i < a->len ? a->kids[i] : NULL;
}

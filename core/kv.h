/*
 * kv.h - keys and values a sequence keeps between forward passes (the K/V
 * cache of a decoder), in fixed-size pages from a pool bounded in bytes.
 *
 * A page holds page_tokens consecutive tokens of one sequence, every kv
 * head: K as (n_kv_heads, page_tokens, head_dim) then V as (n_kv_heads,
 * page_tokens, v_head_dim), in the pool's dtype (FP32, or FP16/BF16 at half
 * the bytes, widened to FP32 when the engine reads them). Keys are stored
 * after bias and RoPE, values after bias: exactly what a pass over the
 * whole history would compute. A sequence grows page by page: nothing it
 * holds is ever copied.
 *
 * Bytes per token per sequence = n_kv_heads * (head_dim + v_head_dim) *
 * (4 for FP32, 2 for FP16/BF16); a page is page_tokens of those.
 *
 * The life of a step (see attn_seq.kv in attn.h): attn_kv_reserve(kv, t)
 * before the pass makes room for t more tokens (or fails, changing
 * nothing); the pass writes rows len .. len+t-1 and never touches len; then
 * attn_kv_advance(kv, t) on success, or attn_kv_trim(kv) on failure, which
 * gives back the pages the reservation took: a failed step leaves the
 * sequence exactly as it was.
 *
 * Threads: pool calls (create/destroy excepted) may come from any thread
 * (one mutex). One attn_kv is used by one thread or one plan at a time.
 */
#ifndef ATTN_KV_H
#define ATTN_KV_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* Element type of the stored keys and values. */
typedef enum attn_kv_dtype {
    ATTN_KV_F32 = 0,
    ATTN_KV_F16 = 1,  /* IEEE half, round to nearest even */
    ATTN_KV_BF16 = 2, /* bfloat16, round to nearest even */
} attn_kv_dtype;

/* Tokens per page when attn_kv_pool_create is given 0: large enough that a
 * page is a few GEMM-sized blocks of keys, small enough that a short
 * sequence wastes little (at most one partly used page per sequence). */
#define ATTN_KV_PAGE_TOKENS 64

typedef struct attn_kv_pool attn_kv_pool; /* opaque */

/* One sequence's cache. Initialise with attn_kv_init; read len and the
 * byte count freely; everything else belongs to kv.c and the engine. */
typedef struct attn_kv {
    attn_kv_pool *pool;
    int len;      /* tokens held: rows 0 .. len-1 are valid */
    int n_pages;  /* pages held: room for n_pages * page_tokens tokens */
    int cap;      /* slots in pages[] */
    void **pages; /* (cap) page bases, the first n_pages in use */
} attn_kv;

/*
 * attn_kv_pool_create: a pool for layers of shape cfg (n_kv_heads,
 * head_dim, v_head_dim are used), pages of page_tokens tokens (0 =
 * ATTN_KV_PAGE_TOKENS), at most max_bytes of pages held by sequences at
 * once. Pages are allocated on demand and kept on a free list for reuse.
 * Returns 0, or ATTN_EINVAL/ATTN_EOVERFLOW/ATTN_ENOMEM with err.
 */
int attn_kv_pool_create(attn_kv_pool **out, const attn_config *cfg,
                        attn_kv_dtype dtype, int page_tokens, size_t max_bytes,
                        char *err);

/* attn_kv_pool_destroy: frees the pool and its free pages; every attn_kv
 * of the pool must have been freed first. NULL is fine. */
void attn_kv_pool_destroy(attn_kv_pool *p);

/* attn_kv_pool_shed: frees the pages kept for reuse that no reservation
 * took since the previous shed (or the pool's creation) and returns their
 * bytes: called every few seconds, it keeps what a sequence ending and
 * another starting reuse, and gives back (to malloc; malloc_trim then to
 * the kernel) what an idle pool would sit on, up to FREE_KEEP pages. Any
 * thread. */
size_t attn_kv_pool_shed(attn_kv_pool *p);

/* attn_kv_pool_kept: bytes of the pages kept for reuse (freed by
 * sequences, not yet shed): memory the process holds that
 * attn_kv_pool_used does not count and malloc_trim cannot give back.
 * attn_kv_pool_held: bytes of every page the pool holds (used + kept) and,
 * in *peak, the most it held since the previous call (or the pool's
 * creation), a rise and fall between two calls included. Any thread. */
size_t attn_kv_pool_kept(const attn_kv_pool *p);
size_t attn_kv_pool_held(attn_kv_pool *p, size_t *peak);

/* Bytes of pages held by sequences now; the budget; one page; one token. */
size_t attn_kv_pool_used(const attn_kv_pool *p);
size_t attn_kv_pool_budget(const attn_kv_pool *p);
size_t attn_kv_page_bytes(const attn_kv_pool *p);
int attn_kv_page_tokens(const attn_kv_pool *p);
attn_kv_dtype attn_kv_pool_dtype(const attn_kv_pool *p);

/* attn_kv_token_bytes: bytes one token of one sequence takes in a cache of
 * this shape and dtype (the memory arithmetic of the README). */
size_t attn_kv_token_bytes(const attn_config *cfg, attn_kv_dtype dtype);

/* attn_kv_dtype_name / attn_kv_dtype_parse: "f32", "f16", "bf16".
 * parse returns 0 or ATTN_EINVAL. */
const char *attn_kv_dtype_name(attn_kv_dtype d);
int attn_kv_dtype_parse(const char *name, attn_kv_dtype *out);

/* attn_kv_init: an empty cache of pool (no allocation). */
void attn_kv_init(attn_kv *kv, attn_kv_pool *pool);

/*
 * attn_kv_reserve: room for t more tokens (len + t). Takes pages from the
 * pool; ATTN_EFULL when the pool's budget cannot hold them, ATTN_ENOMEM
 * when malloc fails, ATTN_EOVERFLOW when len + t overflows int: on failure
 * nothing changed. err names the budget.
 */
int attn_kv_reserve(attn_kv *kv, int t, char *err);

/* attn_kv_advance: the pass wrote t more rows: len += t (within what was
 * reserved). */
void attn_kv_advance(attn_kv *kv, int t);

/* attn_kv_trim: give back every page past the one holding row len - 1
 * (after a failed step, or to shrink). */
void attn_kv_trim(attn_kv *kv);

/*
 * A step that replaces a sequence's tail (the server's
 * parameters.sequence_position): attn_kv_rewind(kv, n, t, save, u) makes
 * the next pass write from row n (0 <= n <= len). The rows [n, min(len,
 * n + t)) that a pass of t tokens overwrites are first copied, as stored,
 * into save (attn_kv_rewind_bytes(kv, n, t) bytes, the caller's; NULL when
 * that is 0), then len becomes n; reserve t tokens as for any step. After
 * the pass: on success attn_kv_advance(kv, t) and attn_kv_trim(kv) (pages
 * past the new end go back); on failure attn_kv_rewind_undo(kv, u) (the
 * rows and len as they were) and attn_kv_trim(kv). The caller frees save
 * after either. Returns 0, or ATTN_EINVAL with err, nothing changed. A
 * zeroed u holds nothing: undo is then a no-op.
 */
typedef struct attn_kv_undo {
    int held;   /* 1 after a rewind, until its undo */
    int len;    /* len before the rewind */
    int r0, r1; /* the rows saved */
    void *rows; /* the caller's save */
} attn_kv_undo;
size_t attn_kv_rewind_bytes(const attn_kv *kv, int n, int t);
int attn_kv_rewind(attn_kv *kv, int n, int t, void *save, attn_kv_undo *u,
                   char *err);
void attn_kv_rewind_undo(attn_kv *kv, attn_kv_undo *u);

/* attn_kv_free: every page back to the pool; kv is empty (len 0) and may
 * be reused. */
void attn_kv_free(attn_kv *kv);

/* attn_kv_bytes: bytes of the pages kv holds. */
size_t attn_kv_bytes(const attn_kv *kv);

/*
 * attn_kv_read: copy rows [r0, r1) of kv head h into k (r1 - r0, head_dim)
 * and v (r1 - r0, v_head_dim) as FP32 (either may be NULL). For tests,
 * tools and the k/v outputs; rows must be < len + reserved room.
 */
void attn_kv_read(const attn_kv *kv, int h, int r0, int r1, float *k,
                  float *v);

#endif

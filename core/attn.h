/*
 * attn.h - the attention engine: multi-head scaled dot-product attention.
 *
 *   Q = X W_q (+ b_q)   K = C W_k (+ b_k)   V = C W_v (+ b_v)   (C = X: self)
 *   A = softmax((Q * scale) K^T + M)          row-wise, max-subtracted
 *   O = A V ;  Y = concat_heads(O) W_o (+ b_o)
 *
 * H query heads and H_kv key/value heads (H_kv divides H); query head h
 * reads key/value head h / (H / H_kv) (the repeat_interleave convention of
 * GQA/MQA). scale defaults to 1/sqrt(d_k) (rounded to float once, the
 * head_dim ** -0.5 of PyTorch). q is scaled before the product, in
 * PyTorch's order (nn.MultiheadAttention, F._scaled_dot_product_attention
 * scale q, then multiply): the float rounding of a score is theirs, and a
 * q . k past FLT_MAX whose scaled score fits is a score like any other.
 *
 * RoPE (rope_theta > 0) rotates q and k of every head after the bias, on
 * the first rot = rope_dims (or head_dim) dims, in the rotate_half
 * convention (HF Llama/GPT-NeoX): dim i pairs with dim i + rot/2 for
 * i < rot/2, freq_i = theta^(-2i/rot), angle = pos * freq_i with pos the
 * row index (0-based) of the query in x or of the key in context (both in
 * float32, rounded as HF Llama rounds them: kernel.c),
 *   x'[i] = x[i] cos - x[i + rot/2] sin,  x'[i + rot/2] = x[i + rot/2] cos
 *   + x[i] sin;  dims rot..head_dim-1 are left as they are.
 *
 * A batch is a list of sequences (attn_seq), each with its own lengths, mask
 * and output buffers, so the daemon can batch requests of different T and
 * have every output written straight into its own response buffer. A dense
 * [B, T, ...] request is B sequences whose buffers are consecutive slices.
 *
 * One forward pass is an attn_plan: a short list of stages, each cut into
 * independent tiles (row blocks for the projections, sequence x head x
 * query-block for attention). Tiles of one stage may run in any order on any
 * thread; a stage starts only when the previous one has finished. Callers
 * with their own pool (the daemon's libuv pool) drive the plan tile by tile;
 * attn_forward() drives it with an attn_exec (see exec.h) or on the calling
 * thread. No tile ever waits for another.
 *
 * Thread-safety: an attn_plan is used by one forward pass; its tiles may run
 * concurrently. Config and weights are read-only and may be shared by any
 * number of concurrent plans.
 */
#ifndef ATTN_ATTN_H
#define ATTN_ATTN_H

#include <stddef.h>
#include <stdint.h>

struct attn_kv; /* kv.h */

/* Error codes: every fallible call returns 0 or one of these. */
enum {
    ATTN_OK = 0,
    ATTN_EINVAL = -1,    /* bad argument: size, NULL buffer, inconsistency */
    ATTN_ENOMEM = -2,    /* allocation failed */
    ATTN_EOVERFLOW = -3, /* a size product does not fit in size_t */
    ATTN_EFORMAT = -4,   /* malformed file or data (safetensors, config) */
    ATTN_EIO = -5,       /* read/open/map failed */
    ATTN_ENOTFOUND = -6, /* missing file, tensor or key */
    ATTN_ERANGE = -7,    /* a result is not finite: inputs overflow float32 */
    ATTN_EFULL = -8,     /* a byte budget (the K/V pool's, a request's) cannot take it */
    ATTN_ECHANGED = -9,  /* a mapped file was truncated while being read */
};

/* Callers pass a buffer of ATTN_ERRMAX bytes (or NULL) to receive a message
 * for humans naming the offending argument. */
#define ATTN_ERRMAX 512

/* attn_strerror: short fixed text for an error code; never NULL. */
const char *attn_strerror(int code);

/* attn_errno_code: the code for a failed open, read or map's errno e:
 * ATTN_ENOTFOUND for a missing file, ATTN_ENOMEM when memory or file
 * descriptors ran out (it may work later), else ATTN_EIO. */
int attn_errno_code(int e);

/* Hyper-parameters of one attention layer. */
typedef struct attn_config {
    int d_model;     /* width of x rows and of y rows */
    int d_model_ctx; /* width of context rows (== d_model for self-attention;
                        0 means d_model) */
    int n_heads;     /* H: query heads */
    int n_kv_heads;  /* H_kv: key/value heads; divides H */
    int head_dim;    /* d_k: query/key width per head */
    int v_head_dim;  /* d_v: value width per head */
    float scale;     /* q's scale before Q K^T; 0 means 1/sqrt(head_dim) */
    float rope_theta; /* RoPE base; 0 means no RoPE */
    int rope_dims;   /* rotated dims per head (even, <= head_dim); 0 = head_dim */
} attn_config;

/* One layer's weights, in the seeds' orientation (Q = X W_q). Read-only;
 * the engine never frees them. Biases are optional (NULL). */
typedef struct attn_weights {
    const float *w_q; /* (d_model, n_heads * head_dim) */
    const float *w_k; /* (d_model_ctx, n_kv_heads * head_dim) */
    const float *w_v; /* (d_model_ctx, n_kv_heads * v_head_dim) */
    const float *w_o; /* (n_heads * v_head_dim, d_model) */
    const float *b_q; /* (n_heads * head_dim) or NULL */
    const float *b_k; /* (n_kv_heads * head_dim) or NULL */
    const float *b_v; /* (n_kv_heads * v_head_dim) or NULL */
    const float *b_o; /* (d_model) or NULL */
    int layout;       /* ATTN_ROWS (0) or ATTN_PANELS, see below; zero-
                         initialise the struct ({0} or designated fields)
                         so that it is ATTN_ROWS unless you set it */
} attn_weights;

/*
 * How w_q, w_k, w_v and w_o are stored. ATTN_ROWS: row-major, the shapes
 * above. ATTN_PANELS: a matrix of `width` columns is cut into column panels
 * of attn_panel_cols(cfg, which) columns (the last one narrower when they
 * do not divide width), stored one after another, each row-major with
 * its own width as row stride: element (i, j) of a (rows, width) matrix
 * with panels of pw columns is at (j / pw) * pw * rows + i * w + j % pw,
 * w the width of j's panel. A batch's projections are tiles of exactly
 * these columns, and a tile of few rows (decoder steps) then reads its
 * weights in order instead of one short row every width * 4 bytes (every
 * such row falls in the same few cache sets). Same results either way;
 * panels of any other width give wrong results (nothing can check that).
 */
enum { ATTN_ROWS = 0, ATTN_PANELS = 1 };
enum { ATTN_W_Q, ATTN_W_K, ATTN_W_V, ATTN_W_O };

/* attn_panel_cols: columns per panel of matrix `which` (ATTN_W_*) of a
 * layer with configuration c: whole heads of ~256 columns for W_q, W_k and
 * W_v, 256 for W_o, never more than the matrix's width. c must have passed
 * attn_config_check. */
int attn_panel_cols(const attn_config *c, int which);

/* attn_weights_to_panels: the four matrices of a layer with configuration
 * c (attn_config_check passed), row-major, m[ATTN_W_Q .. ATTN_W_O],
 * rewritten in place as attn_panel_cols's panels; set layout = ATTN_PANELS
 * in the attn_weights that points at them. Needs a temporary copy of the
 * largest one: 0, or ATTN_ENOMEM (nothing changed). */
int attn_weights_to_panels(const attn_config *c, float *const m[4],
                           char *err);

/* attn_to_panels: m, a (rows, width) row-major matrix, rewritten in place
 * as panels of pw columns (pw >= 1; pw >= width leaves m as it is, one
 * panel); tmp holds rows * width floats (unused then: may be NULL). */
void attn_to_panels(float *m, size_t rows, size_t width, size_t pw,
                    float *tmp);

/*
 * One sequence of a batch. Rows past t_valid (queries) or s_valid (keys) are
 * padding: padded keys get weight 0, padded query rows get all-zero outputs
 * (y, attention, and O). All masks combine: a key j is visible to query i
 * when j < s_valid, i < t_valid, (!causal || j <= i) and (!mask || mask[i*s+j]).
 * A query row with no visible key gets zero weights and a zero output: its
 * attention row, its O row and its y row are all 0 (y is 0, not b_o), the
 * same as a padded row. causal is top-left aligned when s != t (key j
 * visible to query i when j <= i), as torch's is_causal / triu mask.
 * Scores are written for every (i, j), masked or not.
 *
 * Inputs are read-only. Output pointers are optional except y; each one that
 * is non-NULL is filled completely (padding included) and is produced only
 * then: attention and scores are materialised only when asked for.
 *
 * A decoder step (kv non-NULL): the sequence already holds s_past =
 * kv->len tokens' keys and values. The t new rows of x are queries at
 * positions s_past .. s_past + t - 1 (RoPE), their K/V are written into kv
 * at those rows, and they attend over all s = s_past + t keys; causal is
 * bottom-right aligned (key j visible to query i when j <= s_past + i).
 * context must be NULL, t_valid == t, s == s_past + t, s_valid == s, k and
 * v NULL (the keys live in kv: attn_kv_read); mask, when given, is (t, s);
 * attention and scores are (n_heads, t, s). Room for the t rows must have
 * been reserved (attn_kv_reserve) before attn_plan_create; the pass does
 * not change kv->len (attn_kv_advance after it succeeded, attn_kv_trim
 * after a failure). A plan may hold many kv sequences, never one twice.
 */
typedef struct attn_seq {
    int t;       /* query rows in x (and in the outputs) */
    int s;       /* key rows in context; must equal t when context is NULL */
    int t_valid; /* valid query rows, 0 <= t_valid <= t */
    int s_valid; /* valid key rows, 0 <= s_valid <= s */
    int causal;  /* nonzero: key j visible to query i only when j <= i */

    const float *x;       /* (t, d_model) */
    const float *context; /* (s, d_model_ctx), or NULL for self-attention */
    const uint8_t *mask;  /* (t, s), nonzero = may attend; or NULL */

    float *y;         /* (t, d_model) required */
    float *attention; /* (n_heads, t, s) softmax weights, masked exactly 0 */
    float *scores;    /* (n_heads, t, s) (Q * scale) K^T before any mask */
    float *q;         /* (n_heads, t, head_dim) after bias and RoPE */
    float *k;         /* (n_kv_heads, s, head_dim) after bias and RoPE */
    float *v;         /* (n_kv_heads, s, v_head_dim) */

    struct attn_kv *kv; /* NULL, or the sequence's K/V cache (kv.h) */
} attn_seq;

/*
 * Raw scaled dot-product attention (the daemon's built-in `sdpa` model): no
 * projections, no RoPE. One attn_raw is n_heads independent heads over the
 * same t, s and mask; y is (n_heads, t, v_head_dim). Used through
 * attn_plan_create_raw(), where cfg gives n_heads, head_dim, v_head_dim and
 * scale (d_model, n_kv_heads, rope are ignored). A batch [B, H, ...] is
 * n_heads = H and B items, or n_heads = B * H and one item when all share
 * the mask. Every query row is valid (no padding); a fully masked row
 * still gets zero weights and zero output.
 */
typedef struct attn_raw {
    int t, s;                 /* query rows, key rows */
    int causal;               /* as in attn_seq */
    const float *q;           /* (n_heads, t, head_dim) */
    const float *k;           /* (n_heads, s, head_dim) */
    const float *v;           /* (n_heads, s, v_head_dim) */
    const uint8_t *mask;      /* (t, s) or NULL; shared by all heads */
    float *y;                 /* (n_heads, t, v_head_dim) required */
    float *attention;         /* (n_heads, t, s) or NULL */
    float *scores;            /* (n_heads, t, s) or NULL */
} attn_raw;

/* attn_config_check: validates sizes (positive, H_kv | H, rope_dims even and
 * <= head_dim, products fit in size_t). 0 or ATTN_EINVAL/EOVERFLOW with a
 * message in err naming the field. */
int attn_config_check(const attn_config *cfg, char *err);

/* attn_config_scale: the scale q is multiplied by, as the engine resolves
 * it: cfg->scale, or for 0 1/sqrt(head_dim) rounded to float once
 * (PyTorch's head_dim ** -0.5). Any thread. */
float attn_config_scale(const attn_config *cfg);

typedef struct attn_plan attn_plan; /* opaque: one forward pass */

/*
 * attn_plan_create: checks every argument (sizes, NULL buffers, overflow of
 * every size product) and allocates the pass's scratch. On success *out owns
 * the scratch; cfg, w and seqs must stay valid until attn_plan_destroy.
 * Returns 0, or a negative code with a message in err; nothing is allocated
 * on failure. Any thread.
 */
int attn_plan_create(attn_plan **out, const attn_config *cfg,
                     const attn_weights *w, const attn_seq *seqs, int n_seqs,
                     char *err);

/* attn_plan_create_raw: the same for raw SDPA items (see attn_raw). */
int attn_plan_create_raw(attn_plan **out, const attn_config *cfg,
                         const attn_raw *items, int n_items, char *err);

/* Stages run in order 0..n-1; the tiles of a stage are independent. */
int attn_plan_n_stages(const attn_plan *p);
size_t attn_plan_n_tiles(const attn_plan *p, int stage);

/* attn_plan_run_tile: computes one tile. May run concurrently with any other
 * tile of the same stage, on any thread. Cannot fail (all checks happened at
 * create); an out-of-range stage or tile is ignored. A tile needs about
 * 130 KB of stack (the fused kernel's 128 x 256 score block). GEMMs inside
 * a tile are single-threaded: plan creation and the executor's workers
 * call openblas_set_num_threads(1) when OpenBLAS is linked. */
void attn_plan_run_tile(attn_plan *p, int stage, size_t tile);

/* attn_plan_destroy: frees the scratch; NULL is fine. */
void attn_plan_destroy(attn_plan *p);

/* Bytes of scratch the plan holds (for memory budgets and benchmarks):
 * per sequence Q, K, V and the concatenated heads O, plus the RoPE table;
 * linear in t and s (no t x s buffer); a raw plan's is its items' q times
 * scale. */
size_t attn_plan_scratch_bytes(const attn_plan *p);

/* attn_plan_item_bytes: what a plan allocates for one sequence of t query
 * rows over s keys (raw = 0), or one raw item (raw = 1), beside the
 * batch's scratch above: its tiles and bookkeeping, and a raw item's q
 * times scale (its whole share of a raw plan's scratch). An upper bound,
 * for a server's per-request memory limits; SIZE_MAX on overflow or bad
 * arguments. Any thread. */
size_t attn_plan_item_bytes(const attn_config *cfg, int t, int s, int raw);

/* Floating-point operations of the pass, about (projections and both
 * attention GEMMs; causal masks not discounted): for schedulers, metrics
 * and benchmarks. */
double attn_plan_flops(const attn_plan *p);

/* attn_plan_nonfinite: after the plan ran, 1 when some projection, score
 * or output of item (a sequence, or a raw item) came out Inf or NaN: its
 * finite inputs (or the weights) overflow float32, or a step's keys or
 * values overflow its FP16 / BF16 K/V pages, and its outputs mean
 * nothing; 0 otherwise. Other items are unaffected. */
int attn_plan_nonfinite(const attn_plan *p, int item);

struct attn_exec; /* exec.h */

/* attn_batch_invariant: 1 makes a request's outputs the same bits alone
 * and in any batch, on any CPU and layer shape, without losing batching
 * (README, "Batch invariance"): a batch's projection and output GEMMs are
 * cut along its requests, a run of small ones (up to 48 rows each)
 * through a GEMM whose rows do not depend on each other (each output one
 * chain of fused multiply-adds in order: the skinny kernel on AVX-512
 * where it takes the shape, AVX2+FMA or plain C elsewhere) whatever its
 * rows, a larger one in blocks of its own. Batches then run slower: of
 * requests past 48 rows (that GEMM there, a weight read once per larger
 * request), and of any requests where the skinny kernel does not run
 * (AVX2 there: up to ~15-20% a forward pass; on a CPU without FMA plain
 * C, ~50x slower GEMMs). 0 (the default): blocks of 256 rows over the
 * whole batch, the fastest; a request's last bits can change with the
 * batch. Process-wide, any thread; each plan reads it once, when
 * created. */
void attn_batch_invariant(int on);

/* attn_forward: create a plan, run all its stages on ex (or on the calling
 * thread when ex is NULL), destroy it. Returns what attn_plan_create does,
 * or ATTN_ERANGE when an item's results are not finite (outputs written
 * anyway; err names FP16 or BF16 K/V pages when the item has them). */
int attn_forward(const attn_config *cfg, const attn_weights *w,
                 const attn_seq *seqs, int n_seqs, struct attn_exec *ex,
                 char *err);
int attn_forward_raw(const attn_config *cfg, const attn_raw *items,
                     int n_items, struct attn_exec *ex, char *err);

/* attn_plan_run: run every stage of p on ex (or the calling thread). Passes
 * of under 2 MFLOP run on the calling thread even when ex is given (waking
 * workers would cost more than the pass). */
void attn_plan_run(attn_plan *p, struct attn_exec *ex);

/* ---- BLAS ------------------------------------------------------------
 * GEMMs go to the CBLAS linked (OpenBLAS). OpenBLAS reads its thread count
 * and kernel family from the environment when it loads, before main:
 *
 * attn_blas_core: the kernel family OpenBLAS runs ("SkylakeX",
 * "Haswell", "Prescott", ...), NULL when the CBLAS is not OpenBLAS.
 * attn_blas_core_wanted: the family to ask for instead, or NULL: only
 * when OpenBLAS fell back to pre-AVX2 kernels (a CPU newer than the
 * library) on a CPU with AVX-512 ("SkylakeX") or AVX2 + FMA ("Haswell"),
 * and OPENBLAS_CORETYPE is not set (the caller's choice wins).
 * attn_blas_reexec: call first in main: when OPENBLAS_NUM_THREADS is unset
 * (OpenBLAS's own threads would spin beside the executor's) or a family is
 * wanted, sets them (1 thread; the family), adds glibc.malloc.hugetlb=1 to
 * GLIBC_TUNABLES unless it names that tunable (malloc asks for transparent
 * huge pages: large buffers fault in 2 MiB at a time), and execs the
 * program again by its own path; returns only when there is nothing to do
 * or the exec failed. */
const char *attn_blas_core(void);
const char *attn_blas_core_wanted(void);
void attn_blas_reexec(char **argv);

#endif

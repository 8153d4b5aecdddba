/*
 * plan.h - internal: the insides of an attn_plan, shared by attn.c (which
 * builds plans and runs them) and tiles.c (the tiles). Not public API.
 *
 * A full-layer plan projects the new rows of every sequence of the batch
 * together: X is the (T, d_model) matrix of all their x rows (the one
 * sequence's x, or a gathered copy), C the (Cn, d_model_ctx) matrix of all
 * rows keys and values come from (x rows of self-attention and decoder
 * steps, context rows of cross-attention); Q, K, V, O are the batch-wide
 * projections and concatenated heads, and each sequence's slices are
 * consecutive rows of them. One GEMM per weight matrix and tile (a block
 * of rows x a block of columns) reads each weight once per batch. With
 * attn_batch_invariant on, row blocks follow the sequences (attn.c's
 * put_grid), so that each one's rows meet the same kernel alone and
 * batched (batch invariance).
 *
 * Stages: [gather, when the batch has several sequences] -> project
 * (Q, K, V tiles) -> attend (sequence x head x query block, or sequence x
 * kv head for one-token decoder steps) -> output (W_o tiles).
 */
#ifndef ATTN_PLAN_H
#define ATTN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "kvpage.h"

enum { TILE_GATHER, TILE_PROJ, TILE_ATT, TILE_GROUP, TILE_OUT, TILE_RAW };
enum { MAT_Q, MAT_K, MAT_V };

typedef struct tile {
    int kind;   /* TILE_* */
    int item;   /* sequence or raw item; the matrix (MAT_*) of proj tiles */
    int head;   /* query head (ATT, RAW), first head of a group (GROUP),
                   1 for the context rows of a gather tile */
    int r0, r1; /* rows [r0, r1) */
    int c0, c1; /* columns [c0, c1) of proj and output tiles */
    int fma_rows; /* proj and output tiles: rows of small requests only,
                     through attn__rows_fma (attn.c's put_grid) */
} tile;

/* A sequence's rows in the batch matrices. */
typedef struct seqbuf {
    int xoff;      /* first row in X, Q, O, Y */
    int coff;      /* first row in C, K, V */
    int past;      /* tokens its K/V cache held before: kv->len, or 0 */
    int crows;     /* rows in C: s, or t for a decoder step */
    const float *ctx; /* its context rows (context, or x) */
} seqbuf;

#define PLAN_MAX_STAGES 4

struct attn_plan {
    attn_config cfg; /* resolved: scale, rope_dims, d_model_ctx set */
    attn_weights w;
    const attn_seq *seqs; /* (n_items) full layer, or NULL */
    const attn_raw *raw;  /* (n_items) raw SDPA, or NULL */
    int n_items;
    seqbuf *buf; /* (n_items) full layer only */
    /* batch matrices (full layer only) */
    int T, Cn;          /* rows of X and of C */
    const float *X, *C; /* (T, d_model), (Cn, d_model_ctx) */
    float *Xg, *Cg;     /* gathered copies, or NULL when X / C alias input */
    float *Q, *K, *V, *O; /* (T, H*dk), (Cn, Hkv*dk), (Cn, Hkv*dv), (T, H*dv) */
    float *Y;           /* (T, d_model): scratch, or seqs[0].y */
    int *qpos, *kpos;   /* (T), (Cn) each row's row of rope (its
                         * position's, attn.c's rope_spans) */
    int *qseq, *kseq;   /* (T), (Cn) the sequence of each row */
    uint8_t *live;      /* (T) 1 when the query row sees at least one key */
    float *rope;        /* (positions, rope_dims): cos | sin, or NULL */
    float **rawq;       /* (n_items) raw only: item i's q times scale,
                         * (n_heads, t, head_dim), each tile its rows */
    int n_stages;
    tile *tiles[PLAN_MAX_STAGES];
    size_t n_tiles[PLAN_MAX_STAGES];
    void *slab; /* every float of scratch */
    size_t scratch_bytes;
    double flops; /* floating-point operations of the pass (about) */
    int *bad;     /* (n_items) 1 once a value of the item is not finite */
};

/* attn__run_tile: one tile of any kind (tiles.c). */
void attn__run_tile(attn_plan *p, const tile *tl);

#endif

/*
 * stats.h - the counters the metrics and /v2/models/stats report: a
 * model's requests and batches, its sequences, HTTP answers by status.
 * Kept by the loop thread; metrics.c prints them.
 */
#ifndef ATTND_STATS_H
#define ATTND_STATS_H

#include <stddef.h>
#include <stdint.h>

#define SRV_BATCH_BUCKETS 8 /* batch size histogram: 1,2,4,...,64,+Inf */
#define SRV_BATCH_STATS 64  /* batch sizes /v2/models/stats keeps in place */

/* A batch size past SRV_BATCH_STATS: how many batches ran and their time. */
typedef struct srv_batch_stat {
    int size;
    uint64_t count, infer_ns;
} srv_batch_stat;

/* Counters of one model, Triton's statistics names in spirit. Loop thread. */
typedef struct srv_stats {
    uint64_t success, fail_bad, fail_rejected, fail_timeout, fail_other;
    uint64_t inference_count; /* sequences computed */
    uint64_t exec_count;      /* batches run */
    uint64_t inline_count;    /* requests run on the loop thread (sched.c) */
    uint64_t abandoned;       /* batches whose rest was skipped (batch.c) */
    uint64_t undecoded;       /* requests answered before their decode (sched.c) */
    uint64_t success_ns, fail_ns, queue_ns;
    uint64_t input_ns, infer_ns, output_ns; /* decode, compute, encode */
    /* the compute of each successful request's batch, once per request
     * (Triton's inference_stats.compute_infer); infer_ns: once per batch */
    uint64_t req_infer_ns;
    uint64_t last_inference_ms;             /* unix ms, 0 = never */
    uint64_t batch_le[SRV_BATCH_BUCKETS];   /* cumulative-free counts */
    uint64_t batch_count, batch_sum;
    /* per batch size 1..SRV_BATCH_STATS, and the larger ones seen (one
     * request's batch may hold any number of sequences), by size */
    uint64_t size_count[SRV_BATCH_STATS], size_infer_ns[SRV_BATCH_STATS];
    srv_batch_stat *more; /* (n_more) malloc'd, sizes ascending */
    size_t n_more, cap_more;
} srv_stats;

/* Why a sequence went away (seq.h); srv_drop_name: the metrics label and
 * log word of each (seq_drops.c). */
enum { SRV_DROP_IDLE, SRV_DROP_DELETED, SRV_DROP_UNLOADED, SRV_DROP_RESTARTED,
       SRV_DROP_N };
extern const char *const srv_drop_name[SRV_DROP_N];

/* Why a sequence's step was answered 503 by the sequences themselves
 * (seq.c), the label of attnd_sequence_steps_refused_total: its model's
 * K/V cache full (kv-bytes), or max-sequences live or starting. */
enum { SRV_REFUSE_KV_FULL, SRV_REFUSE_MAX_SEQUENCES, SRV_REFUSE_N };

/* Counters of one model's sequences (seq.c; loop thread). */
typedef struct srv_seq_stats {
    uint64_t started, ended, dropped[SRV_DROP_N];
    uint64_t refused[SRV_REFUSE_N]; /* steps answered 503, by why */
    uint64_t rewound, rewound_tokens; /* steps below the length, tokens replaced */
    int live;
} srv_seq_stats;

/* HTTP answers by status class for attnd_http_responses_total. */
typedef struct srv_http_stats {
    uint64_t by_status[600];
    uint64_t grpc_codes[17]; /* gRPC calls by final status (grpc.h) */
    uint64_t grpc_msgs[17];  /* ModelStreamInfer responses: OK or error */
    uint64_t grpc_h2_errors; /* gRPC connections ended for HTTP/2 errors */
    uint64_t grpc_conns_refused; /* closed at accept: no memory-budget */
    uint64_t http_conns_refused; /* answered 503 at accept: the same */
} srv_http_stats;

/* metrics.c: srv_stats_batch counts a batch of n_seqs sequences, n_ok of
 * them computed without error, that ran infer_ns (none when n_ok < 1, as
 * Triton); srv_stats_free frees what it allocated (st->more). */
void srv_stats_batch(srv_stats *st, int n_seqs, int n_ok, uint64_t infer_ns);
void srv_stats_free(srv_stats *st);

#endif

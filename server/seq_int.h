/*
 * seq_int.h - what seq.c (arrival, turns, binding and ending of steps) and
 * seq_drops.c (drops, the sequences remembered as gone, expiry, listing,
 * set-up) share: the table of sequences and its helpers. Loop thread.
 */
#ifndef ATTND_SEQ_INT_H
#define ATTND_SEQ_INT_H

#include "server/seq.h"

#define N_BUCKETS 1024

/* How a sequence that is no longer live went (its tombstone). */
enum { GONE_NONE, GONE_ENDED, GONE_DROPPED };

/* One sequence id. It lives in the table while it is live, has steps or
 * is remembered as gone (a tombstone: at most max-sequences of them, each
 * for sequence-idle-ms, so that a step to it is told how it went); its
 * cache belongs to the instance it holds a reference on. */
struct srv_seq {
    char id[OIP_MAX_SEQ_ID];
    srv_entry *e;        /* model of its cache */
    srv_inst *inst;      /* reference held while live */
    attn_kv kv;
    int live;            /* started, not ended or dropped */
    int kill;            /* dropped while a step ran: drop when it ends */
    int kill_reason;
    srv_step *active;    /* on the model queue or in a batch */
    srv_step *qhead, *qtail; /* waiting steps, arrival order */
    uint64_t last_ns;    /* its last step's arrival at it or end (any answer) */
    char map_id[MAPS_ID_MAX]; /* its growing map, "" = none (or evicted) */
    int map_scores;      /* the map keeps scores: each step computes them */
    int retained;        /* started with retain: true */
    int expected;        /* counted in e->seq_expected (if still expect_gen) */
    uint64_t expect_gen;
    int gone;            /* GONE_*: a tombstone, in the tombs list */
    int gone_reason;     /* GONE_DROPPED: SRV_DROP_* */
    int gone_len;        /* tokens it held then */
    uint64_t gone_ns;
    srv_seq *tprev, *tnext; /* the tombs list, oldest first */
    srv_seq *hnext;
};

struct srv_seqs {
    srv *s;
    srv_seq *bucket[N_BUCKETS];
    uint64_t next_ticket;
    srv_step *dec_head, *dec_tail;  /* decoding, ticket order */
    srv_step *held_head, *held_tail; /* decoded steps, ticket order */
    int n_live, n_starting;
    srv_seq *tomb_head, *tomb_tail;
    int n_tombs;
    int walking;         /* in each_seq: tombs over the cap wait for its end */
    uv_timer_t idle;
    uint64_t sweep_ms;   /* the idle timer's period (srv_seq_init) */
    int timer_on;
};

/* what each drop reason means to a client (seq_drops.c) */
extern const char *const srv__seq_drop_why[SRV_DROP_N];

/* seq.c */
srv_seq *srv__seq_find(srv_seqs *q, const char *id);
/* srv__seq_gc: forget l when nothing refers to it any more. */
void srv__seq_gc(srv_seqs *q, srv_seq *l);
/* srv__seq_expect: l's next step is (on) or is no longer (off) expected. */
void srv__seq_expect(srv_seq *l, int on);
void srv__seq_list_remove(srv_step **head, srv_step **tail, srv_step *st);
/* srv__seq_fail: st leaves the machinery and its job answers status. */
void srv__seq_fail(srv_step *st, int status, const char *msg);

/* seq_drops.c */
/* srv__seq_release_cache: l's pages and instance reference go; not live. */
void srv__seq_release_cache(srv_seqs *q, srv_seq *l);
/* srv__seq_drop: l goes away for reason (now, or when its step ends). */
void srv__seq_drop(srv_seqs *q, srv_seq *l, int reason);
/* srv__seq_bury: remember that l, which held len tokens, went (GONE_*;
 * reason for a drop); srv__seq_unbury: no longer (live again). */
void srv__seq_bury(srv_seqs *q, srv_seq *l, int gone, int reason, int len);
void srv__seq_unbury(srv_seqs *q, srv_seq *l);
/* srv__seq_gone_msg: the 400 (or 409) of step st whose sequence id is not
 * live (l: its tombstone, or NULL); returns the status. */
int srv__seq_gone_msg(char *msg, size_t n, const char *id, const srv_seq *l,
                      const srv_step *st);

#endif

/*
 * memtrim.c - memory attnd no longer holds goes back to the kernel within
 * seconds of a burst's end, so that its resident size (what a pod's limit,
 * an autoscaler on memory and the node's other pods see) falls with it.
 *
 * Without it nothing did: glibc keeps what is freed inside its arenas (the
 * K/V pages, retained maps and bodies under the 16 MiB mmap threshold come
 * from them) and gives back only the top of an arena past 64 MiB
 * (main.c's malloc_keep, which keeps a growing map's memory between
 * steps); core/kv.c kept up to 256 freed K/V pages of each model for
 * reuse. 256 sequences filling a 128 MiB cache, all deleted, left 149 MiB
 * resident.
 *
 * A timer on the loop, every TICK_MS (unreferenced: it keeps nothing
 * alive):
 *
 *   - every SHED_TICKS ticks, each K/V pool frees the pages it kept that
 *     no sequence took since the shed before (attn_kv_pool_shed): a page
 *     freed is kept 5 to 10 s, which a sequence ending and another
 *     starting reuse, then given back;
 *   - held = bytes of memory-budget in use + retained maps + K/V pages of
 *     every model's pools, those kept for reuse included (they are still
 *     malloc's, not free: a trim cannot give them back, and they leave
 *     held only when shed or freed past the pool's keep); peak = the most
 *     held since the last trim (the budget's part followed at every take,
 *     srv_mem_note_peak, the pools' at every page allocated,
 *     attn_kv_pool_held, the maps' read each tick). When peak - held (+
 *     weights of an instance freed, srv_memtrim_note) reaches
 *     TRIM_MIN_BYTES and the last tick's own fall, the pages it shed
 *     aside, was under a quarter of that (the burst is over: under steady
 *     load the memory is reused, and giving it back would fault it in
 *     again at ~3 us a KiB), malloc_trim(0) runs on a libuv pool thread:
 *     every arena's free pages go back (madvise), not only their tops.
 *     Under a load that never quiets, it runs once TRIM_LATEST_TICKS
 *     ticks have passed with that much to give.
 *
 * So after a burst, what was freed is resident at most ~TICK_MS (a drop
 * seen at the next tick, trimmed there), K/V pages kept for reuse ~SHED
 * plus a tick. attnd_memory_trims_total and attnd_memory_trim_seconds_total
 * count the trims and their time; attnd_memory_trim_running is 1 while one
 * is queued or runs on the pool (attnd_pool_jobs counts request work
 * only). Loop thread (srv_memtrim_note: any).
 */
#include "server/srv.h"

#include <malloc.h>
#include <stdatomic.h>

#include "core/kv.h"
#include "server/maps.h"

#define TICK_MS 1000
#define SHED_TICKS 5
#define TRIM_MIN_BYTES ((size_t)8 << 20)
#define TRIM_LATEST_TICKS 30

static _Atomic size_t noted; /* bytes freed that held does not see */

void srv_memtrim_note(size_t bytes)
{
    atomic_fetch_add(&noted, bytes);
}

/* each_pool: fn on every K/V pool of every instance, current or retired;
 * the sum of what it returns. */
static size_t each_pool(srv *s, size_t (*fn)(attn_kv_pool *))
{
    size_t sum = 0;
    for (srv_entry *e = s->models; e; e = e->next) {
        if (e->inst && e->inst->kv_pool)
            sum += fn(e->inst->kv_pool);
        for (srv_inst *in = e->retired; in; in = in->rnext)
            if (in->kv_pool)
                sum += fn(in->kv_pool);
    }
    return sum;
}

/* pools: the bytes of K/V pages every pool holds (sequences' and those
 * kept for reuse: malloc_trim can give back neither), and in *peak the
 * most they held since the last call (a sequence's pages taken and freed
 * between two ticks included). */
static size_t pools(srv *s, size_t *peak)
{
    size_t sum = 0, pk;
    *peak = 0;
    for (srv_entry *e = s->models; e; e = e->next) {
        if (e->inst && e->inst->kv_pool) {
            sum += attn_kv_pool_held(e->inst->kv_pool, &pk);
            *peak += pk;
        }
        for (srv_inst *in = e->retired; in; in = in->rnext)
            if (in->kv_pool) {
                sum += attn_kv_pool_held(in->kv_pool, &pk);
                *peak += pk;
            }
    }
    return sum;
}

static size_t maps_held(srv *s)
{
    size_t maps = 0, max_bytes, n;
    uint64_t evicted;
    if (s->maps)
        maps_stats(s->maps, &maps, &max_bytes, &n, &evicted);
    return maps;
}

static void trim_work(uv_work_t *w)
{
    srv *s = w->data;
    uint64_t t0 = srv_now_ns();
    malloc_trim(0);
    s->trim_ns = srv_now_ns() - t0;
}

static void trim_done(uv_work_t *w, int status)
{
    srv *s = w->data;
    (void)status;
    s->trimming = 0;
    s->trims++;
    s->trim_ns_total += s->trim_ns;
}

static void tick(uv_timer_t *t)
{
    srv *s = t->data;
    size_t shed = 0, kv_peak, kv, maps, held, tick_peak, give, recent;
    s->trim_checks++; /* the loop's thread: a scrape sees it with the tick run */
    if (++s->shed_ticks >= SHED_TICKS) { /* before held is read: its fall */
        s->shed_ticks = 0;
        shed = each_pool(s, attn_kv_pool_shed);
    }
    kv = pools(s, &kv_peak);
    maps = maps_held(s);
    held = s->mem_used + maps + kv;
    /* the pools' own peak since the last tick (shed pages included: they
     * were held until now); maps' is read at ticks only */
    tick_peak = s->mem_tick_peak + (maps > s->others_last ? maps : s->others_last) +
                kv_peak;
    s->others_last = maps;
    s->mem_tick_peak = s->mem_used;
    if (tick_peak > s->held_peak)
        s->held_peak = tick_peak;
    if (s->trimming || s->draining)
        return;
    give = s->held_peak - (held < s->held_peak ? held : s->held_peak) +
           atomic_load(&noted);
    /* the last tick's own fall, but for the shed: pages no sequence took
     * for 5 s or more are no burst still ending */
    recent = tick_peak > held + shed ? tick_peak - held - shed : 0;
    if (give < TRIM_MIN_BYTES) {
        s->trim_wait = 0;
        return;
    }
    if (recent * 4 > give && ++s->trim_wait < TRIM_LATEST_TICKS)
        return;
    atomic_store(&noted, 0);
    s->held_peak = held;
    s->trim_wait = 0;
    s->trimming = 1;
    s->trim_work.data = s;
    uv_queue_work(s->loop, &s->trim_work, trim_work, trim_done);
}

void srv_memtrim_start(srv *s)
{
    uv_timer_init(s->loop, &s->trim_timer);
    s->trim_timer.data = s;
    uv_timer_start(&s->trim_timer, tick, TICK_MS, TICK_MS);
    uv_unref((uv_handle_t *)&s->trim_timer);
}

void srv_memtrim_stop(srv *s)
{
    uv_close((uv_handle_t *)&s->trim_timer, NULL);
}

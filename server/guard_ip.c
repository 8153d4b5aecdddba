/*
 * guard_ip.c - max-connections-per-ip's count of connections per client
 * address (guard.c counts and uncounts them: guard_int.h).
 */
#include "server/guard_int.h"
#include "server/srv.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

/* Connections per client address, for max-connections-per-ip: s->ips is
 * an open-addressing table (linear probing, a seeded hash of the address)
 * with one slot per address that holds an open connection not closing
 * (ip_counted: counted when added, uncounted when shut or removed). It
 * has room for twice the connections both doors may hold together (each
 * max-connections + SRV_CONN_HEADROOM), so it is never more than half
 * full and a search ends within a few slots; a freed slot is filled back
 * from the slots after it (no tombstones). The key is the address alone
 * (port aside); an IPv4 address and an IPv6 one (IPv4-mapped or not) are
 * different clients; a connection of another family counts nowhere. */
struct srv_ip {
    uint8_t addr[16]; /* IPv4: its 4 bytes, then zeros */
    uint32_t n;       /* its connections; 0: the slot is free */
    uint8_t family;   /* AF_INET or AF_INET6 */
};

/* ip_key: k is peer's key; 0 when its family counts nowhere. */
static int ip_key(const struct sockaddr_storage *peer, struct srv_ip *k)
{
    memset(k, 0, sizeof *k);
    if (peer->ss_family == AF_INET)
        memcpy(k->addr, &((const struct sockaddr_in *)peer)->sin_addr, 4);
    else if (peer->ss_family == AF_INET6)
        memcpy(k->addr, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
    else
        return 0;
    k->family = (uint8_t)peer->ss_family;
    return 1;
}

int srv_guard_same_client(const struct sockaddr_storage *a,
                          const struct sockaddr_storage *b)
{
    struct srv_ip ka, kb;
    return ip_key(a, &ka) && ip_key(b, &kb) && ka.family == kb.family &&
           !memcmp(ka.addr, kb.addr, sizeof ka.addr);
}

/* mix: murmur3's 64-bit finalizer */
static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* ip_home: the slot k's search starts at. The seed, random at start, keeps
 * clients from choosing addresses (an IPv6 /64 gives them plenty) that
 * all land on one slot; it is not a cryptographic hash. */
static size_t ip_home(const srv *s, const struct srv_ip *k)
{
    uint64_t lo, hi;
    memcpy(&lo, k->addr, 8);
    memcpy(&hi, k->addr + 8, 8);
    return (size_t)mix(mix(s->ips_seed ^ lo) ^ hi ^ k->family) & s->ips_mask;
}

/* ip_find: the slot that holds k, or the free one where it would go. */
static size_t ip_find(const srv *s, const struct srv_ip *k)
{
    size_t i = ip_home(s, k);
    while (s->ips[i].n && (s->ips[i].family != k->family ||
                           memcmp(s->ips[i].addr, k->addr, sizeof k->addr)))
        i = (i + 1) & s->ips_mask;
    return i;
}

/* ip_free: slot i's last connection went. Each slot after it up to the
 * next free one moves back into the hole when the hole lies between its
 * home and where it stands, so that every search still finds it. */
static void ip_free(srv *s, size_t i)
{
    size_t j = i, mask = s->ips_mask;
    for (;;) {
        j = (j + 1) & mask;
        if (!s->ips[j].n)
            break;
        if (((j - ip_home(s, &s->ips[j])) & mask) >= ((j - i) & mask)) {
            s->ips[i] = s->ips[j];
            i = j;
        }
    }
    s->ips[i].n = 0;
    s->ips_used--;
}

/* ip_count: c, just linked, counts against its address. */
void ip_count(srv *s, srv_conn *c)
{
    struct srv_ip k;
    size_t i;
    c->ip_counted = 0;
    if (!s->ips || !ip_key(&c->peer, &k))
        return;
    i = ip_find(s, &k);
    if (!s->ips[i].n) {
        /* never true (sized for every connection both doors may hold); if
         * it were, c would go uncounted rather than fill the table */
        if (s->ips_used >= (s->ips_mask + 1) / 2)
            return;
        s->ips[i] = k;
        s->ips_used++;
    }
    s->ips[i].n++;
    c->ip_counted = 1;
}

/* ip_uncount: c is shut or removed: it no longer counts. */
void ip_uncount(srv *s, srv_conn *c)
{
    struct srv_ip k;
    size_t i;
    if (!c->ip_counted)
        return;
    c->ip_counted = 0;
    ip_key(&c->peer, &k);
    i = ip_find(s, &k);
    if (--s->ips[i].n == 0)
        ip_free(s, i);
}

/* ips_make: s->ips, empty, for max-connections; none when
 * max-connections-per-ip is 0 (nothing to count for). */
int ips_make(srv *s)
{
    size_t most = 2 * ((size_t)s->cfg.max_connections + SRV_CONN_HEADROOM);
    size_t n = 16;
    s->ips = NULL;
    s->ips_mask = s->ips_used = 0;
    if (!s->cfg.max_conn_per_ip)
        return 0;
    while (n < 2 * most)
        n *= 2;
    s->ips = calloc(n, sizeof *s->ips);
    if (!s->ips)
        return -1;
    s->ips_mask = n - 1;
    if (getrandom(&s->ips_seed, sizeof s->ips_seed, GRND_NONBLOCK) !=
        (ssize_t)sizeof s->ips_seed)
        s->ips_seed = srv_now_ns() ^ (uint64_t)(uintptr_t)s;
    return 0;
}

long long srv_guard__ip_count(const srv *s, const struct sockaddr_storage *peer)
{
    struct srv_ip k;
    if (!s->ips || !ip_key(peer, &k))
        return 0;
    return s->ips[ip_find(s, &k)].n;
}

size_t srv_guard__ip_home(const srv *s, const struct sockaddr_storage *peer)
{
    struct srv_ip k;
    if (!s->ips || !ip_key(peer, &k))
        return 0;
    return ip_home(s, &k);
}

int srv_guard_per_ip_full(srv *s, const struct sockaddr_storage *peer)
{
    long long limit = s->cfg.max_conn_per_ip;
    if (!limit || srv_guard__ip_count(s, peer) < limit)
        return 0;
    s->n_ip_refused++;
    s->ip_refused = *peer;
    return 1;
}

/*
 * guard_int.h - between guard.c and guard_ip.c (max-connections-per-ip's
 * table).
 */
#ifndef ATTN_GUARD_INT_H
#define ATTN_GUARD_INT_H

#include "server/srv.h"

/* ip_count: c, just linked, counts against its address; ip_uncount: c is
 * shut or removed: it no longer counts; ips_make: s->ips, empty, for
 * max-connections (none when max-connections-per-ip is 0). */
void ip_count(srv *s, srv_conn *c);
void ip_uncount(srv *s, srv_conn *c);
int ips_make(srv *s);

#endif

/*
 * registry_int.h - what registry.c (the models, their loads on the pool)
 * and registry_queue.c (the load and unload calls, one at a time per
 * model) share; not part of the daemon's API. Loop thread.
 */
#ifndef ATTND_REGISTRY_INT_H
#define ATTND_REGISTRY_INT_H

#include "server/srv.h"

/* srv_registry__start_load (registry.c): queue a load of name on the pool
 * (req: the load or upload call, whose body and share of memory-budget
 * the load takes, answered by it with the calls that joined it; NULL at
 * start), which no load of name may be running (e->busy). 0, or a negated
 * errno (ENOMEM; EMFILE, ENFILE: a new name's batch timer). */
int srv_registry__start_load(srv *s, const char *name, srv_req *req);
/* srv_registry__start_error: why srv_registry__start_load failed (its
 * negated errno), for an answer or a log line. */
const char *srv_registry__start_error(int e);
/* srv_registry__unload (registry.c): e, loaded, stops taking requests at
 * once; those already admitted finish on its weights. */
void srv_registry__unload(srv_entry *e);

/* srv_registry__answer (registry_queue.c): answer r, and each call that
 * joined it, status with {"error": msg}, or 200 without a body when msg is
 * NULL (the call changed the model). */
void srv_registry__answer(srv_req *r, int status, const char *msg);
/* srv_registry__next_turn (registry_queue.c): e's load ended: the calls
 * that waited run in the order they came, each unload at once, until one
 * starts a load (the rest wait for that one) or none is left. */
void srv_registry__next_turn(srv_entry *e);

#endif

/*
 * crash_int.h - crash_objs.c's table of loaded objects, for crash.c's
 * signal handler. Not for use outside those files.
 */
#ifndef ATTN_CRASH_INT_H
#define ATTN_CRASH_INT_H

#include <stddef.h>
#include <stdint.h>

/* Where a code address lies: strings in crash_objs.c's table or in the
 * object's own symbol names, valid for the process's life. */
typedef struct {
    const char *object; /* its path (the executable's: srv__objs_record's) */
    uintptr_t offset;   /* from the object's load address: addr2line's */
    int is_exe;         /* the object is the executable */
    const char *symbol; /* the exported function holding it, or NULL */
    uintptr_t symbol_offset; /* from that symbol's start */
} srv__place;

/* srv__objs_record: the loaded objects' names, spans and symbol tables
 * into the table (what a later srv__objs_find reads), the executable's
 * under the name exe (a string that lasts). Returns how many. Calls
 * dl_iterate_phdr: not from a signal handler; once, at start, before the
 * handler that reads the table is installed. */
size_t srv__objs_record(const char *exe);

/* srv__objs_find: where pc lies, into *p; -1 when it is in no recorded
 * object (one loaded after the record, or no code at all). Reads only the
 * table and mapped symbol tables: async-signal-safe, any thread. */
int srv__objs_find(uintptr_t pc, srv__place *p);

#endif

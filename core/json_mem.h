/* json_mem.h - jansson parses and dumps when memory runs out
 * (json_mem.c). */
#ifndef ATTN_JSON_MEM_H
#define ATTN_JSON_MEM_H

#include <jansson.h>
#include <stddef.h>

/* attn_json_init: jansson allocates through a malloc that notes failures
 * (once, before any other jansson call: main). Without it attn_json_parse
 * never reports out of memory. */
void attn_json_init(void);

/* attn_json_parse: json_loadb(text, len, flags, jerr); when it gives NULL,
 * *out_of_memory says whether an allocation of jansson's failed (then the
 * text may be fine and jerr's message is not about it). Any thread. */
json_t *attn_json_parse(const char *text, size_t len, size_t flags,
                       json_error_t *jerr, int *out_of_memory);

/* attn_json_mark: where the thread's count of failed jansson allocations
 * stands; take it before building a document. */
unsigned long attn_json_mark(void);

/* attn_json_dumps: json_dumps(o, flags) (free the text); NULL when o is
 * NULL or an allocation of jansson's failed on this thread since mark,
 * building o or dumping it: the text would lack that part. */
char *attn_json_dumps(const json_t *o, size_t flags, unsigned long mark);

/* attn_json_kind: what j is, for "expected a JSON object, got ...":
 * "an object", "an array", "a string", "a number", "true", "false",
 * "null". Any thread. */
const char *attn_json_kind(const json_t *j);

#endif

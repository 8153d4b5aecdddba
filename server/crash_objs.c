/*
 * crash_objs.c - where a code address lies, for crash.c's signal handler:
 * in which loaded object (the executable, a shared library), at what
 * offset from its load address, in which of its exported functions.
 *
 * dladdr(3) answers that, but takes the dynamic loader's lock: a report
 * from a thread that faulted inside the loader, or while another thread
 * held that lock (a dlopen running a library's constructors), would wait
 * for it forever. So srv__objs_record, at start, copies what the loader
 * knows (dl_iterate_phdr: each object's name, load address, the span of
 * its PT_LOAD segments, and where its dynamic symbol table and names lie)
 * into a static table, and srv__objs_find reads only that table and the
 * symbol tables it points to, which stay mapped as long as their object:
 * no lock, no allocation. The symbols are the ones dladdr would name: an
 * object's exported (dynamic) ones, the function that contains the address.
 *
 * An object loaded after the record (a dlopen) is not in the table, and
 * srv__objs_find says it does not know the address. attnd dlopens nothing
 * itself: ldd's list is all a running daemon's /proc/PID/maps shows, and
 * the one library a first backtrace(3) would load, libgcc_s, is loaded
 * before the record (crash.c's srv_crash_init) and is in ldd's list anyway.
 * An object unloaded after the record (a dlclose) would leave its entry
 * pointing at unmapped memory; attnd unloads none.
 */
#include "server/crash_int.h"

#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

typedef ElfW(Sym) elf_sym; /* the native class's symbol */

#define MAX_OBJS 128
#define NAME_CHARS 512

typedef struct {
    char name[NAME_CHARS];
    uintptr_t base;      /* dlpi_addr: an address in the file + base */
    uintptr_t lo, hi;    /* the span of its PT_LOAD segments, in memory */
    int is_exe;          /* the program itself (dl_iterate_phdr's first) */
    const elf_sym *syms; /* (n_syms) its dynamic symbols, or NULL */
    size_t n_syms;
    const char *strs; /* (strs_len) their names */
    size_t strs_len;
} obj;

static obj objs[MAX_OBJS];
static size_t n_objs;

/* loaded: whether [p, p + n) lies inside one readable PT_LOAD segment of
 * the object info describes (where its dynamic tables must be). */
static int loaded(const struct dl_phdr_info *info, uintptr_t p, size_t n)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && p >= a &&
            n <= ph->p_memsz && p - a <= ph->p_memsz - n)
            return 1;
    }
    return 0;
}

/* at: a dynamic entry's address as memory. glibc rewrites most objects'
 * entries to memory addresses as it loads them, not those it keeps
 * read-only (the vDSO's): an address below the load address is still the
 * file's. */
static uintptr_t at(const struct dl_phdr_info *info, ElfW(Addr) p)
{
    return p < info->dlpi_addr ? info->dlpi_addr + p : p;
}

/* gnu_hash_count: how many symbols a DT_GNU_HASH table covers (the ELF
 * header does not say): past the largest bucket's start, its chain runs
 * to the entry whose low bit is set. 0 when the table is not all mapped. */
static size_t gnu_hash_count(const struct dl_phdr_info *info, uintptr_t h)
{
    if (!loaded(info, h, 16))
        return 0;
    const uint32_t *w = (const uint32_t *)h;
    uint32_t n_buckets = w[0], first = w[1], bloom_words = w[2];
    uintptr_t buckets = h + 16 + (uintptr_t)bloom_words * sizeof(ElfW(Addr));
    if (!loaded(info, buckets, (size_t)n_buckets * 4))
        return 0;
    const uint32_t *bucket = (const uint32_t *)buckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < n_buckets; i++)
        last = bucket[i] > last ? bucket[i] : last;
    if (last < first)
        return first;
    const uint32_t *chain = bucket + n_buckets;
    for (;; last++) {
        const uint32_t *c = chain + (last - first);
        if (!loaded(info, (uintptr_t)c, 4))
            return 0;
        if (*c & 1)
            return (size_t)last + 1;
    }
}

/* symbols: where o's dynamic symbols and their names lie, from its
 * PT_DYNAMIC; left NULL when something is missing or not mapped. */
static void symbols(const struct dl_phdr_info *info, obj *o)
{
    const ElfW(Dyn) *d = NULL;
    uintptr_t syms = 0, strs = 0, hash = 0, gnu = 0;
    size_t strs_len = 0, n = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            d = (const ElfW(Dyn) *)(info->dlpi_addr +
                                    info->dlpi_phdr[i].p_vaddr);
    for (; d && loaded(info, (uintptr_t)d, sizeof *d) && d->d_tag != DT_NULL;
         d++) {
        switch (d->d_tag) {
        case DT_SYMTAB:
            syms = at(info, d->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strs = at(info, d->d_un.d_ptr);
            break;
        case DT_STRSZ:
            strs_len = d->d_un.d_val;
            break;
        case DT_HASH:
            hash = at(info, d->d_un.d_ptr);
            break;
        case DT_GNU_HASH:
            gnu = at(info, d->d_un.d_ptr);
            break;
        }
    }
    if (hash && loaded(info, hash, 8))
        n = ((const uint32_t *)hash)[1]; /* nchain: one per symbol */
    else if (gnu)
        n = gnu_hash_count(info, gnu);
    if (!syms || !strs || !strs_len || !n || n > SIZE_MAX / sizeof(elf_sym) ||
        !loaded(info, syms, n * sizeof(elf_sym)) ||
        !loaded(info, strs, strs_len) || ((const char *)strs)[strs_len - 1])
        return; /* (the names' table ends in a NUL: every name does) */
    o->syms = (const elf_sym *)syms;
    o->n_syms = n;
    o->strs = (const char *)strs;
    o->strs_len = strs_len;
}

static int record_one(struct dl_phdr_info *info, size_t size, void *exe)
{
    obj *o = &objs[n_objs];
    const char *name = info->dlpi_name;
    (void)size;
    if (n_objs == MAX_OBJS)
        return 1;
    memset(o, 0, sizeof *o);
    o->lo = UINTPTR_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD)
            continue;
        o->lo = a < o->lo ? a : o->lo;
        o->hi = a + ph->p_memsz > o->hi ? a + ph->p_memsz : o->hi;
    }
    if (!o->hi)
        return 0;
    o->is_exe = n_objs == 0 && (!name || !*name);
    if (o->is_exe)
        name = exe;
    strncpy(o->name, name && *name ? name : "(an object without a name)",
            sizeof o->name - 1);
    o->base = info->dlpi_addr;
    symbols(info, o);
    n_objs++;
    return 0;
}

size_t srv__objs_record(const char *exe)
{
    n_objs = 0;
    dl_iterate_phdr(record_one, (void *)exe);
    return n_objs;
}

int srv__objs_find(uintptr_t pc, srv__place *p)
{
    const obj *o = NULL;
    for (size_t i = 0; i < n_objs && !o; i++)
        if (pc >= objs[i].lo && pc < objs[i].hi)
            o = &objs[i];
    if (!o)
        return -1;
    p->object = o->name;
    p->offset = pc - o->base;
    p->is_exe = o->is_exe;
    p->symbol = NULL;
    p->symbol_offset = 0;
    /* the defined, non-TLS, non-local symbol whose bytes hold pc (one of
     * size 0: at pc exactly), the nearest one if several do, as dladdr
     * chooses. dladdr passes over local ones (a DT_GNU_HASH table lists
     * none; with DT_HASH it takes global and weak only): on aarch64 a
     * library's .dynsym holds its .init and .data section symbols, local
     * and nameless, which would name a pc there "" */
    const elf_sym *best = NULL;
    for (size_t i = 0; i < o->n_syms; i++) {
        const elf_sym *s = &o->syms[i];
        uintptr_t a = o->base + s->st_value;
        if (s->st_shndx == SHN_UNDEF || s->st_shndx == SHN_ABS ||
            ELF64_ST_TYPE(s->st_info) == STT_TLS /* ELF32 alike */ ||
            ELF64_ST_BIND(s->st_info) == STB_LOCAL ||
            s->st_name >= o->strs_len || pc < a ||
            (s->st_size ? pc - a >= s->st_size : pc != a))
            continue;
        if (!best || s->st_value > best->st_value)
            best = s;
    }
    if (best) {
        p->symbol = o->strs + best->st_name;
        p->symbol_offset = pc - (o->base + best->st_value);
    }
    return 0;
}

/*
 * test_crash_objs.c - server/crash_objs.c names a code address as dladdr(3)
 * does, from the table srv__objs_record builds at start: each case records
 * the table (the executable under its /proc/self/exe path) and holds
 * srv__objs_find's answer for an address to dladdr1's for the same address.
 *
 * The two answers agree when:
 *   - both know the address, or neither does (dladdr 0, srv__objs_find -1);
 *   - the object is the one dladdr names (dli_fname), except the
 *     executable's: dladdr gives argv[0] for it, srv__objs_find the path it
 *     was recorded under; is_exe is set for it alone (dladdr's link map
 *     entry has an empty l_name);
 *   - offset is addr - l_addr, the load bias (RTLD_DL_LINKMAP): addr2line's.
 *     dli_fbase is the lowest mapped address, which is the bias only when
 *     the first segment is at address 0 (every shared object, a PIE);
 *   - the symbol is the one dladdr names (dli_sname), or none on both
 *     sides, and symbol_offset is addr - dli_saddr.
 *
 * Named cases (libc, libpthread's functions now in libc, libm, libraries
 * with only a GNU hash table, the test itself, the vDSO, no object) say
 * which kind of object broke. objs_fixture.c's two builds (only a GNU hash
 * table, only a SysV one; the Makefile puts them beside this binary, and
 * record() loads them before the table is built) hold the symbol shapes
 * dladdr's choice turns on, which the system's libraries may lack: nested,
 * size 0, aliases, thread-local. The sweep holds the two answers to each
 * other at every byte of each loaded segment's first 256, ~8000 addresses
 * through the rest, and the first byte, last byte, byte before and byte
 * past every symbol it meets.
 *
 * crash_objs.c is compiled in every build (ASan and TSan builds record no
 * table for crash.c, but the functions are there): the cases run in all.
 */
#include <check.h>
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "server/crash_int.h"
#include "tests/check_main.h"

static char g_exe[PATH_MAX]; /* /proc/self/exe: the name recorded for it */

/* objs_fixture.c's two builds, beside this binary (the Makefile's) */
static const char *const g_fixture_name[2] = {"objs_gnu.so", "objs_sysv.so"};
static void *g_fixture[2];

/* record: the fixtures loaded, then the table, the executable under g_exe;
 * how many objects */
static size_t record(void)
{
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    ck_assert_int_gt(n, 0);
    g_exe[n] = 0;
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s", g_exe);
        strcpy(strrchr(path, '/') + 1, g_fixture_name[i]);
        g_fixture[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        ck_assert_msg(g_fixture[i], "%s: %s (make builds it)", path, dlerror());
    }
    size_t k = srv__objs_record(g_exe);
    ck_assert_uint_gt(k, 1); /* the executable and at least libc */
    return k;
}

/* what dladdr says of an address */
typedef struct {
    int known;
    Dl_info di;
    const struct link_map *lm;
    const ElfW(Sym) * sym; /* dli_sname's entry, or NULL */
} oracle;

static oracle ask_dladdr(const void *addr)
{
    oracle o;
    memset(&o, 0, sizeof o);
    void *lm = NULL, *sym = NULL;
    o.known = dladdr1(addr, &o.di, &lm, RTLD_DL_LINKMAP) != 0;
    if (o.known && dladdr1(addr, &o.di, &sym, RTLD_DL_SYMENT))
        o.sym = sym;
    o.lm = lm;
    return o;
}

/* differs: 0 when srv__objs_find and dladdr agree on addr; else 1, and
 * what each said into why (cap bytes) */
static int differs(const void *addr, char *why, size_t cap)
{
    oracle o = ask_dladdr(addr);
    srv__place p;
    memset(&p, 0x5a, sizeof p);
    int r = srv__objs_find((uintptr_t)addr, &p);
    if (!o.known || r < 0) {
        if (!o.known && r == -1)
            return 0;
        snprintf(why, cap, "%p: dladdr %s (%s), srv__objs_find %d", addr,
                 o.known ? "knows it" : "does not know it",
                 o.known ? o.di.dli_fname : "-", r);
        return 1;
    }
    int exe = o.lm->l_name[0] == 0;
    const char *name = exe ? g_exe : o.di.dli_fname;
    uintptr_t off = (uintptr_t)addr - o.lm->l_addr;
    const char *sn = o.di.dli_sname;
    uintptr_t soff = sn ? (uintptr_t)addr - (uintptr_t)o.di.dli_saddr : 0;
    if (r == 0 && p.is_exe == exe && p.object && !strcmp(p.object, name) &&
        p.offset == off &&
        (sn ? p.symbol && !strcmp(p.symbol, sn) : p.symbol == NULL) &&
        p.symbol_offset == soff)
        return 0;
    snprintf(why, cap,
             "%p: dladdr %s+%#jx%s, %s+%#jx; srv__objs_find %d: %s+%#jx%s, "
             "%s+%#jx",
             addr, name, (uintmax_t)off, exe ? " (exe)" : "",
             sn ? sn : "(no symbol)", (uintmax_t)soff, r,
             p.object ? p.object : "(null)", (uintmax_t)p.offset,
             p.is_exe ? " (exe)" : "", p.symbol ? p.symbol : "(no symbol)",
             (uintmax_t)p.symbol_offset);
    return 1;
}

/* same: addr answered alike; what (the case) in the failure */
#define same(addr, what)                                                       \
    do {                                                                       \
        char why_[PATH_MAX + 512];                                             \
        ck_assert_msg(!differs((addr), why_, sizeof why_), "%s: %s", (what),   \
                      why_);                                                   \
    } while (0)

/* named: addr answered alike, and dladdr names a symbol there that starts
 * at start (which keeps the case from passing on two NULLs; its name may
 * be an alias: printf's is _IO_printf) */
static void named(const void *addr, const void *start, const char *what)
{
    oracle o = ask_dladdr(addr);
    ck_assert_msg(o.known && o.di.dli_sname, "%s: dladdr names no symbol",
                  what);
    ck_assert_msg(o.di.dli_saddr == start, "%s: dladdr names %s at %p", what,
                  o.di.dli_sname, o.di.dli_saddr);
    same(addr, what);
}

/* unnamed: addr answered alike, in an object but in no symbol dladdr names */
static void unnamed(const void *addr, const char *what)
{
    oracle o = ask_dladdr(addr);
    ck_assert_msg(o.known && !o.di.dli_sname, "%s: dladdr: %s, symbol %s", what,
                  o.known ? o.di.dli_fname : "no object",
                  o.known && o.di.dli_sname ? o.di.dli_sname : "none");
    same(addr, what);
}

/* symbol_edges: a named symbol's first byte (offset 0), last byte and
 * the byte past it, each answered alike */
static void symbol_edges(const void *in, const char *what)
{
    oracle o = ask_dladdr(in);
    ck_assert_msg(o.sym && o.di.dli_saddr, "%s: dladdr has no symbol", what);
    const char *start = o.di.dli_saddr;
    srv__place p;
    same(start, what);
    ck_assert_int_eq(srv__objs_find((uintptr_t)start, &p), 0);
    ck_assert_uint_eq(p.symbol_offset, 0);
    if (o.sym->st_size) {
        same(start + o.sym->st_size - 1, what);
        same(start + o.sym->st_size, what);
    }
}

/* lib: a loaded library's handle (not loading it), or NULL */
static void *lib(const char *soname)
{
    return dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
}

START_TEST(libc_functions)
{
    record();
    void *c = lib("libc.so.6");
    ck_assert_ptr_nonnull(c);
    /* libc's own, not a sanitizer's interceptor of the same name */
    const char *pf = dlsym(c, "printf"), *pc = dlsym(c, "pthread_create");
    ck_assert_ptr_nonnull(pf);
    ck_assert_ptr_nonnull(pc);
    named(pf + 1, pf, "libc printf + 1");
    named(pf, pf, "libc printf, its first byte");
    symbol_edges(pf, "libc printf's edges");
    named(pc + 7, pc, "libc pthread_create + 7");
    symbol_edges(pc, "libc pthread_create's edges");
    /* IFUNCs: what dlsym and the program's own calls reach (an
     * implementation libc may not export: then no symbol on both sides) */
    same(dlsym(c, "memcpy"), "libc memcpy (dlsym)");
    same((const char *)dlsym(c, "strlen") + 3, "libc strlen + 3 (dlsym)");
    void *(*volatile mc)(void *, const void *, size_t) = memcpy;
    size_t (*volatile sl)(const char *) = strlen;
    int (*volatile pr)(const char *, ...) = printf;
    same((const void *)mc, "memcpy as the program calls it");
    same((const char *)(uintptr_t)sl + 2, "strlen + 2 as the program calls it");
    same((const char *)(uintptr_t)pr + 1, "printf + 1 as the program calls it");
}
END_TEST

START_TEST(libm_function)
{
    record();
    double (*volatile f)(double) = cos;
    void *m = lib("libm.so.6");
    ck_assert_ptr_nonnull(m);
    const char *c = dlsym(m, "cbrt"); /* not an IFUNC, as cos is */
    ck_assert_ptr_nonnull(c);
    named(c + 4, c, "libm cbrt + 4");
    symbol_edges(c, "libm cbrt's edges");
    same((const void *)(uintptr_t)f, "cos as the program calls it");
    same((const char *)dlsym(m, "cos") + 1, "libm cos + 1 (dlsym)");
}
END_TEST

/* libsubunit (Check's) has a GNU hash table and no DT_HASH: its symbols'
 * count comes from gnu_hash_count alone; so do the sanitizer runtimes' */
START_TEST(gnu_hash_only)
{
    static const struct {
        const char *soname, *fn;
    } libs[] = {
        {"libsubunit.so.0", "subunit_test_start"},
        {"libasan.so.8", "__asan_report_load8"},
        {"libubsan.so.1", "__ubsan_handle_add_overflow"},
        {"libtsan.so.2", "__tsan_read8"},
    };
    size_t seen = 0;
    record();
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = lib(libs[i].soname);
        const char *f = h ? dlsym(h, libs[i].fn) : NULL;
        if (!f)
            continue;
        char what[128];
        snprintf(what, sizeof what, "%s %s + 5", libs[i].soname, libs[i].fn);
        named(f + 5, f, what);
        symbol_edges(f, what);
        fprintf(stderr, "gnu_hash_only: %s\n", what);
        seen++;
    }
    ck_assert_msg(seen > 0, "no library with only a GNU hash table loaded");
}
END_TEST

/* a function of the test: in the executable, not in its dynamic symbols */
__attribute__((noinline)) static void in_the_test(void)
{
    __asm__ volatile("");
}

/* objs_fixture.c's shapes, in each hash table's build */
START_TEST(fixture_symbols)
{
    record();
    for (int i = 0; i < 2; i++) {
        void *h = g_fixture[i];
        const char *outer = dlsym(h, "fx_outer"), *inner = dlsym(h, "fx_inner"),
                   *bare = dlsym(h, "fx_bare"), *alias = dlsym(h, "fx_alias_a");
        char what[128];
        ck_assert(outer && inner && bare && alias);
#define W(s) (snprintf(what, sizeof what, "%s: %s", g_fixture_name[i], s), what)
        named(outer + 1, outer, W("fx_outer + 1"));
        /* inside both: the one that starts nearest, as dladdr */
        named(inner, inner, W("fx_inner, inside fx_outer"));
        named(inner + 15, inner, W("fx_inner's last byte"));
        named(inner + 16, outer, W("past fx_inner, still in fx_outer"));
        unnamed(outer + 48, W("past fx_outer"));
        /* a symbol of size 0 holds its own address alone */
        named(bare, bare, W("fx_bare (size 0)"));
        unnamed(bare + 1, W("fx_bare + 1"));
        /* two names, one address: the first in the table, as dladdr (the
         * GNU build lists fx_alias_a first, the SysV one fx_alias_b) */
        named(alias + 3, alias, W("fx_alias_a/b + 3"));
        unnamed(alias + 16, W("past fx_alias_a/b"));
        /* fx_tls's value 0 is an offset in each thread's block: the load
         * address + 0 is the ELF header, in no symbol */
        oracle o = ask_dladdr(outer);
        unnamed((const char *)o.lm->l_addr + 8, W("load address + 8"));
#undef W
    }
}
END_TEST

START_TEST(the_executable)
{
    record();
    void (*volatile fn)(void) = in_the_test;
    const char *f = (const char *)(uintptr_t)fn;
    srv__place p;
    same(f + 1, "a function of the test");
    ck_assert_int_eq(srv__objs_find((uintptr_t)f + 1, &p), 0);
    ck_assert_int_eq(p.is_exe, 1);
    ck_assert_str_eq(p.object, g_exe);
    /* a PIE's bias is its lowest address: dladdr's dli_fbase */
    Dl_info di;
    ck_assert_int_ne(dladdr(f, &di), 0);
    if (((const ElfW(Ehdr) *)di.dli_fbase)->e_type == ET_DYN)
        ck_assert_uint_eq(p.offset, (uintptr_t)f + 1 - (uintptr_t)di.dli_fbase);
    /* and libc's printf is not the executable's */
    ck_assert_int_eq(
        srv__objs_find((uintptr_t)dlsym(lib("libc.so.6"), "printf"), &p), 0);
    ck_assert_int_eq(p.is_exe, 0);
}
END_TEST

START_TEST(the_vdso)
{
    uintptr_t ehdr = getauxval(AT_SYSINFO_EHDR);
    record();
    if (!ehdr) {
        fprintf(stderr, "the_vdso: no vDSO in this process, skipped\n");
        return;
    }
    same((const void *)ehdr, "the vDSO's ELF header");
    void *v = lib("linux-vdso.so.1");
    const char *f = v ? dlsym(v, "__vdso_clock_gettime") : NULL;
    if (!f) {
        fprintf(stderr, "the_vdso: no __vdso_clock_gettime, not named\n");
        return;
    }
    oracle o = ask_dladdr(f + 3);
    ck_assert_msg(o.known && o.di.dli_sname, "dladdr names no vDSO symbol");
    same(f + 3, "vDSO __vdso_clock_gettime + 3");
    symbol_edges(f, "vDSO __vdso_clock_gettime's edges");
}
END_TEST

START_TEST(no_object)
{
    int on_stack = 0;
    char *heap = malloc(64);
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_nonnull(heap);
    ck_assert_ptr_ne(page, MAP_FAILED);
    record();
    const void *none[] = {&on_stack, heap, (char *)page + 16, (void *)16};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        Dl_info di;
        srv__place p;
        ck_assert_msg(!dladdr(none[i], &di), "%p: dladdr knows it", none[i]);
        ck_assert_int_eq(srv__objs_find((uintptr_t)none[i], &p), -1);
    }
    munmap(page, 4096);
    free(heap);
}
END_TEST

/* the sweep: every PT_LOAD segment of every loaded object (its code, and
 * its data: dladdr names a variable too) */
typedef struct {
    size_t objects, addrs, symbols, bad;
    char first[4][PATH_MAX + 512]; /* the first mismatches */
} sweep;

static void check_at(sweep *w, const void *a)
{
    char why[sizeof w->first[0]];
    w->addrs++;
    if (differs(a, why, sizeof why) && w->bad++ < 4)
        memcpy(w->first[w->bad - 1], why, sizeof why);
}

static int sweep_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    sweep *w = arg;
    (void)size;
    w->objects++;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !ph->p_memsz)
            continue;
        const char *lo = (const char *)(info->dlpi_addr + ph->p_vaddr);
        size_t len = ph->p_memsz;
        /* every byte of its first 256 (a first segment's: the ELF header,
         * where the load address + a TLS symbol's value or an undefined
         * symbol's 0 lands) */
        for (size_t at = 0; at < len && at < 256; at++)
            check_at(w, lo + at);
        /* then ~8000 addresses, an odd step: every alignment */
        size_t step = (len / 8000) | 1;
        const char *last_sym = NULL;
        for (size_t at = 0; at < len; at += step) {
            check_at(w, lo + at);
            oracle o = ask_dladdr(lo + at);
            if (!o.sym || o.di.dli_saddr == last_sym)
                continue;
            last_sym = o.di.dli_saddr;
            w->symbols++;
            check_at(w, last_sym);
            check_at(w, (const void *)((uintptr_t)last_sym - 1));
            if (o.sym->st_size) {
                check_at(w, last_sym + o.sym->st_size - 1);
                check_at(w, last_sym + o.sym->st_size);
            }
        }
        check_at(w, lo + len - 1);
    }
    return 0;
}

START_TEST(sweep_every_object)
{
    static sweep w;
    record();
    dl_iterate_phdr(sweep_one, &w);
    fprintf(stderr,
            "\nsweep: %zu objects, %zu addresses, %zu symbols, %zu differ\n",
            w.objects, w.addrs, w.symbols, w.bad);
    for (size_t i = 0; i < w.bad && i < 4; i++)
        fprintf(stderr, "  %s\n", w.first[i]);
    ck_assert_msg(w.bad == 0, "%zu addresses named unlike dladdr; first: %s",
                  w.bad, w.first[0]);
    ck_assert_uint_gt(w.symbols, 1000); /* libc's alone: thousands */
}
END_TEST

static Suite *crash_objs_suite(void)
{
    Suite *s = suite_create("crash_objs");
    TCase *tc = tcase_create("dladdr");
    tcase_add_test(tc, libc_functions);
    tcase_add_test(tc, libm_function);
    tcase_add_test(tc, gnu_hash_only);
    tcase_add_test(tc, fixture_symbols);
    tcase_add_test(tc, the_executable);
    tcase_add_test(tc, the_vdso);
    tcase_add_test(tc, no_object);
    tcase_add_test(tc, sweep_every_object);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(crash_objs_suite)

/*
 * objs_fixture.c - a library for test_crash_objs.c, built twice: with only
 * a GNU hash table (objs_gnu.so) and with only a SysV one (objs_sysv.so),
 * so that both ways crash_objs.c counts an object's symbols are used. Its
 * exported symbols are the shapes dladdr's choice turns on, which the
 * system's libraries may not have: one function inside another, one
 * without a size followed by bytes in no symbol, two names at one address,
 * and a thread-local variable (whose value is an offset, not an address).
 * The bytes are never run.
 */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl fx_outer\n"
        ".type fx_outer, %function\n"
        "fx_outer:\n"
        ".skip 16\n"
        ".globl fx_inner\n"
        ".type fx_inner, %function\n"
        "fx_inner:\n"
        ".skip 16\n"
        ".size fx_inner, .-fx_inner\n"
        ".skip 16\n"
        ".size fx_outer, .-fx_outer\n"
        ".skip 16\n"
        ".globl fx_bare\n" /* no .size: 0 */
        ".type fx_bare, %function\n"
        "fx_bare:\n"
        ".skip 32\n"
        ".globl fx_alias_a\n"
        ".type fx_alias_a, %function\n"
        ".globl fx_alias_b\n"
        ".type fx_alias_b, %function\n"
        "fx_alias_a:\n"
        "fx_alias_b:\n"
        ".skip 16\n"
        ".size fx_alias_a, .-fx_alias_a\n"
        ".size fx_alias_b, .-fx_alias_b\n"
        ".skip 16\n");

extern __thread int fx_tls[16];
__thread int fx_tls[16];

/* test_grpc.c - the gRPC door's message prefix (server/grpc.c:
 * srv_grpc__frame): its 4-byte length says exactly the message's, up to
 * 4 GiB - 1; an answer past that is refused (SIZE_MAX, nothing written:
 * the call answers RESOURCE_EXHAUSTED), never framed with its length
 * mod 2^32, and its request's log line says so (srv_grpc__fits). No
 * message is allocated: the prefix goes in the 5 bytes before it, all a
 * frame writes. And what a slow client took of its answers
 * (srv_grpc__taken, srv_grpc__idle_left: grpc_conn.c's idle timer). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "server/grpc_int.h"
#include "server/srv.h"
#include "tests/check_main.h"

START_TEST(the_longest_message_is_framed_exactly)
{
    char buf[16];
    memset(buf, 0x55, sizeof buf);
    ck_assert_uint_eq(srv_grpc__frame(buf, 8, 0x01020304u), 3);
    ck_assert_mem_eq(buf + 3, "\0\x01\x02\x03\x04", 5);
    ck_assert_uint_eq(srv_grpc__frame(buf, 8, GRPC_MSG_MAX), 3);
    ck_assert_mem_eq(buf + 3, "\0\xff\xff\xff\xff", 5);
    ck_assert_uint_eq(srv_grpc__frame(buf, 5, 0), 0);
    ck_assert_mem_eq(buf, "\0\0\0\0\0", 5);
}
END_TEST

START_TEST(past_4_gib_is_refused_not_wrapped)
{
    char buf[16];
    size_t len[] = {GRPC_MSG_MAX + 1, (size_t)1 << 33, GRPC_MSG_MAX * 2 + 6};
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++) {
        memset(buf, 0x55, sizeof buf);
        /* 4 GiB was framed as 0 bytes, 8 GiB + 4 as 4: the message's
         * bytes then read as the next messages' */
        ck_assert_uint_eq(srv_grpc__frame(buf, 8, len[i]), SIZE_MAX);
        ck_assert_mem_eq(buf, "UUUUUUUUUUUUUUUU", 16);
    }
}
END_TEST

/* an answer too long for its message is refused (the 4 GiB it would take
 * is not made: only its length is looked at) and its request logged with
 * RESOURCE_EXHAUSTED's 413, not the 200 of the answer it was */
START_TEST(an_answer_too_long_is_logged_as_refused)
{
    static gslot sl; /* a slot's room is large: not on the stack */
    srv_req r;
    size_t ok[2] = {GRPC_MSG_MAX, GRPC_MSG_MAX - 11};
    for (int stream = 0; stream < 2; stream++) {
        memset(&sl, 0, sizeof sl);
        memset(&r, 0, sizeof r);
        sl.r = &r;
        r.status = 200;
        sl.out_len = OIP_PB_HEADROOM + ok[stream];
        ck_assert_int_eq(srv_grpc__fits(&sl, stream), 1);
        ck_assert_int_eq(sl.code, GRPC_OK);
        ck_assert_int_eq(r.status, 200);
        sl.out_len++;
        ck_assert_int_eq(srv_grpc__fits(&sl, stream), 0);
        ck_assert_int_eq(sl.code, GRPC_RESOURCE_EXHAUSTED);
        ck_assert_ptr_nonnull(strstr(sl.msg, "more than one gRPC message"));
        ck_assert_int_eq(r.status, 413); /* was 200 */
    }
    /* an error fits as it is */
    memset(&sl, 0, sizeof sl);
    memset(&r, 0, sizeof r);
    sl.r = &r;
    sl.code = GRPC_NOT_FOUND;
    r.status = 404;
    sl.out_len = (size_t)1 << 33;
    ck_assert_int_eq(srv_grpc__fits(&sl, 0), 1);
    ck_assert_int_eq(r.status, 404);
}
END_TEST

/* A client reading a large answer slowly, its window wide (it sends
 * nothing): one uv_write of WRITE_HIGH (4 MiB) is partly in the kernel,
 * whose send buffer (2.5 MB here) stays full: each tick the client has
 * read X more and libuv has given the kernel X more of the same write,
 * so SIOCOUTQ reads the same and no write has ended (written 0). The
 * formula before 442ede7 (took = written - SIOCOUTQ, wrapped, and "no
 * change" = nothing taken) saw the same figure at the second tick and
 * the client was sent GOAWAY as it read; what it takes now grows. */
START_TEST(a_steady_reader_of_a_write_partly_in_the_kernel_is_taking)
{
    const size_t w = WRITE_HIGH;
    const int q = 2500000;        /* the kernel's send buffer, full */
    uint64_t took = 0;
    /* tick 1: it read 1 MB; tick 2: 0.6 MB more; tick 3: 0.5 MB more,
     * the write now wholly in the kernel (libuv's queue empty) */
    ck_assert_int_eq(srv_grpc__taken(0, w, w - 3500000, q, &took), 1);
    ck_assert_msg(srv_grpc__taken(0, w, w - 4100000, q, &took) == 1,
                  "tick 2: the client read 0.6 MB more, not taking");
    ck_assert_uint_eq(took, 1600000);
    ck_assert_int_eq(srv_grpc__taken(0, w, 0, q - 405696, &took), 1);
    ck_assert_uint_eq(took, w - (uint64_t)(q - 405696));
    /* the write ended (on_written), the client read nothing more: not
     * taking; then it read all but 1000 bytes: taking; then the rest:
     * taking (below); then nothing more: not taking */
    ck_assert_int_eq(srv_grpc__taken(w, 0, 0, q - 405696, &took), 0);
    ck_assert_int_eq(srv_grpc__taken(w, 0, 0, 1000, &took), 1);
    ck_assert_uint_eq(took, w - 1000);
    ck_assert_int_eq(srv_grpc__taken(w, 0, 0, 0, &took), 1);
    ck_assert_uint_eq(took, w);
    ck_assert_int_eq(srv_grpc__taken(w, 0, 0, 0, &took), 0);
    ck_assert_uint_eq(took, w);
}
END_TEST

/* a client whose kernel acknowledged the last bytes of its answer since
 * the idle timer last ran (SIOCOUTQ 0, nothing in libuv's queue) took
 * them in that time: its ACK is not its read, and it may hold the
 * answer's tail unread in its receive buffer, its next call to come once
 * it has read it. Before, "nothing left to take" was not taking, and the
 * timer sent it GOAWAY then (slow_reader.test.mjs's gRPC slow readers,
 * 8 runs in 25 under load: the GOAWAY after the first call's trailers, the
 * next call never answered); it has connection-timeout from its last
 * ACK: what is left of it is the timer's next wait */
START_TEST(a_client_that_took_its_last_bytes_has_the_timeout_from_its_last_ack)
{
    uint64_t took = 1000000;
    ck_assert_int_eq(srv_grpc__taken(1440043, 0, 0, 0, &took), 1);
    ck_assert_uint_eq(took, 1440043);
    ck_assert_uint_eq(srv_grpc__idle_left(2000, 150), 1850);
    ck_assert_uint_eq(srv_grpc__idle_left(2000, 0), 2000);
    /* its last ACK a timeout ago or more: it goes now */
    ck_assert_uint_eq(srv_grpc__idle_left(2000, 2000), 0);
    ck_assert_uint_eq(srv_grpc__idle_left(2000, 90000), 0);
    /* not known (no TCP_INFO): a whole timeout */
    ck_assert_uint_eq(srv_grpc__idle_left(2000, -1), 2000);
    /* then it takes nothing more: not taking (GOAWAY) */
    ck_assert_int_eq(srv_grpc__taken(1440043, 0, 0, 0, &took), 0);
}
END_TEST

/* what it took never goes back (a reading taken between a write's end
 * and its callback, SIOCOUTQ unknown): not taking, *took kept */
START_TEST(what_was_taken_never_falls)
{
    uint64_t took = 3000000;
    ck_assert_int_eq(srv_grpc__taken(0, WRITE_HIGH, 0, 2000000, &took), 0);
    ck_assert_uint_eq(took, 3000000);
    ck_assert_int_eq(srv_grpc__taken(0, WRITE_HIGH, 0, -1, &took), 0);
    ck_assert_uint_eq(took, 3000000);
    ck_assert_int_eq(srv_grpc__taken(0, 1000, 0, 5000, &took), 0);
    ck_assert_uint_eq(took, 3000000);
}
END_TEST

static Suite *grpc_suite(void)
{
    Suite *s = suite_create("grpc");
    TCase *tc = tcase_create("frame");
    tcase_add_test(tc, the_longest_message_is_framed_exactly);
    tcase_add_test(tc, past_4_gib_is_refused_not_wrapped);
    tcase_add_test(tc, an_answer_too_long_is_logged_as_refused);
    tcase_add_test(tc, a_steady_reader_of_a_write_partly_in_the_kernel_is_taking);
    tcase_add_test(tc, what_was_taken_never_falls);
    tcase_add_test(tc, a_client_that_took_its_last_bytes_has_the_timeout_from_its_last_ack);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(grpc_suite)

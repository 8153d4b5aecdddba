/* test_web.c - the embedded visualiser files (server/web.c and the table
 * tools/embed_assets.c generates): every file of server/web/ is served byte for
 * byte, with its type and an ETag; nothing else is. Run from the repo
 * root (make check-unit does). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/web.h"
#include "tests/check_main.h"
#include "tests/tu_file.h"

START_TEST(test_root_is_index)
{
    const web_asset *a = web_asset_find("/"), *b = web_asset_find("/web/index.html");

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(a, b);
    ck_assert_str_eq(a->content_type, "text/html; charset=utf-8");
    /* relative: the page works under any prefix a proxy adds */
    ck_assert_ptr_nonnull(strstr((const char *)a->data, "\"web/app.js\""));
    ck_assert_ptr_null(strstr((const char *)a->data, "\"/web/"));
    ck_assert_int_eq(a->etag[0], '"');
    ck_assert_uint_eq(strlen(a->etag), 18);
}
END_TEST

START_TEST(test_files_match_disk)
{
    static const char *const files[][2] = {
        {"index.html", "text/html; charset=utf-8"},
        {"app.js", "text/javascript; charset=utf-8"},
        {"api.js", "text/javascript; charset=utf-8"},
        {"colormap.js", "text/javascript; charset=utf-8"},
        {"embed.js", "text/javascript; charset=utf-8"},
        {"heatmap.js", "text/javascript; charset=utf-8"},
        {"panels.js", "text/javascript; charset=utf-8"},
        {"style.css", "text/css; charset=utf-8"},
    };
    char url[128], path[128];
    size_t i, len;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const web_asset *a;
        char *disk;

        snprintf(url, sizeof(url), "/web/%s", files[i][0]);
        snprintf(path, sizeof(path), "server/web/%s", files[i][0]);
        a = web_asset_find(url);
        ck_assert_msg(a != NULL, "%s not embedded", url);
        ck_assert_str_eq(a->content_type, files[i][1]);
        disk = tu_slurp(path, &len);
        ck_assert_uint_eq(a->len, len);
        ck_assert_mem_eq(a->data, disk, len);
        free(disk);
    }
    /* Distinct contents get distinct ETags. */
    ck_assert_str_ne(web_asset_find("/web/app.js")->etag,
                     web_asset_find("/web/api.js")->etag);
}
END_TEST

START_TEST(test_nothing_else)
{
    ck_assert_ptr_null(web_asset_find("/web/nope.js"));
    ck_assert_ptr_null(web_asset_find("/web/../Makefile"));
    ck_assert_ptr_null(web_asset_find("/app.js"));
    ck_assert_ptr_null(web_asset_find("/web/app.js?x=1"));
    ck_assert_ptr_null(web_asset_find(""));
    ck_assert_ptr_null(web_asset_find(NULL));
}
END_TEST

static Suite *web_suite(void)
{
    Suite *s = suite_create("web");
    TCase *tc = tcase_create("assets");

    tcase_add_test(tc, test_root_is_index);
    tcase_add_test(tc, test_files_match_disk);
    tcase_add_test(tc, test_nothing_else);
    suite_add_tcase(s, tc);
    return s;
}

TU_MAIN(web_suite)

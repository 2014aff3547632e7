/* server/security/authz.h: the Plan install predicate over every wire shape, and
 * the admin token file's rules and comparison. */
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "authz.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cunit_main.h"

#define INSTALLS(bytes) cr_authz_plan_installs((const uint8_t *)(bytes), sizeof(bytes) - 1)

static int packed_installs(int install, int from_estimator, size_t n_rates)
{
    Cacheroute__V1__PlanRequest req = CACHEROUTE__V1__PLAN_REQUEST__INIT;
    Cacheroute__V1__SessionRate rates[4], *ptrs[4];
    for (size_t i = 0; i < n_rates; i++) {
        cacheroute__v1__session_rate__init(&rates[i]);
        rates[i].owner = -(int64_t)i - 1; /* negative: ten-byte varints */
        rates[i].rate = 1.5;
        ptrs[i] = &rates[i];
    }
    req.n_rates = n_rates;
    req.rates = ptrs;
    req.install = install;
    req.from_estimator = from_estimator;
    uint8_t buf[512];
    size_t len = cacheroute__v1__plan_request__pack(&req, buf);
    return cr_authz_plan_installs(buf, len);
}

static void test_plan_install_predicate(void)
{
    CU_ASSERT_EQUAL(cr_authz_plan_installs(NULL, 0), 0);
    CU_ASSERT_EQUAL(packed_installs(0, 1, 0), 0);
    CU_ASSERT_EQUAL(packed_installs(1, 1, 0), 1);
    CU_ASSERT_EQUAL(packed_installs(0, 0, 4), 0);
    CU_ASSERT_EQUAL(packed_installs(1, 0, 4), 1);
    CU_ASSERT_EQUAL(INSTALLS("\x20\x01"), 1);
    CU_ASSERT_EQUAL(INSTALLS("\x20\x00"), 0);
    CU_ASSERT_EQUAL(INSTALLS("\x20\x02"), 1);         /* any non-zero varint is true */
    CU_ASSERT_EQUAL(INSTALLS("\x20\x80\x01"), 1);     /* a long varint too */
    CU_ASSERT_EQUAL(INSTALLS("\x20\x01\x20\x00"), 0); /* the last one wins */
    CU_ASSERT_EQUAL(INSTALLS("\x20\x00\x20\x01"), 1);
    CU_ASSERT_EQUAL(INSTALLS("\x18\x01"), 0);         /* from_estimator */
    CU_ASSERT_EQUAL(INSTALLS("\x79\x01\x02\x03\x04\x05\x06\x07\x08\x20\x00"), 0); /* fixed64 */
    CU_ASSERT_EQUAL(INSTALLS("\x7d\x01\x02\x03\x04"), 0); /* fixed32 */
    /* Unreadable requests need an admin (the handler would refuse them anyway). */
    CU_ASSERT_EQUAL(INSTALLS("\x20"), 1);             /* truncated varint */
    CU_ASSERT_EQUAL(INSTALLS("\x12\x05\x01"), 1);     /* length past the end */
    CU_ASSERT_EQUAL(INSTALLS("\x22\x01\x01"), 1);     /* install as bytes */
    CU_ASSERT_EQUAL(INSTALLS("\x1b"), 1);             /* a group */
    CU_ASSERT_EQUAL(INSTALLS("\x79\x01\x02"), 1);     /* fixed64 cut short */
    CU_ASSERT_EQUAL(INSTALLS("\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), 1);
    CU_ASSERT_EQUAL(INSTALLS("\x80\x80\x80\x80\x80\x01\x00"), 1); /* number 2^32 */
}

static char *token_file(const char *content)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/cr-test-token-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    size_t n = strlen(content);
    if (write(fd, content, n) != (ssize_t)n)
        n = 0;
    close(fd);
    return path;
}

/* A cr_authz reading a new token file holding content; the file stays
 * (its path in *path, when asked) for the caller to rewrite and unlink. */
static cr_authz *with_token_at(const char *content, char **path, cr_error *err)
{
    char *p = token_file(content);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    cr_authz_config c = {NULL, 0, p};
    cr_authz *a = cr_authz_new(&c, err);
    if (path)
        *path = p;
    else
        unlink(p);
    return a;
}

static cr_authz *with_token(const char *content, cr_error *err)
{
    return with_token_at(content, NULL, err);
}

static void rewrite(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(content, f);
    fclose(f);
}

static int admin_with(cr_authz *a, const char *key, const char *value)
{
    grpc_metadata m = {.key = grpc_slice_from_static_string(key),
                       .value = grpc_slice_from_copied_string(value)};
    grpc_metadata_array md = {1, 1, &m};
    int r = cr_authz_is_admin(a, NULL, &md);
    grpc_slice_unref(m.value);
    return r;
}

static void test_token_file_rules(void)
{
    cr_error err;
    const char *bad[] = {"", "\n \t\n", "two words", "tab\there", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_PTR_NULL(with_token(bad[i], &err));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--admin-token-file /tmp/cr-test-token-"));
    }
    char big[CR_AUTHZ_MAX_TOKEN_BYTES + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CU_ASSERT_PTR_NULL(with_token(big, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "over 4096 bytes"));
    big[CR_AUTHZ_MAX_TOKEN_BYTES] = '\0';
    cr_authz *a = with_token(big, &err);
    CU_ASSERT_PTR_NOT_NULL(a);
    cr_authz_free(a);
    cr_authz_config c = {NULL, 0, "/nonexistent/token"};
    CU_ASSERT_PTR_NULL(cr_authz_new(&c, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--admin-token-file /nonexistent/token: cannot read"));
}

static void test_token_comparison(void)
{
    cr_error err;
    char *path;
    cr_authz *a = with_token_at("tok-123\r\n", &path, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_TRUE(cr_authz_has_admins(a));
    CU_ASSERT_TRUE(admin_with(a, "authorization", "Bearer tok-123"));
    CU_ASSERT_TRUE(admin_with(a, "authorization", "bearer tok-123"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-12"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-1234"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-123\r\n"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "tok-123"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Basic tok-123"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer "));
    CU_ASSERT_FALSE(admin_with(a, "x-authorization", "Bearer tok-123"));
    /* A rewritten file (another size) is read before the next check. */
    rewrite(path, "tok-rotated\n");
    CU_ASSERT_TRUE(admin_with(a, "authorization", "Bearer tok-rotated"));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-123"));
    CU_ASSERT_EQUAL(cr_authz_reload(a, &err), 0); /* unchanged */
    /* A bad one is refused and the last good token stays. */
    rewrite(path, "\n");
    CU_ASSERT_TRUE(admin_with(a, "authorization", "Bearer tok-rotated"));
    CU_ASSERT_EQUAL(cr_authz_reload(a, &err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "empty token"));
    rewrite(path, "tok-3");
    CU_ASSERT_EQUAL(cr_authz_reload(a, &err), 1);
    CU_ASSERT_TRUE(admin_with(a, "authorization", "Bearer tok-3"));
    unlink(path);
    cr_authz_free(a);
    /* No token, no identities: nobody is an admin. */
    cr_authz_config none = {NULL, 0, NULL};
    a = cr_authz_new(&none, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_FALSE(cr_authz_has_admins(a));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-123"));
    cr_authz_free(a);
}

static const cr_test_case authz_tests[] = {
    {"Plan install predicate on the wire", test_plan_install_predicate},
    {"token file rules", test_token_file_rules},
    {"token comparison", test_token_comparison},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"authz", authz_tests}};
CR_TEST_MAIN(suites)

/* server/security/authz.h: the admin predicates on decoded requests, and
 * the admin token file's rules and comparison. */
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "authz.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cunit_main.h"

/* The predicate asked of bytes as the handler would have them: decoded by
 * protobuf-c (-1: it refuses them, so the handler answers INVALID_ARGUMENT
 * and nothing is authorized either way). */
static int installs(const char *bytes, size_t len)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(&cacheroute__v1__plan_request__descriptor,
                                                    NULL, len, (const uint8_t *)bytes);
    if (!m)
        return -1;
    int r = cr_authz_plan_installs(m);
    CU_ASSERT_EQUAL(r, ((Cacheroute__V1__PlanRequest *)m)->install != 0);
    protobuf_c_message_free_unpacked(m, NULL);
    return r;
}
#define INSTALLS(bytes) installs((bytes), sizeof(bytes) - 1)

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
    return installs((const char *)buf, len);
}

/* The predicate reads the decoded message, so every encoding protobuf-c
 * reads as install=true needs an admin, whatever a hand scanner would make
 * of it (N1: the scanner dropped a varint's bits past 64 and saw false). */
static void test_plan_install_predicate(void)
{
    CU_ASSERT_EQUAL(INSTALLS(""), 0);
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
    /* The red team's bodies: a set bit past bit 64, and 0x7e in a tenth byte. */
    CU_ASSERT_EQUAL(INSTALLS("\x12\x0b\x08\x07\x11\x00\x00\x00\x00\x00\x00\x14\x40"
                             "\x20\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02"),
                    1);
    CU_ASSERT_EQUAL(INSTALLS("\x20\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7e"), 1);
    CU_ASSERT_EQUAL(INSTALLS("\x20\x00\x20\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02"), 1);
}

/* SelectInjection reserves unless it is a dry run. */
static void test_select_reserve_predicate(void)
{
    Cacheroute__V1__SelectInjectionRequest req = CACHEROUTE__V1__SELECT_INJECTION_REQUEST__INIT;
    CU_ASSERT_EQUAL(cr_authz_select_reserves(&req.base), 1);
    req.dry_run = 1;
    CU_ASSERT_EQUAL(cr_authz_select_reserves(&req.base), 0);
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
    cr_authz_config c = {.token_file = p};
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
    cr_authz_config c = {.token_file = "/nonexistent/token"};
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
    cr_authz_config none = {.token_file = NULL};
    a = cr_authz_new(&none, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_FALSE(cr_authz_has_admins(a));
    CU_ASSERT_FALSE(admin_with(a, "authorization", "Bearer tok-123"));
    cr_authz_free(a);
}

static const cr_test_case authz_tests[] = {
    {"Plan install predicate on the decoded request", test_plan_install_predicate},
    {"SelectInjection reserve predicate", test_select_reserve_predicate},
    {"token file rules", test_token_file_rules},
    {"token comparison", test_token_comparison},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"authz", authz_tests}};
CR_TEST_MAIN(suites)

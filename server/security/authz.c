/* Admin checks (authz.h). */
#include "authz.h"

#include <ctype.h>
#include <grpc/grpc_security.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "filesig.h"
#include "log.h"

struct cr_authz {
    char **identities;
    size_t n_identities;
    char **routers; /* --route-identity */
    size_t n_routers;
    uint64_t *tags; /* per identity then per router: cr_authz_caller's */
    uint64_t token_tag; /* the token holders' (one client): names no secret */
    char *token_path; /* NULL: no token */
    pthread_mutex_t mu; /* guards the token's digest and signature */
    int mu_ready;
    cr_filesig token_sig;           /* when the token was last read */
    unsigned char token_digest[32]; /* SHA-256 of the token */
    int revoked;                    /* the file is gone: no token is accepted */
};

static void sha256(const void *data, size_t len, unsigned char out[32])
{
    unsigned int n = 32;
    if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL))
        memset(out, 0xff, 32); /* never matches a real digest by accident */
}

/* The token in path, as its SHA-256 in digest; 0, or -1 with err set. */
static int read_token(const char *path, unsigned char digest[32], cr_error *err)
{
    char buf[CR_AUTHZ_MAX_TOKEN_BYTES + 2], label[300];
    snprintf(label, sizeof label, "--admin-token-file %s", path);
    struct stat st;
    int fd = cr_file_open(path, label, &st, err); /* a regular file, never blocking */
    if (fd < 0)
        return -1;
    /* Readable by others is how a Kubernetes Secret volume mounts it (0644,
     * the container its boundary); writable by others would let anyone set
     * the token. */
    if (st.st_mode & 022) {
        close(fd);
        cr_fail(err, CR_EINVAL,
                "%s: it is writable by group or others: anyone could set the token (mode 0%o)",
                label, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    ssize_t got = read(fd, buf, sizeof buf);
    close(fd);
    size_t n = got > 0 ? (size_t)got : 0;
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    const char *why = n == 0                         ? "empty token"
                      : n > CR_AUTHZ_MAX_TOKEN_BYTES ? "token over 4096 bytes"
                                                     : NULL;
    for (size_t i = 0; !why && i < n; i++)
        if (buf[i] <= ' ' || buf[i] > '~')
            why = "the token must be printable ASCII without spaces";
    if (!why)
        sha256(buf, n, digest);
    OPENSSL_cleanse(buf, sizeof buf);
    if (why) {
        cr_fail(err, CR_EINVAL, "--admin-token-file %s: %s", path, why);
        return -1;
    }
    return 0;
}

/* Re-reads the token; returns as cr_authz_reload. Under a->mu. */
static int reload_locked(cr_authz *a, cr_error *err)
{
    unsigned char d[32];
    cr_filesig_read(a->token_path, &a->token_sig);
    if (read_token(a->token_path, d, err) != 0)
        return -1;
    int changed = memcmp(d, a->token_digest, sizeof d) != 0 || a->revoked;
    a->revoked = 0;
    memcpy(a->token_digest, d, sizeof d);
    OPENSSL_cleanse(d, sizeof d);
    return changed;
}

static void log_reload(int rc, const char *why)
{
    if (rc > 0)
        cr_log(CR_LOG_INFO, "admin token reloaded", NULL);
    else if (rc < 0)
        cr_log(CR_LOG_ERROR, "admin token file refused, the previous token stays",
               json_pack("{s:s}", "error", why));
}

/* A rotated token file (a Secret update) is read before the next check; a
 * deleted one revokes the token until a file is back. */
static void refresh_locked(cr_authz *a)
{
    cr_filesig now;
    cr_error why;
    cr_filesig_read(a->token_path, &now);
    if (cr_filesig_same(&now, &a->token_sig))
        return;
    if (now.missing) {
        a->token_sig = now;
        a->revoked = 1;
        cr_log(CR_LOG_WARN, "admin token file gone: no token is accepted until it is back",
               json_pack("{s:s}", "file", a->token_path));
        return;
    }
    log_reload(reload_locked(a, &why), why.msg);
}

int cr_authz_reload(cr_authz *a, cr_error *err)
{
    if (!a || !a->token_path)
        return 0;
    pthread_mutex_lock(&a->mu);
    int rc = reload_locked(a, err);
    pthread_mutex_unlock(&a->mu);
    log_reload(rc, err->msg);
    return rc;
}

/* A copy of n strings in *out, counted in *n_out; 0, or -1. */
static int copy_list(char *const *in, size_t n, char ***out, size_t *n_out)
{
    if (n && !(*out = calloc(n, sizeof **out)))
        return -1;
    for (; *n_out < n; ++*n_out)
        if (!((*out)[*n_out] = strdup(in[*n_out])))
            return -1;
    return 0;
}

/* 64 bits of a text's SHA-256, never 0. */
static uint64_t tag_of(const char *s)
{
    unsigned char d[32];
    uint64_t t;
    sha256(s, strlen(s), d);
    memcpy(&t, d, sizeof t);
    return t ? t : 1;
}

cr_authz *cr_authz_new(const cr_authz_config *c, cr_error *err)
{
    cr_authz *a = calloc(1, sizeof *a);
    size_t n = c->n_identities + c->n_route_identities;
    int ok = a && copy_list(c->identities, c->n_identities, &a->identities, &a->n_identities) == 0 &&
             copy_list(c->route_identities, c->n_route_identities, &a->routers, &a->n_routers) == 0 &&
             (a->tags = calloc(n ? n : 1, sizeof *a->tags));
    for (size_t i = 0; ok && i < n; i++)
        a->tags[i] = tag_of(i < a->n_identities ? a->identities[i]
                                                : a->routers[i - a->n_identities]);
    if (ok)
        a->token_tag = tag_of("--admin-token-file");
    if (!ok) {
        cr_fail(err, CR_ENOMEM, "out of memory");
        cr_authz_free(a);
        return NULL;
    }
    if (c->token_file && *c->token_file) {
        if (!(a->token_path = strdup(c->token_file))) {
            cr_fail(err, CR_ENOMEM, "out of memory");
            cr_authz_free(a);
            return NULL;
        }
        pthread_mutex_init(&a->mu, NULL);
        a->mu_ready = 1;
        if (reload_locked(a, err) < 0) {
            cr_authz_free(a);
            return NULL;
        }
    }
    return a;
}

void cr_authz_free(cr_authz *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n_identities; i++)
        free(a->identities[i]);
    free(a->identities);
    for (size_t i = 0; i < a->n_routers; i++)
        free(a->routers[i]);
    free(a->routers);
    free(a->tags);
    if (a->mu_ready)
        pthread_mutex_destroy(&a->mu);
    free(a->token_path);
    OPENSSL_cleanse(a->token_digest, sizeof a->token_digest);
    free(a);
}

int cr_authz_has_admins(const cr_authz *a) { return a->n_identities > 0 || a->token_path; }

/* ---- certificate identities ---- */

/* The verified peer's identity properties that name it. */
static const char *const IDENTITY_PROPERTIES[] = {
    GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME,
    GRPC_X509_CN_PROPERTY_NAME};

/* The index in list[0..n-1] of value (len bytes), or -1. */
static long listed(char *const *list, size_t n, const char *value, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], value, len) == 0)
            return (long)i;
    return -1;
}

/* The index in list[0..n-1] of the first of the call's verified peer
 * identities listed there, or -1. */
static long peer_listed(grpc_auth_context *ctx, char *const *list, size_t n)
{
    long found = -1;
    if (!ctx || !n || !grpc_auth_context_peer_is_authenticated(ctx))
        return -1;
    for (size_t k = 0; found < 0 && k < sizeof IDENTITY_PROPERTIES / sizeof *IDENTITY_PROPERTIES;
         k++) {
        grpc_auth_property_iterator it =
            grpc_auth_context_find_properties_by_name(ctx, IDENTITY_PROPERTIES[k]);
        const grpc_auth_property *p;
        while (found < 0 && (p = grpc_auth_property_iterator_next(&it)))
            found = listed(list, n, p->value, p->value_length);
    }
    return found;
}

static int identity_is_admin(const cr_authz *a, grpc_call *call)
{
    grpc_auth_context *ctx = a->n_identities ? grpc_call_auth_context(call) : NULL;
    int found = peer_listed(ctx, a->identities, a->n_identities) >= 0;
    if (ctx)
        grpc_auth_context_release(ctx);
    return found;
}

/* ---- bearer token ---- */

static int token_is_admin(cr_authz *a, const grpc_metadata_array *md)
{
    static const char scheme[] = "bearer ";
    const size_t n = sizeof scheme - 1;
    unsigned char want[32];
    int match = 0;
    if (!a->token_path)
        return 0;
    pthread_mutex_lock(&a->mu);
    refresh_locked(a);
    int revoked = a->revoked;
    memcpy(want, a->token_digest, sizeof want);
    pthread_mutex_unlock(&a->mu);
    if (revoked)
        return 0;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
        size_t len = GRPC_SLICE_LENGTH(m->value);
        if (!grpc_slice_str_cmp(m->key, "authorization") && len > n &&
            strncasecmp(v, scheme, n) == 0) {
            unsigned char d[32];
            sha256(v + n, len - n, d);
            match |= CRYPTO_memcmp(d, want, sizeof d) == 0;
        }
    }
    OPENSSL_cleanse(want, sizeof want);
    return match;
}

int cr_authz_is_admin(void *ctx, grpc_call *call, const grpc_metadata_array *md)
{
    cr_authz *a = ctx;
    return token_is_admin(a, md) || identity_is_admin(a, call);
}

uint64_t cr_authz_caller(void *ctx, grpc_call *call, const grpc_metadata_array *md)
{
    cr_authz *a = ctx;
    grpc_auth_context *auth =
        a->n_identities || a->n_routers ? grpc_call_auth_context(call) : NULL;
    long i = peer_listed(auth, a->identities, a->n_identities);
    if (i < 0 && (i = peer_listed(auth, a->routers, a->n_routers)) >= 0)
        i += (long)a->n_identities;
    if (auth)
        grpc_auth_context_release(auth);
    if (i >= 0)
        return a->tags[i];
    return token_is_admin(a, md) ? a->token_tag : 0;
}

/* ---- requests that need an admin ---- */

int cr_authz_plan_installs(const ProtobufCMessage *m)
{
    return ((const Cacheroute__V1__PlanRequest *)m)->install != 0;
}

int cr_authz_select_reserves(const ProtobufCMessage *m)
{
    return !((const Cacheroute__V1__SelectInjectionRequest *)m)->dry_run;
}

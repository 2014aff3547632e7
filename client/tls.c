/* Client credentials and token (tls.h). */
#include "tls.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Certificates, keys and tokens are small; a bigger file is a wrong path. */
#define MAX_FILE_BYTES (1 << 20)

/* The whole file as a NUL-terminated string, or NULL with err set. */
static char *slurp(const char *flag, const char *path, cr_error *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(MAX_FILE_BYTES + 1) : NULL;
    size_t n = buf ? fread(buf, 1, MAX_FILE_BYTES + 1, f) : 0;
    int bad = !f || !buf || ferror(f) || n > MAX_FILE_BYTES;
    int saved = errno;
    if (f)
        fclose(f);
    if (bad) {
        cr_fail(err, CR_EINVAL, "%s %s: cannot read%s%s", flag, path, f ? "" : ": ",
                f ? (n > MAX_FILE_BYTES ? " (over 1 MiB)" : "") : strerror(saved));
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

grpc_channel_credentials *cr_client_credentials(const cr_client_security *sec, cr_error *err)
{
    if (!sec->ca) {
        if (sec->cert || sec->key) {
            cr_fail(err, CR_EINVAL, "--tls-cert and --tls-key need --tls-ca");
            return NULL;
        }
        return grpc_insecure_credentials_create();
    }
    if (!sec->cert != !sec->key) {
        cr_fail(err, CR_EINVAL, "%s",
                sec->cert ? "--tls-cert needs --tls-key" : "--tls-key needs --tls-cert");
        return NULL;
    }
    char *ca = slurp("--tls-ca", sec->ca, err), *cert = NULL, *key = NULL;
    grpc_channel_credentials *creds = NULL;
    if (ca && (!sec->cert || ((cert = slurp("--tls-cert", sec->cert, err)) &&
                              (key = slurp("--tls-key", sec->key, err))))) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
        if (!creds)
            cr_fail(err, CR_EINVAL, "--tls-ca %s: cannot make TLS credentials", sec->ca);
    }
    free(ca);
    free(cert);
    free(key);
    return creds;
}

int cr_client_token(cr_client *c, const cr_client_security *sec, cr_error *err)
{
    if (!sec->token_file)
        return 0;
    char *t = slurp("--token-file", sec->token_file, err);
    if (!t)
        return -1;
    size_t n = strlen(t);
    while (n > 0 && isspace((unsigned char)t[n - 1]))
        n--;
    t[n] = '\0';
    if (n == 0) {
        cr_fail(err, CR_EINVAL, "--token-file %s: empty token", sec->token_file);
        free(t);
        return -1;
    }
    char *value = malloc(n + sizeof "Bearer ");
    if (value)
        snprintf(value, n + sizeof "Bearer ", "Bearer %s", t);
    free(t);
    if (!value) {
        cr_fail(err, CR_ENOMEM, "out of memory");
        return -1;
    }
    c->auth.key = grpc_slice_from_static_string("authorization");
    c->auth.value = grpc_slice_from_copied_string(value);
    c->has_auth = 1;
    free(value);
    return 0;
}

void cr_client_token_free(cr_client *c)
{
    if (c->has_auth)
        grpc_slice_unref(c->auth.value);
    c->has_auth = 0;
}

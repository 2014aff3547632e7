/* The start-up and reload checks of the TLS files. gRPC core would accept
 * an expired certificate or a mismatched key and fail every handshake with
 * a message only the client sees; checking here first names the file. */
#include "tls_pem.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The whole file, NUL-terminated, or NULL with err set. */
static char *read_file(const char *flag, const char *path, cr_error *err)
{
    char label[300], *buf;
    size_t n;
    snprintf(label, sizeof label, "%s %s", flag, path);
    if (cr_file_read(path, label, CR_TLS_MAX_FILE_BYTES, &buf, &n, err) != CR_OK)
        return NULL;
    if (n == 0) {
        cr_fail(err, CR_EINVAL, "%s: empty file", label);
        free(buf);
        return NULL;
    }
    return buf;
}

static double asn1_unix(const ASN1_TIME *t)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    return ASN1_TIME_to_tm(t, &tm) ? (double)timegm(&tm) : 0;
}

static void format_utc(double t, char *buf, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* The first certificate in pem, or NULL. */
static X509 *parse_cert(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return x;
}

static int check_validity(const char *path, X509 *x, double *not_after, cr_error *err)
{
    char when[64];
    double now = (double)time(NULL), from = asn1_unix(X509_get0_notBefore(x));
    *not_after = asn1_unix(X509_get0_notAfter(x));
    if (now < from) {
        format_utc(from, when, sizeof when);
        cr_fail(err, CR_EINVAL, "--tls-cert %s: not valid before %s", path, when);
        return -1;
    }
    if (now > *not_after) {
        format_utc(*not_after, when, sizeof when);
        cr_fail(err, CR_EINVAL, "--tls-cert %s: expired at %s", path, when);
        return -1;
    }
    return 0;
}

static int check_cert_and_key(const cr_tls_files *f, cr_tls_pem *p, cr_error *err)
{
    X509 *x = parse_cert(p->cert);
    if (!x) {
        cr_fail(err, CR_EINVAL, "--tls-cert %s: no PEM certificate in the file", f->cert);
        return -1;
    }
    BIO *b = BIO_new_mem_buf(p->key, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    int rc = -1;
    if (!k)
        cr_fail(err, CR_EINVAL, "--tls-key %s: no PEM private key in the file (or encrypted)",
                f->key);
    else if (!X509_check_private_key(x, k))
        cr_fail(err, CR_EINVAL, "--tls-key %s: does not match the certificate in --tls-cert %s",
                f->key, f->cert);
    else
        rc = check_validity(f->cert, x, &p->not_after, err);
    EVP_PKEY_free(k);
    X509_free(x);
    return rc;
}

/* Every PEM block in the bundle must be a certificate that parses. */
static int check_ca(const char *path, const char *pem, cr_error *err)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    STACK_OF(X509_INFO) *infos = b ? PEM_X509_INFO_read_bio(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    int n = 0, bad = !infos;
    for (int i = 0; infos && i < sk_X509_INFO_num(infos); i++) {
        if (sk_X509_INFO_value(infos, i)->x509)
            n++;
        else
            bad = 1;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (bad || n == 0) {
        cr_fail(err, CR_EINVAL, "--tls-client-ca %s: %s", path,
                bad ? "not a bundle of PEM certificates (a block does not parse)"
                    : "no PEM certificate in the file");
        return -1;
    }
    return 0;
}

int cr_tls_pem_load(const cr_tls_files *f, cr_tls_pem *p, cr_error *err)
{
    memset(p, 0, sizeof *p);
    int mutual = f->client_ca && *f->client_ca;
    int ok = (p->cert = read_file("--tls-cert", f->cert, err)) &&
             (p->key = read_file("--tls-key", f->key, err)) &&
             (!mutual || (p->ca = read_file("--tls-client-ca", f->client_ca, err))) &&
             check_cert_and_key(f, p, err) == 0 &&
             (!mutual || check_ca(f->client_ca, p->ca, err) == 0);
    ERR_clear_error(); /* OpenSSL's queue is per thread; leave it clean */
    if (ok)
        return 0;
    cr_tls_pem_clear(p);
    return -1;
}

static int same_text(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

int cr_tls_pem_same(const cr_tls_pem *a, const cr_tls_pem *b)
{
    return same_text(a->cert, b->cert) && same_text(a->key, b->key) && same_text(a->ca, b->ca);
}

void cr_tls_pem_clear(cr_tls_pem *p)
{
    if (p->key) /* a private key: do not leave it in freed memory */
        OPENSSL_cleanse(p->key, strlen(p->key));
    free(p->cert);
    free(p->key);
    free(p->ca);
    memset(p, 0, sizeof *p);
}

/* TLS for the gRPC listener: the PEM files named by --tls-cert, --tls-key
 * and --tls-client-ca, checked with OpenSSL before gRPC sees them, handed
 * to gRPC core through a certificate config fetcher so that rotated files
 * are served without a restart.
 *
 * gRPC core asks the fetcher before every new handshake; the fetcher
 * compares the files' stat signatures (device, inode, size, mtime) with
 * those it last read, so a handshake costs three stat calls unless a file
 * changed. A changed set of files is loaded and checked as at start; one
 * that fails is refused (logged at error once per change) and the last
 * good set keeps serving. Connections already open keep their session. */
#ifndef CR_TLS_H
#define CR_TLS_H

#include <grpc/grpc_security.h>
#include <stddef.h>

#include "common.h"

typedef struct cr_tls cr_tls;

typedef struct cr_tls_files {
    const char *cert;      /* PEM server certificate (chain allowed); required */
    const char *key;       /* PEM private key of the first certificate; required */
    const char *client_ca; /* PEM CA bundle for client certificates, or NULL/"":
                            * with it a client certificate is required and
                            * verified (mTLS) */
} cr_tls_files;

/* Called with the serving certificate's notAfter (Unix seconds) at start
 * and after each accepted reload; from whichever thread loaded it. */
typedef void (*cr_tls_loaded_fn)(void *ctx, double not_after);

/* Reads and checks the files: each readable, the certificate a PEM X.509
 * that is valid now (not before notBefore, not after notAfter), the key a
 * PEM private key matching it (X509_check_private_key), the CA bundle one
 * or more PEM certificates that all parse. Copies the paths. Returns NULL
 * with a one-line message naming the flag, the file and the problem in err
 * ("--tls-cert /x/server.pem: expired at 2026-01-01 00:00:00 UTC"). */
cr_tls *cr_tls_new(const cr_tls_files *files, cr_tls_loaded_fn loaded, void *loaded_ctx,
                   cr_error *err);
/* After the server using the credentials is destroyed. NULL is fine. */
void cr_tls_free(cr_tls *t);

/* New server credentials fetching their certificate config from t (which
 * must outlive them and every server they are added to); the caller
 * releases them after grpc_server_add_http2_port. NULL when out of memory. */
grpc_server_credentials *cr_tls_server_credentials(cr_tls *t);

/* Re-reads the files now whatever their stat signatures say (for SIGHUP).
 * Returns 1 when their content changed and passed the checks (the next
 * handshake serves them), 0 when unchanged, -1 when they fail a check: err
 * says why, the last good set stays. Thread-safe. */
int cr_tls_reload(cr_tls *t, cr_error *err);

/* The notAfter of the certificate gRPC serves or will serve at the next
 * handshake, Unix seconds. Thread-safe. */
double cr_tls_not_after(cr_tls *t);
/* 1 when a client CA was given (client certificates required). */
int cr_tls_mutual(const cr_tls *t);

#endif

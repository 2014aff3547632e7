/* The sidecar's transport security and authorization, set up from the
 * server's flags: TLS files (tls.h), admin identities and token (authz.h),
 * and what the gRPC listener needs from them (cr_rpc_options). */
#ifndef CR_SECURITY_H
#define CR_SECURITY_H

#include "authz.h"
#include "config.h"
#include "rpc.h"
#include "tls.h"

typedef struct cr_security {
    cr_tls *tls;     /* NULL without --tls-cert */
    cr_authz *authz; /* NULL when everything is open */
    grpc_server_credentials *creds; /* for the main listener; NULL = plaintext */
} cr_security;

/* Loads and checks the files named by c (see cr_tls_new, cr_authz_new).
 * expiry (may be NULL) gets the serving certificate's notAfter now and at
 * every accepted reload. Logs once how the gRPC port is protected: a warn
 * line when it is not at all (plaintext, no token: every call open), or
 * when no client can be an admin. Returns 0, or -1 with err naming the
 * flag and file (the sidecar exits 2). Call after grpc_init. */
int cr_security_open(cr_security *s, const cr_server_config *c, cr_tls_loaded_fn expiry,
                     void *expiry_ctx, cr_error *err);

/* Fills o's credentials and admin check for the main listener. */
void cr_security_apply(const cr_security *s, cr_rpc_options *o);

/* SIGHUP: re-reads the TLS files and the admin token file (cr_tls_reload,
 * cr_authz_reload; each outcome is logged). */
void cr_security_reload(cr_security *s);

/* After every server using the credentials is destroyed. */
void cr_security_close(cr_security *s);

#endif

/* Security set-up from the flags (security.h). */
#include "security.h"

#include <string.h>

#include "log.h"

static void log_posture(const cr_security *s, const cr_server_config *c)
{
    if (!s->tls && !s->authz) {
        cr_log(CR_LOG_WARN, "no transport security and no authorization: every call is open",
               json_pack("{s:s}", "hint",
                         "set --tls-cert/--tls-key (and --tls-client-ca, --admin-identity) or "
                         "--admin-token-file"));
        return;
    }
    if (!cr_authz_has_admins(s->authz))
        cr_log(CR_LOG_WARN, "no admin identity or token: state-changing calls are refused",
               NULL);
    if (!cr_authz_has_admins(s->authz) && !c->n_route_identities &&
        c->route_access == CR_ROUTE_ACCESS_IDENTIFIED)
        cr_log(CR_LOG_WARN, "no client can have an identity: Route, Routes and RecordArrival(s) "
                            "are refused (--route-identity, or --route-access anyone)",
               NULL);
    if (!s->tls)
        cr_log(CR_LOG_WARN, "no TLS: the admin token travels in plaintext", NULL);
    cr_log(CR_LOG_INFO, "security",
           json_pack("{s:b,s:b,s:b}", "tls", s->tls != NULL, "mtls",
                     s->tls && cr_tls_mutual(s->tls), "admin_token", *c->admin_token_file != 0));
}

/* The TLS flags go together: a key with its certificate, mTLS and admin
 * identities on top of TLS. Checked at start, with the files,
 * so that --check-config (like each row) judges a flag on its own. */
static int check_tls(const cr_server_config *s, cr_error *err)
{
    const char *why = NULL;
    if (!*s->tls_cert != !*s->tls_key)
        why = *s->tls_cert ? "--tls-cert needs --tls-key" : "--tls-key needs --tls-cert";
    else if (*s->tls_client_ca && !*s->tls_cert)
        why = "--tls-client-ca needs --tls-cert and --tls-key";
    else if (s->n_admin_identities && !*s->tls_client_ca)
        why = "--admin-identity needs --tls-client-ca (identities come from verified client "
              "certificates)";
    else if (s->n_route_identities && !*s->tls_client_ca)
        why = "--route-identity needs --tls-client-ca (identities come from verified client "
              "certificates)";
    if (why)
        cr_fail(err, CR_EINVAL, "%s", why);
    return why ? -1 : 0;
}

int cr_security_open(cr_security *s, const cr_server_config *c, cr_tls_loaded_fn expiry,
                     void *expiry_ctx, cr_error *err)
{
    memset(s, 0, sizeof *s);
    if (check_tls(c, err) != 0)
        return -1;
    if (*c->tls_cert) {
        cr_tls_files f = {c->tls_cert, c->tls_key, c->tls_client_ca};
        if (!(s->tls = cr_tls_new(&f, expiry, expiry_ctx, err)))
            return -1;
        if (!(s->creds = cr_tls_server_credentials(s->tls))) {
            cr_fail(err, CR_ENOMEM, "--tls-cert: cannot create the gRPC server credentials");
            cr_security_close(s);
            return -1;
        }
    }
    if (s->tls || *c->admin_token_file) {
        cr_authz_config a = {.identities = c->admin_identities,
                             .n_identities = c->n_admin_identities,
                             .route_identities = c->route_identities,
                             .n_route_identities = c->n_route_identities,
                             .token_file = c->admin_token_file};
        if (!(s->authz = cr_authz_new(&a, err))) {
            cr_security_close(s);
            return -1;
        }
    }
    log_posture(s, c);
    return 0;
}

void cr_security_apply(const cr_security *s, cr_rpc_options *o)
{
    o->creds = s->creds;
    o->is_admin = s->authz ? cr_authz_is_admin : NULL;
    o->caller_of = s->authz ? cr_authz_caller : NULL;
    o->admin_ctx = s->authz;
}

void cr_security_reload(cr_security *s)
{
    cr_error err; /* each reload logs its own outcome */
    if (s->tls)
        cr_tls_reload(s->tls, &err);
    cr_authz_reload(s->authz, &err);
}

void cr_security_close(cr_security *s)
{
    if (s->creds)
        grpc_server_credentials_release(s->creds);
    cr_authz_free(s->authz);
    cr_tls_free(s->tls);
    memset(s, 0, sizeof *s);
}

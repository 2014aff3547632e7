/* Who may change state: an admin is a client whose verified certificate
 * names an identity in --admin-identity (mTLS), or that sends the
 * --admin-token-file token as "authorization: Bearer TOKEN" metadata. Which
 * calls need an admin is the method table's (rpc.h cr_access); the rpc
 * layer asks cr_authz_is_admin only for those.
 *
 * Who may route (count toward the shared outstanding work): a client with
 * an identity, an admin or one whose verified certificate names an identity
 * in --route-identity. Each such client has a tag (cr_authz_caller): its
 * routes count against its own quota and only its outcomes release them. */
#ifndef CR_AUTHZ_H
#define CR_AUTHZ_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* The largest token file read, bytes. */
#define CR_AUTHZ_MAX_TOKEN_BYTES 4096

typedef struct cr_authz cr_authz;

typedef struct cr_authz_config {
    char *const *identities; /* exact SAN URI, SAN DNS or CN strings */
    size_t n_identities;
    char *const *route_identities; /* the same, of clients that may route */
    size_t n_route_identities;
    const char *token_file; /* NULL or "": no token */
} cr_authz_config;

/* Copies the identities and reads the token: the file's bytes without
 * trailing whitespace, 1..CR_AUTHZ_MAX_TOKEN_BYTES of them, printable
 * ASCII without spaces (it travels in an HTTP/2 header). Keeps only the
 * token's SHA-256. The file must be a regular file not writable by group
 * or others (readable is fine: a Kubernetes Secret volume mounts 0644).
 * Returns NULL with err naming --admin-token-file, the file and the
 * problem. A token file replaced or rewritten later (its inode, size or
 * mtime changed) is read again before the next token check; one that fails
 * the rules is refused (logged at error) and the previous token stays. A
 * deleted one revokes the token (logged at warn): no token is accepted
 * until a file is back. */
cr_authz *cr_authz_new(const cr_authz_config *c, cr_error *err);
void cr_authz_free(cr_authz *a);

/* Re-reads the token file now (for SIGHUP). Returns 1 when the token
 * changed, 0 when it did not or there is no token file, -1 when the file
 * fails the rules (err says why; the previous token stays). Logs the
 * outcome. Thread-safe. a may be NULL. */
int cr_authz_reload(cr_authz *a, cr_error *err);

/* 1 when the call's client is an admin (see above), else 0. ctx is the
 * cr_authz; md is the call's initial metadata. The token comparison takes
 * the same time whatever the sent value's length or content (both sides
 * are hashed and compared with CRYPTO_memcmp). Thread-safe: a stat of the
 * token file and a short lock per call that sends a token check. */
int cr_authz_is_admin(void *ctx, grpc_call *call, const grpc_metadata_array *md);

/* 1 when there is any way to be an admin (identities or a token). */
int cr_authz_has_admins(const cr_authz *a);

/* The tag of the call's client identity, never 0 for one: of the first of
 * its verified certificate's identities (SAN URI, SAN DNS, SAN, CN, in
 * that order) listed in --admin-identity, else in --route-identity; else,
 * with the admin token, the token's; else 0 (no identity: anonymous). A
 * tag is 64 bits of the identity's SHA-256, so the same identity has the
 * same tag on every call and connection, whatever the method. ctx is the
 * cr_authz. Thread-safe, as cr_authz_is_admin. */
uint64_t cr_authz_caller(void *ctx, grpc_call *call, const grpc_metadata_array *md);

/* cr_method_spec admin_if predicates, asked of the request as protobuf-c
 * decoded it for the handler (so never of bytes another reader might read
 * otherwise): a PlanRequest that installs; a SelectInjectionRequest that
 * reserves (not a dry run). Pure. */
int cr_authz_plan_installs(const ProtobufCMessage *m);
int cr_authz_select_reserves(const ProtobufCMessage *m);

#endif

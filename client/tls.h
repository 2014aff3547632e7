/* The CLI's side of the sidecar's security: TLS channel credentials and the
 * admin bearer token, from the files --tls-ca, --tls-cert, --tls-key and
 * --token-file name. */
#ifndef CR_CLIENT_TLS_H
#define CR_CLIENT_TLS_H

#include <grpc/grpc_security.h>

#include "call.h"

/* Insecure credentials without sec->ca; SSL ones trusting sec->ca, with
 * the client certificate sec->cert/sec->key when given. The caller
 * releases them. NULL with err naming the flag and file on a read error
 * or a certificate without its key (or the reverse). */
grpc_channel_credentials *cr_client_credentials(const cr_client_security *sec, cr_error *err);

/* Reads sec->token_file (trailing whitespace dropped) into c->auth. 0, or
 * -1 with err naming --token-file and the file. */
int cr_client_token(cr_client *c, const cr_client_security *sec, cr_error *err);
void cr_client_token_free(cr_client *c);

#endif

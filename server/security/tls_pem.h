/* One set of TLS files read into memory and checked with OpenSSL; private
 * to tls.c. */
#ifndef CR_TLS_PEM_H
#define CR_TLS_PEM_H

#include <stddef.h>

#include "tls.h"

/* The largest file read: a certificate chain or CA bundle past this is not
 * one an operator meant. */
#define CR_TLS_MAX_FILE_BYTES (1u << 20)

typedef struct cr_tls_pem {
    char *cert, *key, *ca; /* NUL-terminated file contents, malloc'd; ca NULL
                            * without a client CA */
    double not_after;      /* the certificate's, Unix seconds */
} cr_tls_pem;

/* Reads f's files into p and checks them (see cr_tls_new). Returns 0, or
 * -1 with p empty and err naming the flag, the file and the problem. */
int cr_tls_pem_load(const cr_tls_files *f, cr_tls_pem *p, cr_error *err);
/* 1 when a and b hold the same bytes. */
int cr_tls_pem_same(const cr_tls_pem *a, const cr_tls_pem *b);
/* Frees p's contents; p is left empty. */
void cr_tls_pem_clear(cr_tls_pem *p);

#endif

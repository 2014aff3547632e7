/* The served TLS files and their rotation (tls.h). One mutex guards the
 * state: gRPC core calls the fetcher from its handshake threads, SIGHUP
 * from the main thread. */
#include "tls.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "filesig.h"
#include "log.h"
#include "tls_pem.h"

enum { N_FILES = 3 };

struct cr_tls {
    char *path[N_FILES]; /* cert, key, client CA (NULL without) */
    cr_tls_loaded_fn loaded;
    void *loaded_ctx;
    pthread_mutex_t mu;
    int mu_ready;
    cr_tls_pem good;              /* the last set that passed the checks */
    cr_filesig seen[N_FILES];     /* when the files were last read */
    int pending;                  /* good is not yet handed to gRPC */
    _Atomic double not_after;
};

static cr_tls_files files_of(const cr_tls *t)
{
    return (cr_tls_files){t->path[0], t->path[1], t->path[2]};
}

/* Takes the newly loaded set p over as the good one. Under t->mu. */
static void accept_set(cr_tls *t, cr_tls_pem *p)
{
    cr_tls_pem_clear(&t->good);
    t->good = *p;
    memset(p, 0, sizeof *p);
    t->pending = 1;
    atomic_store(&t->not_after, t->good.not_after);
    if (t->loaded)
        t->loaded(t->loaded_ctx, t->good.not_after);
}

/* Loads the files and takes them when they pass and differ from the good
 * set. Returns as cr_tls_reload. Under t->mu. */
static int load_locked(cr_tls *t, cr_error *err)
{
    cr_tls_files f = files_of(t);
    cr_tls_pem p;
    for (int i = 0; i < N_FILES; i++)
        cr_filesig_read(t->path[i], &t->seen[i]);
    if (cr_tls_pem_load(&f, &p, err) != 0)
        return -1;
    if (cr_tls_pem_same(&p, &t->good)) {
        cr_tls_pem_clear(&p);
        return 0;
    }
    accept_set(t, &p);
    return 1;
}

static void log_outcome(int rc, const char *why, const char *trigger)
{
    if (rc > 0)
        cr_log(CR_LOG_INFO, "tls files reloaded", json_pack("{s:s}", "trigger", trigger));
    else if (rc == 0 && strcmp(trigger, "reload") == 0) /* SIGHUP: say it was seen */
        cr_log(CR_LOG_INFO, "tls files unchanged", json_pack("{s:s}", "trigger", trigger));
    else if (rc < 0)
        cr_log(CR_LOG_ERROR, "tls files refused, the previous ones stay",
               json_pack("{s:s,s:s}", "trigger", trigger, "error", why));
}

static int files_changed(cr_tls *t)
{
    for (int i = 0; i < N_FILES; i++) {
        cr_filesig now;
        cr_filesig_read(t->path[i], &now);
        if (!cr_filesig_same(&now, &t->seen[i]))
            return 1;
    }
    return 0;
}

/* gRPC core's certificate config fetcher: called before every handshake
 * (and once when the listener starts). */
static grpc_ssl_certificate_config_reload_status fetch(void *user,
                                                       grpc_ssl_server_certificate_config **out)
{
    cr_tls *t = user;
    cr_error why;
    pthread_mutex_lock(&t->mu);
    if (files_changed(t))
        log_outcome(load_locked(t, &why), why.msg, "files changed");
    grpc_ssl_certificate_config_reload_status rc = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    if (t->pending) {
        grpc_ssl_pem_key_cert_pair pair = {t->good.key, t->good.cert};
        /* gRPC 1.51 asserts non-NULL roots on a fetched config even when it
         * requests no client certificate: without a client CA the server's
         * own chain stands in, never used to verify anyone. */
        const char *roots = t->good.ca ? t->good.ca : t->good.cert;
        *out = grpc_ssl_server_certificate_config_create(roots, &pair, 1);
        rc = *out ? GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW
                  : GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
        t->pending = *out == NULL;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

static char *copy_path(const char *p) { return p && *p ? strdup(p) : NULL; }

cr_tls *cr_tls_new(const cr_tls_files *files, cr_tls_loaded_fn loaded, void *loaded_ctx,
                   cr_error *err)
{
    cr_tls *t = calloc(1, sizeof *t);
    if (!t || !(t->path[0] = copy_path(files->cert)) || !(t->path[1] = copy_path(files->key)) ||
        ((t->path[2] = copy_path(files->client_ca)) == NULL && files->client_ca &&
         *files->client_ca)) {
        cr_fail(err, CR_ENOMEM, "out of memory loading the TLS files");
        cr_tls_free(t);
        return NULL;
    }
    t->loaded = loaded;
    t->loaded_ctx = loaded_ctx;
    pthread_mutex_init(&t->mu, NULL);
    t->mu_ready = 1;
    if (load_locked(t, err) < 0) {
        cr_tls_free(t);
        return NULL;
    }
    return t;
}

void cr_tls_free(cr_tls *t)
{
    if (!t)
        return;
    if (t->mu_ready)
        pthread_mutex_destroy(&t->mu);
    cr_tls_pem_clear(&t->good);
    for (int i = 0; i < N_FILES; i++)
        free(t->path[i]);
    free(t);
}

grpc_server_credentials *cr_tls_server_credentials(cr_tls *t)
{
    grpc_ssl_client_certificate_request_type req =
        cr_tls_mutual(t) ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                         : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    grpc_ssl_server_credentials_options *o =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(req, fetch, t);
    return o ? grpc_ssl_server_credentials_create_with_options(o) : NULL;
}

int cr_tls_reload(cr_tls *t, cr_error *err)
{
    pthread_mutex_lock(&t->mu);
    int rc = load_locked(t, err);
    pthread_mutex_unlock(&t->mu);
    log_outcome(rc, err->msg, "reload");
    return rc;
}

double cr_tls_not_after(cr_tls *t) { return atomic_load(&t->not_after); }
int cr_tls_mutual(const cr_tls *t) { return t->path[2] != NULL; }

/* The replica's option rows and their checks across fields. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "replica.h"

static const char *const BACKEND_START[] = {"degraded", "require", NULL}; /* cr_backend_start */

static cr_status valid_backend(const char *value, cr_error *err)
{
    cr_replica_url url;
    return *value ? cr_replica_parse_url(value, &url, err) : CR_OK;
}

/* 1..max bytes of [A-Za-z0-9._-]; "" allowed when empty_ok. */
static cr_status valid_name(const char *flag, const char *value, size_t max, int empty_ok,
                            cr_error *err)
{
    static const char OK[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t len = strlen(value);
    if ((len == 0 && empty_ok) ||
        (len >= 1 && len <= max && strspn(value, OK) == len))
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--%s must be 1..%zu bytes of [A-Za-z0-9._-]%s, got \"%.160s\"",
                   flag, max, empty_ok ? " (or empty)" : "", value);
}

static cr_status valid_id(const char *value, cr_error *err)
{
    return valid_name("replica-id", value, CR_REPLICA_ID_MAX, 1, err);
}

static cr_status valid_cluster(const char *value, cr_error *err)
{
    return valid_name("cluster", value, CR_REPLICA_CLUSTER_MAX, 0, err);
}

/* Read to be judged, then forgotten: the link reads it again at each
 * connect, so a rotated Secret is used at the next one. */
static cr_status valid_password_file(const char *path, cr_error *err)
{
    cr_replica_auth auth;
    cr_status st = cr_replica_auth_read(path, &auth, err);
    cr_replica_auth_clear(&auth);
    return st;
}

#define AT(field) offsetof(cr_replica_config, field)

static const cr_option ROWS[] = {
    {.name = "state-backend", .key = "state_backend", .type = CR_OPT_STRING,
     .offset = AT(state_backend), .def_text = "", .valid = valid_backend,
     .help = "Redis the replicas share: redis://HOST:PORT[/DB] or unix:PATH[?db=N]; "
             "empty = standalone (needs --estimator-clock seconds)"},
    {.name = "state-backend-password-file", .key = "state_backend_password_file",
     .type = CR_OPT_STRING, .offset = AT(state_backend_password_file), .def_text = "",
     .help = "file holding the --state-backend AUTH: PASSWORD, or USER PASSWORD (an ACL "
             "user), on one line; read at start and at each connect; empty = no AUTH"},
    {.name = "replica-id", .key = "replica_id", .type = CR_OPT_STRING, .offset = AT(replica_id),
     .def_text = "", .min = 0, .max = CR_REPLICA_ID_MAX, .valid = valid_id,
     .help = "this replica's name in the backend, 1..253 of [A-Za-z0-9._-]; empty = the host "
             "name"},
    {.name = "cluster", .key = "cluster", .type = CR_OPT_STRING, .offset = AT(cluster),
     .def_text = "cacheroute", .min = 1, .max = CR_REPLICA_CLUSTER_MAX, .valid = valid_cluster,
     .help = "the replicas' group: their Redis keys start with cr:{NAME}:"},
    {.name = "sync-interval", .key = "sync_interval_s", .type = CR_OPT_DOUBLE,
     .offset = AT(sync_interval_s), .def = 1, .min = 0.05, .max = 60,
     .help = "seconds between pushes of the owners this replica touched (and table fetches)"},
    {.name = "lease-ttl", .key = "lease_ttl_s", .type = CR_OPT_DOUBLE, .offset = AT(lease_ttl_s),
     .def = 5, .min = 0.5, .max = 300,
     .help = "seconds the leader's lease lasts unrenewed: a dead leader is replaced within "
             "about 4/3 of it"},
    {.name = "replica-ttl", .key = "replica_ttl_s", .type = CR_OPT_DOUBLE,
     .offset = AT(replica_ttl_s), .def = 60, .min = 0.5, .max = 86400,
     .help = "seconds after its last push that a stopped replica's counts expire (at least "
             "--lease-ttl)"},
    {.name = "backend-timeout", .key = "backend_timeout_ms", .type = CR_OPT_LONG,
     .offset = AT(backend_timeout_ms), .def = 200, .min = 1, .max = 60000,
     .help = "ms a connect or command to --state-backend may take"},
    {.name = "backend-start", .key = "backend_start", .type = CR_OPT_CHOICE,
     .offset = AT(backend_start), .def_text = "degraded", .choices = BACKEND_START,
     .help = "Redis unreachable at start-up: degraded (serve locally, retry) or require "
             "(exit 2)"},
};

const cr_option_table cr_replica_options = CR_OPTION_TABLE("replica", ROWS);

void cr_replica_config_default(cr_replica_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_replica_options, cfg);
}

cr_status cr_replica_config_check(const cr_replica_config *cfg, cr_clock clock, cr_error *err)
{
    cr_status st = cr_options_check(&cr_replica_options, cfg, NULL, err);
    if (st != CR_OK)
        return st;
    if (cfg->state_backend && *cfg->state_backend &&
        ((st = valid_backend(cfg->state_backend, err)) != CR_OK ||
         (st = valid_id(cfg->replica_id ? cfg->replica_id : "", err)) != CR_OK ||
         (st = valid_cluster(cfg->cluster ? cfg->cluster : "", err)) != CR_OK ||
         (cfg->state_backend_password_file && *cfg->state_backend_password_file &&
          (st = valid_password_file(cfg->state_backend_password_file, err)) != CR_OK)))
        return st;
    if (cfg->replica_ttl_s < cfg->lease_ttl_s)
        return cr_fail(err, CR_EINVAL, "--replica-ttl must be at least --lease-ttl (%g), got %g",
                       cfg->lease_ttl_s, cfg->replica_ttl_s);
    if (cfg->state_backend && *cfg->state_backend && clock != CR_CLOCK_SECONDS)
        return cr_fail(err, CR_EINVAL,
                       "--state-backend \"%.160s\" needs --estimator-clock seconds, got calls: "
                       "the calls clock is not linear in the arrivals, so replicas' counts "
                       "cannot be merged",
                       cfg->state_backend);
    return CR_OK;
}

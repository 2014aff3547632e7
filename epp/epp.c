/* The picker's shared handle: its checked configuration, the engine
 * mode's tokenizer and the counters every stream adds to. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static const char *const error_names[CR_EPP_N_ERRORS] = {
    [CR_EPP_ERR_BAD_BODY] = "bad_body",       [CR_EPP_ERR_TOO_LARGE] = "too_large",
    [CR_EPP_ERR_NO_ENDPOINT] = "no_endpoint", [CR_EPP_ERR_SHED] = "shed",
    [CR_EPP_ERR_PROTOCOL] = "protocol",       [CR_EPP_ERR_ABANDONED] = "abandoned",
    [CR_EPP_ERR_RESET] = "reset",             [CR_EPP_ERR_UPSTREAM_5XX] = "upstream_5xx",
    [CR_EPP_ERR_TOKENIZE] = "tokenize",
};

const char *cr_epp_error_name(cr_epp_error e)
{
    return (unsigned)e < CR_EPP_N_ERRORS ? error_names[e] : "unknown";
}

/* A header name as the data plane sends it: lower case token characters. */
static int header_name_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              strchr("-_.!#$%&'*+^`|~", *s)))
            return 0;
    return 1;
}

static cr_status check(const cr_epp_config *c, cr_error *err)
{
    if (c->fallbacks > CR_EPP_MAX_FALLBACKS)
        return cr_fail(err, CR_EINVAL, "--epp-fallbacks must be at most %d, got %u",
                       CR_EPP_MAX_FALLBACKS, c->fallbacks);
    if (c->max_body_bytes < 1 || c->max_body_bytes > CR_EPP_MAX_BODY_LIMIT)
        return cr_fail(err, CR_EINVAL, "--epp-max-body-bytes must be in 1..%u, got %zu",
                       CR_EPP_MAX_BODY_LIMIT, c->max_body_bytes);
    if (!(c->tokenize_timeout_s > 0 && c->tokenize_timeout_s <= CR_EPP_MAX_TOKENIZE_TIMEOUT))
        return cr_fail(err, CR_EINVAL, "--epp-tokenize-timeout must be in (0, %g] seconds, got %g",
                       CR_EPP_MAX_TOKENIZE_TIMEOUT, c->tokenize_timeout_s);
    if (c->max_requests < 1 || c->max_requests > CR_EPP_MAX_REQUESTS_LIMIT)
        return cr_fail(err, CR_EINVAL, "--epp-max-requests must be in 1..%u, got %u",
                       CR_EPP_MAX_REQUESTS_LIMIT, c->max_requests);
    if (c->max_buffered_bytes < c->max_body_bytes ||
        c->max_buffered_bytes > CR_EPP_MAX_BUFFERED_LIMIT)
        return cr_fail(err, CR_EINVAL,
                       "--epp-max-buffered-bytes must be in --epp-max-body-bytes (%zu)..%" PRIu64
                       ", got %" PRIu64,
                       c->max_body_bytes, CR_EPP_MAX_BUFFERED_LIMIT, c->max_buffered_bytes);
    if (c->owner_header && !header_name_ok(c->owner_header))
        return cr_fail(err, CR_EINVAL,
                       "--epp-owner-header must be a lower-case header name, got \"%.64s\"",
                       c->owner_header);
    if (c->tokens != CR_EPP_TOKENS_ESTIMATE && c->tokens != CR_EPP_TOKENS_ENGINE)
        return cr_fail(err, CR_EINVAL, "--epp-tokens must be estimate or engine");
    if (c->body_mode != CR_EPP_FULL_DUPLEX && c->body_mode != CR_EPP_BUFFERED)
        return cr_fail(err, CR_EINVAL, "--epp-body-mode must be full-duplex or buffered");
    if (c->block_tokens < 1)
        return cr_fail(err, CR_EINVAL, "--block-tokens must be at least 1, got 0");
    if (c->max_hashes < 1)
        return cr_fail(err, CR_EINVAL, "--max-route-hashes must be at least 1, got 0");
    if (!(c->dispatch_s >= 0 && c->dispatch_s <= 1))
        return cr_fail(err, CR_EINVAL, "the dispatch interval must be in [0, 1] s, got %g",
                       c->dispatch_s);
    return CR_OK;
}

cr_epp *cr_epp_new(const cr_epp_config *cfg, cr_core *core, cr_error *err)
{
    if (check(cfg, err) != CR_OK)
        return NULL;
    cr_epp *e = calloc(1, sizeof *e);
    if (!e || !(e->owner = strdup(cfg->owner_header ? cfg->owner_header : "")) ||
        !(e->base_model = strdup(cfg->base_model ? cfg->base_model : ""))) {
        if (e)
            free(e->owner);
        free(e);
        cr_fail(err, CR_ENOMEM, "out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->cfg.owner_header = e->owner;
    e->cfg.base_model = e->base_model;
    e->core = core;
    if (cfg->tokens == CR_EPP_TOKENS_ENGINE &&
        !(e->tokenizer = cr_tokenizer_new(cfg->tokenize_timeout_s))) {
        cr_epp_free(e);
        cr_fail(err, CR_ENOMEM, "--epp-tokens engine: the tokenizer (libcurl) cannot start");
        return NULL;
    }
    /* Request ids start somewhere this process's own, so a restarted
     * picker's ids are not its predecessor's (receipts outlive it). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_init(&e->next_id, cr_mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
                                      ((uint64_t)getpid() << 32)));
    if (cr_epp_hold_start(e, err) != CR_OK) {
        cr_epp_free(e);
        return NULL;
    }
    return e;
}

void cr_epp_free(cr_epp *e)
{
    if (!e)
        return;
    cr_epp_hold_stop(e);
    if (e->tokenizer)
        cr_tokenizer_free(e->tokenizer);
    free(e->owner);
    free(e->base_model);
    free(e);
}

int cr_epp_may_block(const cr_epp *e)
{
    return e->cfg.tokens == CR_EPP_TOKENS_ENGINE;
}

static uint64_t load(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void cr_epp_stats_read(const cr_epp *e, cr_epp_stats *out)
{
    out->streams_open = load(&e->open);
    out->streams = load(&e->streams);
    out->buffered = load(&e->buffered);
    out->routed = load(&e->routed);
    out->outcomes = load(&e->outcomes);
    out->bytes_in = load(&e->bytes_in);
    out->bytes_out = load(&e->bytes_out);
    out->bad_addresses = load(&e->bad_addresses);
    for (int i = 0; i < CR_EPP_N_ERRORS; i++)
        out->errors[i] = load(&e->errors[i]);
}

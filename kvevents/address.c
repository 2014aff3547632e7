/* The engines' KV-event addresses (kvevents.h): a --kv-events value, an
 * endpoint's kv_events, and a data-parallel rank's endpoint, which vLLM
 * derives from its base one (offset_endpoint_port in kv_events.py: a
 * tcp:// port plus the rank, an ipc:// path with "_dp<rank>"). Pure. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvevents.h"

/* Copies the len bytes of an endpoint at e into out when valid. */
static cr_status endpoint_of(const char *e, size_t len, const char *what, char *out,
                             cr_error *err)
{
    if (len <= 6 || (strncmp(e, "tcp://", 6) && strncmp(e, "ipc://", 6)))
        return cr_fail(err, CR_EINVAL, "%s must be tcp://... or ipc://...", what);
    if (len >= CR_KV_ENDPOINT_MAX || memchr(e, ' ', len))
        return cr_fail(err, CR_EINVAL, "%s must be 1..%d bytes without spaces", what,
                       CR_KV_ENDPOINT_MAX - 1);
    memcpy(out, e, len);
    out[len] = '\0';
    return CR_OK;
}

/* ENDPOINT[,replay=ENDPOINT] at text into out's endpoint and replay. */
static cr_status address_of(const char *text, cr_kv_engine *out, cr_error *err)
{
    const char *comma = strchr(text, ',');
    size_t len = comma ? (size_t)(comma - text) : strlen(text);
    if (endpoint_of(text, len, "ENDPOINT", out->endpoint, err) != CR_OK)
        return CR_EINVAL;
    if (!comma)
        return CR_OK;
    if (strncmp(comma, ",replay=", 8))
        return cr_fail(err, CR_EINVAL, "only ,replay=ENDPOINT may follow ENDPOINT");
    return endpoint_of(comma + 8, strlen(comma + 8), "replay=ENDPOINT", out->replay, err);
}

cr_status cr_kv_engine_parse(const char *text, cr_kv_engine *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    const char *eq = strchr(text, '=');
    size_t digits = strspn(text, "0123456789");
    if (!eq)
        return cr_fail(err, CR_EINVAL, "must be SHARD=ENDPOINT[,replay=ENDPOINT]");
    if (digits == 0 || digits > 2 || text + digits != eq || atoi(text) >= CR_KV_MAX_ENGINES)
        return cr_fail(err, CR_EINVAL, "SHARD must be a decimal in 0..%d",
                       CR_KV_MAX_ENGINES - 1);
    out->shard = (uint32_t)atoi(text);
    return address_of(eq + 1, out, err);
}

cr_status cr_kv_address_parse(const char *text, cr_kv_engine *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    return address_of(text, out, err);
}

/* ---- a data-parallel rank's endpoint ------------------------------------------ */

cr_status cr_kv_rank_endpoint(const char *base, uint32_t rank, char *out, cr_error *err)
{
    size_t len = strlen(base);
    if (len >= CR_KV_ENDPOINT_MAX)
        return cr_fail(err, CR_EINVAL, "%.40s... is past %d bytes", base, CR_KV_ENDPOINT_MAX - 1);
    if (rank == 0 || strncmp(base, "tcp://", 6)) {
        /* ipc:// (and inproc://) take a suffix, as vLLM's offset_endpoint_port */
        if (rank && snprintf(out, CR_KV_ENDPOINT_MAX, "%s_dp%" PRIu32, base, rank) >=
                        CR_KV_ENDPOINT_MAX)
            return cr_fail(err, CR_EINVAL, "%.40s... with _dp%" PRIu32 " is past %d bytes", base,
                           rank, CR_KV_ENDPOINT_MAX - 1);
        if (!rank)
            memcpy(out, base, len + 1);
        return CR_OK;
    }
    const char *colon = strrchr(base, ':');
    size_t digits = colon ? strspn(colon + 1, "0123456789") : 0;
    if (!colon || colon < base + 6 || digits == 0 || digits > 5 || colon[1 + digits])
        return cr_fail(err, CR_EINVAL, "%s has no port to offset by the rank", base);
    unsigned long port = strtoul(colon + 1, NULL, 10) + rank;
    if (port > 65535)
        return cr_fail(err, CR_EINVAL, "%s: its port + rank %" PRIu32 " is past 65535", base,
                       rank);
    /* the port grows by at most one digit: 65535 is 5 of them */
    if (snprintf(out, CR_KV_ENDPOINT_MAX, "%.*s:%lu", (int)(colon - base), base, port) >=
        CR_KV_ENDPOINT_MAX)
        return cr_fail(err, CR_EINVAL, "%.40s... with rank %" PRIu32 " is past %d bytes", base,
                       rank, CR_KV_ENDPOINT_MAX - 1);
    return CR_OK;
}

/* One request's route through the core, as a Route caller makes it (block
 * keys, namespace, owner, request id), limited to the gateway's subset
 * hint and with --epp-fallbacks next best; its answer as the destination
 * the data plane reads ("ip:port,ip:port"); and its outcome. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "keys.h"

#define NO_SET "no endpoints: configure --endpoints-file or SetEndpoints"

int cr_epp_is_ip_port(const char *addr)
{
    char host[INET6_ADDRSTRLEN + 1];
    unsigned char buf[sizeof(struct in6_addr)];
    const char *port, *end;
    int family = AF_INET;
    if (addr[0] == '[') { /* [IPv6]:port */
        if (!(end = strchr(addr, ']')) || end[1] != ':')
            return 0;
        addr++;
        port = end + 2;
        family = AF_INET6;
    } else {
        if (!(end = strchr(addr, ':')))
            return 0;
        port = end + 1;
    }
    if ((size_t)(end - addr) >= sizeof host)
        return 0;
    memcpy(host, addr, (size_t)(end - addr));
    host[end - addr] = '\0';
    unsigned long p = 0;
    size_t digits = 0;
    for (; port[digits] >= '0' && port[digits] <= '9' && digits < 6; digits++)
        p = p * 10 + (unsigned long)(port[digits] - '0');
    return digits && !port[digits] && p >= 1 && p <= 65535 && inet_pton(family, host, buf) == 1;
}

const char *cr_epp_no_set(cr_epp *e)
{
    const cr_endpoints *set = cr_core_endpoints(e->core);
    cr_endpoints_release(set);
    return set ? NULL : NO_SET;
}

/* The slot whose endpoint (not gone) has address addr[0..n), or UINT32_MAX. */
static uint32_t slot_of(const cr_endpoints *set, const char *addr, size_t n)
{
    for (uint32_t s = 0; s < set->n_slots; s++)
        if (set->slot[s].state != CR_ENDPOINT_GONE && strlen(set->slot[s].address) == n &&
            memcmp(set->slot[s].address, addr, n) == 0)
            return s;
    return UINT32_MAX;
}

uint32_t cr_epp_shard_of(cr_epp *e, const char *addr, size_t n)
{
    const cr_endpoints *set = cr_core_endpoints(e->core);
    uint32_t s = set ? slot_of(set, addr, n) : UINT32_MAX;
    cr_endpoints_release(set);
    return s;
}

/* The shards a route may take, into only: the hint's addresses ("a,
 * b,c") found in the set, distinct, or with no hint (NULL) every endpoint;
 * either way only those whose address is an ip:port the data plane can
 * dial (the others counted as left out). How many; *all = 1 when that is
 * every endpoint of the set (no list needed). */
static uint32_t allowed(cr_epp *e, const cr_endpoints *set, const char *hint, uint32_t *only,
                        int *all)
{
    uint32_t n = 0, left_out = 0;
    *all = 0;
    if (!hint) {
        for (uint32_t s = 0; s < set->n_slots; s++) {
            if (set->slot[s].state == CR_ENDPOINT_GONE)
                continue;
            if (cr_epp_is_ip_port(set->slot[s].address))
                only[n++] = s;
            else
                left_out++;
        }
        *all = left_out == 0;
    }
    for (const char *p = hint; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed && p[trimmed - 1] == ' ')
            trimmed--;
        uint32_t s = trimmed ? slot_of(set, p, trimmed) : UINT32_MAX;
        int seen = 0;
        for (uint32_t i = 0; i < n && !seen; i++)
            seen = only[i] == s;
        if (s != UINT32_MAX && !seen && n < CR_ENDPOINTS_MAX) {
            if (cr_epp_is_ip_port(set->slot[s].address))
                only[n++] = s;
            else
                left_out++;
        }
        p += len;
    }
    cr_epp_count(&e->bad_addresses, left_out);
    return n;
}

/* Engine mode: the token ids of r from an active endpoint's /tokenize,
 * taking endpoints in turn; 0 when none answered (the caller estimates). */
static int engine_tokens(cr_epp *e, const cr_endpoints *set, const cr_epp_pick *p,
                         uint32_t **ids, size_t *n)
{
    uint32_t active = set->n_state[CR_ENDPOINT_ACTIVE];
    if (!active)
        return 0;
    uint64_t turn = atomic_fetch_add_explicit(&e->next_engine, 1, memory_order_relaxed) % active;
    for (uint32_t s = 0; s < set->n_slots; s++) {
        if (set->slot[s].state != CR_ENDPOINT_ACTIVE || turn--)
            continue;
        cr_error err;
        return cr_epp_is_ip_port(set->slot[s].address) &&
               cr_tokenize(e->tokenizer, set->slot[s].address, p->body, p->raw, p->raw_len, ids,
                           n, &err) == CR_OK;
    }
    return 0;
}

/* The body's block keys into keys (max of them) and its prompt tokens. */
static size_t keys_of(cr_epp *e, const cr_endpoints *set, const cr_epp_pick *p, uint64_t *keys,
                      size_t max, uint32_t *prompt_tokens)
{
    const cr_openai_request *r = p->body;
    uint32_t bt = e->cfg.block_tokens;
    uint32_t *ids = NULL;
    size_t n = 0;
    if (r->tokens) {
        *prompt_tokens = r->n_tokens > CR_REQUEST_MAX_TOKENS ? CR_REQUEST_MAX_TOKENS
                                                              : (uint32_t)r->n_tokens;
        return cr_epp_keys_tokens(r->tokens, r->n_tokens, bt, keys, max);
    }
    if (e->tokenizer) {
        if (engine_tokens(e, set, p, &ids, &n)) {
            *prompt_tokens = n > CR_REQUEST_MAX_TOKENS ? CR_REQUEST_MAX_TOKENS : (uint32_t)n;
            size_t k = cr_epp_keys_tokens(ids, n, bt, keys, max);
            free(ids);
            return k;
        }
        cr_epp_count(&e->errors[CR_EPP_ERR_TOKENIZE], 1);
    }
    size_t k = cr_epp_keys_estimate(r->text, r->text_len, bt, keys, max, prompt_tokens);
    if (*prompt_tokens > CR_REQUEST_MAX_TOKENS)
        *prompt_tokens = CR_REQUEST_MAX_TOKENS;
    return k;
}

/* The namespace as a Route caller names it: the model (a LoRA adapter is
 * named there; --epp-base-model names none), then the cache salt after 0x1f when there is one, as the
 * KV-event decoder joins an adapter and a salt (kvevents.h). */
static cr_status namespace_of(const cr_epp *e, const cr_openai_request *r, char *out,
                              size_t *len, cr_error *err)
{
    /* the pool's base model is no adapter: its KV events name none */
    size_t model = strcmp(r->model, e->cfg.base_model) ? r->model_len : 0;
    size_t n = model + (model && r->cache_salt_len ? 1 : 0) + r->cache_salt_len;
    if (n > CR_CORE_NAMESPACE_MAX)
        return cr_fail(err, CR_EINVAL,
                       "model and cache_salt must be at most %d bytes together, got %zu",
                       CR_CORE_NAMESPACE_MAX, n);
    memcpy(out, r->model, model);
    if (model && r->cache_salt_len)
        out[model++] = 0x1f; /* ADAPTER 0x1f SALT, as the KV-event decoder joins them */
    memcpy(out + model, r->cache_salt, r->cache_salt_len);
    *len = n;
    return CR_OK;
}

static void fail(cr_epp_picked *out, int status, cr_epp_error reason)
{
    out->status = status;
    out->reason = reason;
}

/* The door said no: shed (it queues nothing for a stream that cannot
 * wait, and a held request is not refused here). The door placed
 * nothing. */
static void refused(const cr_route_answer *a, cr_epp_picked *out, cr_error *err)
{
    out->shed = "slo";
    cr_fail(err, CR_EINVAL,
            "shed: no endpoint meets its TTFT objective, or critical traffic misses its own "
            "for the queues (the door is pressed), predicted TTFT %.0f ms (the door)",
            a->queue_wait_ms + a->prefill_ms);
    fail(out, 429, CR_EPP_ERR_SHED);
}

/* The answer's shards, best first, as "ip:port,..." into out; an address
 * that is no ip:port is left out and counted. 0 when none is left. */
static int destination_of(cr_epp *e, const cr_route_answer *a, cr_epp_picked *out)
{
    const cr_endpoints *set = cr_core_endpoints(e->core);
    size_t len = 0;
    for (uint32_t i = 0; set && i <= a->n_alternatives && i <= CR_EPP_MAX_FALLBACKS; i++) {
        uint32_t s = i ? a->alternative[i - 1] : a->shard;
        const char *addr = s < set->n_slots ? set->slot[s].address : "";
        if (!cr_epp_is_ip_port(addr)) {
            cr_epp_count(&e->bad_addresses, 1);
            continue;
        }
        size_t room = sizeof out->destination - len;
        int n = snprintf(out->destination + len, room, "%s%s", len ? "," : "", addr);
        if (n < 0 || (size_t)n >= room) { /* cannot be: sized for the longest */
            out->destination[len] = '\0';
            break;
        }
        len += (size_t)n;
    }
    cr_endpoints_release(set);
    return len > 0;
}

void cr_epp_pick_route(cr_epp *e, const cr_epp_pick *p, cr_epp_picked *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    out->shard = UINT32_MAX;
    const cr_endpoints *set = cr_core_endpoints(e->core);
    if (!set) {
        cr_fail(err, CR_EINVAL, NO_SET);
        return fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    }
    uint32_t only[CR_ENDPOINTS_MAX];
    int all;
    uint32_t n_only = allowed(e, set, p->subset, only, &all);
    char space[CR_CORE_NAMESPACE_MAX];
    cr_route_request q = {.has_owner = p->has_owner, .owner = p->owner, .space = space,
                          .request_id = p->request_id, .caller = p->caller,
                          .only = all ? NULL : only, .n_only = all ? 0 : n_only,
                          .alternatives = e->cfg.fallbacks};
    q.objective = p->objective;
    q.objective_len = p->objective_len;
    q.fairness = p->fairness;
    q.fairness_len = p->fairness_len;
    q.slo_ttft_ms = p->slo_ttft_ms;
    q.can_wait = p->can_wait;
    uint64_t *keys = NULL;
    cr_status st = CR_OK;
    if (p->subset && !n_only) {
        st = cr_fail(err, CR_EINVAL,
                     "the subset hint names no endpoint of the set with an ip:port address (%s: "
                     "\"%.96s\")",
                     CR_EPP_SUBSET_KEY, p->subset);
        fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    } else if (!n_only) {
        st = cr_fail(err, CR_EINVAL,
                     "no endpoint of the set has an ip:port address (the endpoint picker needs "
                     "them)");
        fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    } else if (p->body && (st = namespace_of(e, p->body, space, &q.space_len, err)) != CR_OK) {
        fail(out, 400, CR_EPP_ERR_BAD_BODY);
    } else if (p->body && !(keys = malloc(e->cfg.max_hashes * sizeof *keys))) {
        st = cr_fail(err, CR_ENOMEM, "out of memory");
        fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    } else if (p->body) {
        q.n_hashes = keys_of(e, set, p, keys, e->cfg.max_hashes, &q.prompt_tokens);
        q.hashes = keys;
        q.has_prompt_tokens = 1;
    }
    cr_endpoints_release(set);
    cr_route_answer a;
    if (st == CR_OK && (st = cr_core_route(e->core, &q, 1, &a, NULL, err)) != CR_OK)
        fail(out, st == CR_EINVAL ? 400 : 503,
             st == CR_EINVAL ? CR_EPP_ERR_BAD_BODY : CR_EPP_ERR_NO_ENDPOINT);
    q.hashes = NULL; /* read by the route only */
    free(keys);
    if (st != CR_OK)
        return;
    if (a.door != CR_ROUTE_DOOR_ROUTED) { /* its receipt says so, per objective */
        cr_core_receipt_route(e->core, &q, &a);
        if (a.door == CR_ROUTE_DOOR_QUEUED && a.held && p->can_wait) {
            out->held = a.held; /* its answer comes at its dispatch or deadline */
            out->prompt_tokens = q.prompt_tokens;
            return;
        }
        return refused(&a, out, err);
    }
    cr_epp_pick_answer(e, &q, &a, out, err);
}

void cr_epp_pick_answer(cr_epp *e, const cr_route_request *q, const cr_route_answer *a,
                        cr_epp_picked *out, cr_error *err)
{
    if (a->shard == CR_ROUTE_NO_SHARD) {
        cr_fail(err, CR_EINVAL, "no usable endpoint among those it may go to");
        return fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    }
    if (!destination_of(e, a, out)) { /* routed, so its work is given back at once */
        cr_outcome o = {.request_id = q->request_id};
        cr_epp_report(e, q->caller, &o);
        cr_fail(err, CR_EINVAL,
                "no endpoint to send to has an ip:port address (the endpoint picker needs them)");
        return fail(out, 503, CR_EPP_ERR_NO_ENDPOINT);
    }
    /* kept like a decision (GetDecision, WatchDecisions), so that the
     * outcome's TTFT is judged against the route's prediction */
    cr_core_receipt_route(e->core, q, a);
    out->shard = a->shard;
    cr_epp_count(&e->routed, 1);
}

void cr_epp_report(cr_epp *e, uint64_t caller, const cr_outcome *o)
{
    cr_outcome_counts counts;
    cr_error err;
    /* what the engine said may be refused; the shard and error may not */
    cr_outcome kept = {.request_id = o->request_id, .has = o->has & (CR_OUT_SHARD | CR_OUT_ERROR),
                       .shard = o->shard, .error = o->error};
    cr_outcome bare = {.request_id = o->request_id};
    if (cr_core_report_as(e->core, caller, o, 1, &counts, &err) != CR_OK &&
        cr_core_report_as(e->core, caller, &kept, 1, &counts, &err) != CR_OK)
        cr_core_report_as(e->core, caller, &bare, 1, &counts, &err);
    cr_epp_count(&e->outcomes, 1);
}

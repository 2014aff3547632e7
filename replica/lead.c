/* After the push: the leader merges every live replica's counts and, every
 * --replan-interval, plans them and publishes through the fence; a
 * follower installs the table when its generation moved. Also the first
 * contact's seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Decodes an HGETALL reply's pairs onto v (room checked by the caller);
 * returns how many; a bad pair is reported once and skipped. */
static size_t decode_hash(cr_replica *r, const redisReply *h, cr_estimator_entry *v)
{
    size_t n = 0;
    int reported = 0;
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const redisReply *f = h->element[i], *x = h->element[i + 1];
        cr_error e;
        if (cr_replica_decode(f->str, f->len, x->str, x->len, &v[n], &e) == CR_OK)
            n++;
        else if (!reported++)
            cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
    }
    return n;
}

/* HGETALL of every id in ids, pipelined, decoded into one array. */
static cr_estimator_entry *read_hashes(cr_replica *r, const redisReply *ids, size_t *n)
{
    const char *prefix_end = strstr(r->k_mine, ":r:");
    size_t plen = (size_t)(prefix_end - r->k_mine) + 3;
    char key[300];
    for (size_t i = 0; i < ids->elements; i++) {
        snprintf(key, sizeof key, "%.*s%s", (int)plen, r->k_mine, ids->element[i]->str);
        const char *argv[2] = {"HGETALL", key};
        size_t lens[2] = {7, strlen(key)};
        if (cr_link_append(&r->link, 2, argv, lens) != 0)
            return NULL;
    }
    r->link.round_trips++;
    cr_estimator_entry *v = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t i = 0; i < ids->elements; i++) {
        redisReply *h = cr_link_read(&r->link);
        if (!h) {
            free(v);
            return NULL;
        }
        size_t want = *n + h->elements / 2 + 1;
        if (h->type == REDIS_REPLY_ARRAY && want > cap) {
            cap = want * 2;
            cr_estimator_entry *g = realloc(v, cap * sizeof *v);
            if (!g) {
                freeReplyObject(h);
                free(v);
                cr_link_fail(&r->link, "out of memory reading the replicas' counts");
                return NULL;
            }
            v = g;
        }
        if (h->type == REDIS_REPLY_ARRAY)
            *n += decode_hash(r, h, v + *n);
        freeReplyObject(h);
    }
    if (!v)
        v = malloc(sizeof *v);
    return v;
}

/* Merges at wall; the merged rates kept for cr_replica_rates and (through
 * *out when not NULL, a copy) the plan. 0, or -1. */
static int merge(cr_replica *r, double wall, cr_session_rate **out, size_t *n_out)
{
    double t0 = cr_mono_s();
    char oldest[32];
    snprintf(oldest, sizeof oldest, "(%lld", (long long)((wall - r->cfg.replica_ttl_s) * 1e3));
    redisReply *ids = cr_link_cmd(&r->link, "ZRANGEBYSCORE %s %s +inf", r->k_set, oldest);
    if (!ids || ids->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(ids);
        return -1;
    }
    size_t n = 0, live = ids->elements;
    cr_estimator_entry *v = read_hashes(r, ids, &n);
    freeReplyObject(ids);
    cr_session_rate *rates = NULL;
    size_t k = 0;
    cr_error e;
    if (!v || cr_replica_merge(v, n, wall, r->half_life, &rates, &k, &e) != CR_OK) {
        free(v);
        return -1;
    }
    free(v);
    if (out && (*out = malloc((k ? k : 1) * sizeof **out)))
        memcpy(*out, rates, k * sizeof *rates);
    *n_out = k;
    pthread_mutex_lock(&r->lock);
    free(r->merged.rates);
    r->merged = (cr_merged){rates, k, wall};
    r->stats.merge_seconds = cr_mono_s() - t0;
    r->stats.replicas_seen = live;
    pthread_mutex_unlock(&r->lock);
    return out && !*out ? -1 : 0;
}

static void installed(cr_replica *r, uint64_t g, int published)
{
    pthread_mutex_lock(&r->lock);
    r->stats.generation = g;
    if (published)
        r->stats.tables_published++;
    else
        r->stats.tables_installed++;
    pthread_mutex_unlock(&r->lock);
}

/* Plans the merged rates and publishes them through the fence; installs
 * locally what Redis accepted, under its generation. */
static void plan_publish(cr_replica *r, const cr_session_rate *rates, size_t n)
{
    cr_table *t = NULL;
    uint8_t *blob = NULL;
    size_t len = 0;
    cr_error e;
    if (cr_core_cluster_plan(r->core, rates, n, &t, &e) != CR_OK ||
        cr_replica_table_encode(t, &blob, &len, &e) != CR_OK) {
        cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
        cr_table_free(t);
        return;
    }
    cr_core_stats now;
    cr_core_stats_read(r->core, &now);
    cr_publish_keys keys = {r->k_lease, r->k_table, r->k_notify, r->id};
    long long g = cr_script_publish(&r->link, &keys, blob, len, now.generation);
    free(blob);
    if (g > 0 && cr_core_install_as(r->core, t, (uint64_t)g, &e) == CR_OK) {
        installed(r, (uint64_t)g, 1);
        return;
    }
    if (g > 0) {
        cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
        return;
    }
    cr_table_free(t);
    if (g == 0) {
        cr_replica_event_to(r, CR_REPLICA_REFUSED, "the lease is no longer ours", 0,
                            r->stats.generation);
        pthread_mutex_lock(&r->lock);
        r->stats.leader = 0;
        r->stats.lease_changes++;
        pthread_mutex_unlock(&r->lock);
        cr_replica_event_to(r, CR_REPLICA_FOLLOWER, r->id, 0, r->stats.generation);
    }
}

int cr_replica_fetch_table(cr_replica *r)
{
    redisReply *g = cr_link_cmd(&r->link, "HGET %s generation", r->k_table);
    unsigned long long gen = g && g->type == REDIS_REPLY_STRING ? strtoull(g->str, NULL, 10) : 0;
    freeReplyObject(g);
    if (!gen || gen == r->stats.generation)
        return 0;
    redisReply *h = cr_link_cmd(&r->link, "HMGET %s generation blob", r->k_table);
    cr_table *t = NULL;
    cr_error e;
    int ok = h && h->type == REDIS_REPLY_ARRAY && h->elements == 2 &&
             h->element[0]->type == REDIS_REPLY_STRING && h->element[1]->type == REDIS_REPLY_STRING;
    if (ok) {
        gen = strtoull(h->element[0]->str, NULL, 10);
        if (cr_replica_table_decode(h->element[1]->str, h->element[1]->len, &t, &e) != CR_OK ||
            cr_core_install_as(r->core, t, gen, &e) != CR_OK) {
            cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
            ok = 0;
        }
    }
    freeReplyObject(h);
    if (ok)
        installed(r, gen, 0);
    return ok;
}

void cr_replica_lead_or_follow(cr_replica *r, double wall)
{
    double now = cr_mono_s();
    pthread_mutex_lock(&r->lock);
    int wanted = now < r->merged_wanted_until;
    pthread_mutex_unlock(&r->lock);
    int plan = r->stats.leader && r->replan_interval_s > 0 &&
               now - r->last_plan >= r->replan_interval_s;
    if (!r->stats.leader)
        cr_replica_fetch_table(r);
    if (isnan(wall) || !r->link.ctx || !(plan || wanted))
        return;
    cr_session_rate *rates = NULL;
    size_t n = 0;
    if (merge(r, wall, plan ? &rates : NULL, &n) == 0 && plan) {
        r->last_plan = now;
        plan_publish(r, rates, n);
    }
    free(rates);
}

void cr_replica_seed(cr_replica *r)
{
    redisReply *h = cr_link_cmd(&r->link, "HGETALL %s", r->k_mine);
    if (!h || h->type != REDIS_REPLY_ARRAY || !h->elements) {
        freeReplyObject(h);
        return;
    }
    cr_estimator_entry *v = malloc((h->elements / 2 + 1) * sizeof *v);
    size_t n = v ? decode_hash(r, h, v) : 0;
    freeReplyObject(h);
    double offset = cr_replica_offset(r);
    for (size_t i = 0; i < n; i++)
        v[i].t_last -= offset; /* back onto the core's clock */
    if (v)
        qsort(v, n, sizeof *v, cr_replica_by_owner);
    cr_error e;
    if (v && n && cr_core_seed(r->core, v, n, &e) != CR_OK)
        cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
    free(v);
}

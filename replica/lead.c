/* After the push: the leader merges every live replica's counts and, every
 * --replan-interval, plans them and publishes through the fence; a
 * follower installs the table when its generation moved. Also the first
 * contact's seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Appends src[0..k) to the growing *v. 0, or -1 out of memory (*v freed). */
static int append_entries(cr_estimator_entry **v, size_t *n, size_t *cap,
                          const cr_estimator_entry *src, size_t k)
{
    if (*n + k > *cap) {
        *cap = (*n + k) * 2 + 1;
        cr_estimator_entry *g = realloc(*v, *cap * sizeof **v);
        if (!g) {
            free(*v);
            *v = NULL;
            return -1;
        }
        *v = g;
    }
    memcpy(*v + *n, src, k * sizeof *src);
    *n += k;
    return 0;
}

/* One replica's list (its chunks in push order) as each owner's last
 * state, ascending, in a malloc'd array of *n; NULL when out of memory. A
 * bad chunk is reported and skipped. */
static cr_estimator_entry *decode_list(cr_replica *r, const redisReply *l, size_t *n)
{
    cr_estimator_entry *v = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t i = 0; l->type == REDIS_REPLY_ARRAY && i < l->elements; i++) {
        const redisReply *c = l->element[i];
        cr_estimator_entry *part;
        size_t k;
        cr_error e;
        if (c->type != REDIS_REPLY_STRING ||
            cr_replica_chunk_decode(c->str, c->len, &part, &k, &e) != CR_OK) {
            cr_replica_event_to(r, CR_REPLICA_ERROR,
                                c->type == REDIS_REPLY_STRING ? e.msg : "a chunk not a string",
                                0, 0);
            continue;
        }
        int failed = append_entries(&v, n, &cap, part, k);
        free(part);
        if (failed)
            return NULL;
    }
    long kept = cr_replica_keep_latest(v, *n);
    if (kept < 0) {
        free(v);
        return NULL;
    }
    *n = (size_t)kept;
    return v ? v : malloc(sizeof *v);
}

/* Every id's list, pipelined, each reduced to its owners' last states and
 * all of them in one array (an owner once per replica). */
static cr_estimator_entry *read_lists(cr_replica *r, const redisReply *ids, size_t *n)
{
    const char *prefix_end = strstr(r->k_mine, ":r:");
    size_t plen = (size_t)(prefix_end - r->k_mine) + 3, cap = 0;
    char key[CR_REPLICA_KEY_MAX];
    for (size_t i = 0; i < ids->elements; i++) {
        snprintf(key, sizeof key, "%.*s%s", (int)plen, r->k_mine, ids->element[i]->str);
        const char *argv[4] = {"LRANGE", key, "0", "-1"};
        size_t lens[4] = {6, strlen(key), 1, 2};
        if (cr_link_append(&r->link, 4, argv, lens) != 0)
            return NULL;
    }
    r->link.round_trips++;
    cr_estimator_entry *all = malloc(sizeof *all);
    int failed = all == NULL;
    *n = 0;
    for (size_t i = 0; i < ids->elements; i++) { /* every reply read, to stay in step */
        redisReply *l = cr_link_read(&r->link);
        size_t k = 0;
        cr_estimator_entry *v = l && !failed ? decode_list(r, l, &k) : NULL;
        failed |= !l || !v || append_entries(&all, n, &cap, v, k) != 0;
        free(v);
        freeReplyObject(l);
        if (!l)
            break;
    }
    if (failed) {
        free(all);
        if (r->link.ctx)
            cr_link_fail(&r->link, "out of memory reading the replicas' counts");
        return NULL;
    }
    return all;
}

/* Merges at wall into r->merged, for cr_replica_rates and the plan. 0, or
 * -1. */
static int merge(cr_replica *r, double wall)
{
    double t0 = cr_mono_s();
    char oldest[32];
    cr_replica_oldest(r, oldest, sizeof oldest);
    redisReply *ids = cr_link_cmd(&r->link, "ZRANGEBYSCORE %s %s +inf", r->k_set, oldest);
    if (!ids || ids->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(ids);
        return -1;
    }
    size_t n = 0, live = ids->elements;
    cr_estimator_entry *v = read_lists(r, ids, &n);
    freeReplyObject(ids);
    cr_session_rate *rates = NULL;
    size_t k = 0;
    cr_error e;
    if (!v || cr_replica_merge(v, n, wall, r->half_life, &rates, &k, &e) != CR_OK) {
        free(v);
        return -1;
    }
    free(v);
    pthread_mutex_lock(&r->lock);
    free(r->merged.rates);
    r->merged = (cr_merged){rates, k, wall};
    pthread_cond_broadcast(&r->merged_cond);
    r->stats.merge_seconds = cr_mono_s() - t0;
    r->stats.merges++;
    r->stats.replicas_seen = live;
    pthread_mutex_unlock(&r->lock);
    return 0;
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
 * locally what Redis accepted, under its generation, reported as a plan. */
static void plan_publish(cr_replica *r, const cr_session_rate *rates, size_t n)
{
    cr_table *t = NULL;
    uint8_t *blob = NULL;
    size_t len = 0;
    cr_error e;
    double t0 = cr_core_now(r->core);
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
    if (g > 0 && cr_core_install_planned(r->core, t, (uint64_t)g, t0, &e) == CR_OK) {
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
        cr_replica_set_leader(r, 0, r->stats.generation);
    }
}

uint64_t cr_replica_parse_generation(const redisReply *g)
{
    int64_t v;
    if (!g || g->type != REDIS_REPLY_STRING || !g->len || g->str[0] == '-' ||
        g->str[0] == '+' || cr_parse_i64(g->str, &v) != 0 || v < 1 ||
        (uint64_t)v > CR_CORE_MAX_GENERATION)
        return 0;
    return (uint64_t)v;
}

/* A published table this replica will not install, said and counted once
 * per reason: followers poll every tick. */
static void refuse_table(cr_replica *r, const char *why, uint64_t have)
{
    if (!cr_replica_first_time(r->refused_table, sizeof r->refused_table, why))
        return;
    pthread_mutex_lock(&r->lock);
    r->stats.tables_refused++;
    pthread_mutex_unlock(&r->lock);
    cr_replica_event_to(r, CR_REPLICA_TABLE_REFUSED, why, 0, have);
}

/* A published generation that does not move forward, or does not parse. */
static void refuse_generation(cr_replica *r, const char *text, size_t len, uint64_t have)
{
    char why[CR_ERRLEN];
    snprintf(why, sizeof why,
             "the published table's generation \"%.*s\" is refused: generations only move "
             "forward, from the installed %llu",
             (int)(len < 64 ? len : 64), text, (unsigned long long)have);
    refuse_table(r, why, have);
}

/* The generation of the core's installed table (a restored one, too). */
static uint64_t installed_generation(cr_replica *r)
{
    cr_core_plan_result now;
    cr_core_current(r->core, &now);
    uint64_t g = now.generation;
    cr_core_plan_result_free(&now);
    return g;
}

int cr_replica_fetch_table(cr_replica *r)
{
    redisReply *g = cr_link_cmd(&r->link, "HGET %s generation", r->k_table);
    uint64_t gen = cr_replica_parse_generation(g), have = installed_generation(r);
    if (g && g->type == REDIS_REPLY_STRING && gen != have && gen <= have)
        refuse_generation(r, g->str, (size_t)g->len, have);
    freeReplyObject(g);
    if (gen <= have)
        return 0;
    redisReply *h = cr_link_cmd(&r->link, "HMGET %s generation blob", r->k_table);
    cr_table *t = NULL;
    cr_error e;
    int ok = h && h->type == REDIS_REPLY_ARRAY && h->elements == 2 &&
             h->element[0]->type == REDIS_REPLY_STRING && h->element[1]->type == REDIS_REPLY_STRING;
    if (ok && cr_replica_parse_generation(h->element[0]) != gen) /* it moved since: the next tick */
        ok = 0;
    if (ok) {
        if (cr_replica_table_decode(h->element[1]->str, h->element[1]->len, &t, &e) != CR_OK) {
            cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
            ok = 0;
        } else if (cr_table_n_shards(t) != cr_core_n_shards(r->core)) {
            /* No generation in the reason: the leader republishes each
             * replan, and one misconfiguration is one refusal, not one a tick. */
            char why[CR_ERRLEN];
            snprintf(why, sizeof why,
                     "the published table routes over %u shards, this replica's --n-shards "
                     "is %u: not installed (every replica of a cluster needs the same "
                     "--n-shards)",
                     cr_table_n_shards(t), cr_core_n_shards(r->core));
            cr_table_free(t);
            refuse_table(r, why, have);
            ok = 0;
        } else if (cr_core_install_as(r->core, t, gen, &e) != CR_OK) {
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
    /* Merges for GetRates come at most every 4 merge durations, so a large
     * merge never crowds out the lease renewals. */
    int wanted = now < r->merged_wanted_until &&
                 now - r->last_merge >= 4 * r->stats.merge_seconds;
    pthread_mutex_unlock(&r->lock);
    int plan = r->stats.leader && r->replan_interval_s > 0 &&
               now - r->last_plan >= r->replan_interval_s;
    if (!r->stats.leader)
        cr_replica_fetch_table(r);
    if (isnan(wall) || !r->link.ctx || !(plan || wanted))
        return;
    r->last_merge = now;
    if (merge(r, wall) == 0 && plan) {
        r->last_plan = now;
        /* Read unlocked: only this thread replaces r->merged. */
        plan_publish(r, r->merged.rates, r->merged.n);
    }
}

void cr_replica_seed(cr_replica *r)
{
    cr_core_stats st;
    cr_core_stats_read(r->core, &st);
    if (st.tracked_owners) /* restored from --state-file: those counts are ours already */
        return;
    redisReply *l = cr_link_cmd(&r->link, "LRANGE %s 0 -1", r->k_mine);
    size_t n = 0;
    cr_estimator_entry *v = l && l->type == REDIS_REPLY_ARRAY ? decode_list(r, l, &n) : NULL;
    freeReplyObject(l);
    double offset = cr_replica_offset(r);
    for (size_t i = 0; v && i < n; i++)
        v[i].t_last -= offset; /* back onto the core's clock; still ascending */
    cr_error e;
    if (v && n && cr_core_seed(r->core, v, n, &e) != CR_OK)
        cr_replica_event_to(r, CR_REPLICA_ERROR, e.msg, 0, 0);
    free(v);
}

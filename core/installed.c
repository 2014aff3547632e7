/* The installed table: the current routing table behind a published
 * pointer, its installs (one at a time, so each plan's churn is against
 * the table it replaced), and the shards routes go over with it. */
#include <stdlib.h>

#include "internal.h"

static void installed_free(cr_ref *ref)
{
    cr_installed *t = (cr_installed *)ref; /* ref is the first member */
    cr_table_free(t->table);
    free(t);
}

cr_installed *cr_core_acquire(cr_core *c, uint64_t *generation)
{
    return (cr_installed *)cr_published_acquire(&c->table, generation);
}

void cr_installed_release(cr_installed *t) { cr_ref_release(t ? &t->ref : NULL); }

cr_installed *cr_installed_new(cr_table *table)
{
    cr_installed *t = malloc(sizeof *t);
    if (!t) {
        cr_table_free(table);
        return NULL;
    }
    cr_ref_init(&t->ref, installed_free);
    t->table = table;
    return t;
}

uint64_t cr_core_install(cr_core *c, cr_installed *t, uint64_t as)
{
    cr_ref_retain(&t->ref); /* the published slot's own */
    if (!as)
        return cr_published_swap(&c->table, &t->ref);
    cr_published_swap_as(&c->table, &t->ref, as);
    return as;
}

uint32_t cr_core_shards(cr_core *c, const cr_installed *t)
{
    uint32_t slots = atomic_load_explicit(&c->member_slots, memory_order_acquire);
    if (!slots)
        return t ? cr_table_n_shards(t->table) : c->planner.n_shards;
    if (core_now(c) >= atomic_load_explicit(&c->next_retry, memory_order_relaxed))
        cr_members_retry(c, core_now(c));
    return atomic_load_explicit(&c->member_slots, memory_order_acquire);
}

uint32_t cr_core_home_shard(cr_core *c, int64_t owner, uint32_t n_shards)
{
    return cr_router_home(c->router, owner, n_shards);
}

/* Installs hold install_lock from reading the current table to the swap,
 * so no other install comes between and the churn is against the table
 * replaced. */
double cr_core_publish(cr_core *c, cr_installed *held, int install, uint64_t as,
                       cr_core_plan_result *out)
{
    uint64_t compared = 0, generation = 0;
    pthread_mutex_lock(&c->install_lock);
    cr_installed *old = out ? cr_core_acquire(c, &compared) : NULL;
    if (install)
        generation = cr_core_install(c, held, as);
    pthread_mutex_unlock(&c->install_lock);
    double done = core_now(c);
    if (out) {
        out->churn_generation = compared;
        if (install)
            out->generation = generation;
        out->churn = cr_table_churn(old ? old->table : NULL, held->table);
    }
    cr_installed_release(old);
    return done;
}

void cr_core_current(cr_core *c, cr_core_plan_result *out)
{
    cr_installed *t = cr_core_acquire(c, &out->generation);
    out->hold = t ? &t->ref : NULL;
    out->table = t ? t->table : NULL;
}

void cr_core_set_tables_external(cr_core *c, int on) { atomic_store(&c->tables_external, !!on); }

/* The closed loop's figures: counters that never decay, and rolling sums
 * that halve every CR_LOOP_HALF_LIFE_S of core time, decayed lazily
 * when touched so each outcome costs O(1). One mutex; an outcome holds it
 * once, for a few additions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"

/* A decayed ratio num / den, both decayed alike since t. */
typedef struct rolling {
    double t, num, den;
} rolling;

typedef struct shard_fig {
    uint64_t outcomes, prompt_tokens, cached_tokens;
    rolling hit;
} shard_fig;

typedef struct term_fig {
    uint64_t samples;
    rolling ape, bias; /* den: samples, decayed */
} term_fig;

struct cr_loop_figures {
    pthread_mutex_t lock;
    uint64_t accepted, matched, rejected, observations;
    uint64_t served[2][2];
    rolling hit, hit_admitted[2];
    term_fig terms[CR_N_PATHS][CR_N_TERMS];
    uint64_t regrets[CR_N_PATHS];
    double regret_ms[CR_N_PATHS];
    shard_fig *shards;
    uint32_t shard_cap, n_shards;
};

/* Brings r to now; a clock read before another thread's add may be a
 * little behind it, which counts as no time passing. */
static void decay(rolling *r, double now)
{
    if (now > r->t) {
        double k = exp2(-(now - r->t) / CR_LOOP_HALF_LIFE_S);
        r->num *= k;
        r->den *= k;
        r->t = now;
    }
}

static void roll(rolling *r, double now, double num, double den)
{
    decay(r, now);
    r->num += num;
    r->den += den;
}

static double ratio(rolling r, double now)
{
    decay(&r, now);
    return r.den > 0 ? r.num / r.den : 0;
}

cr_loop_figures *cr_loop_figures_new(void)
{
    cr_loop_figures *f = calloc(1, sizeof *f);
    if (f)
        pthread_mutex_init(&f->lock, NULL);
    return f;
}

void cr_loop_figures_free(cr_loop_figures *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f->shards);
    free(f);
}

/* The shard's figures, the array doubled when needed; NULL when out of
 * memory (the shard's own figures are skipped then, the totals kept). */
static shard_fig *shard_at(cr_loop_figures *f, uint32_t shard)
{
    if (shard >= f->shard_cap) {
        uint32_t cap = f->shard_cap ? f->shard_cap : 64;
        while (cap <= shard)
            cap *= 2;
        shard_fig *s = realloc(f->shards, cap * sizeof *s);
        if (!s)
            return NULL;
        memset(s + f->shard_cap, 0, (cap - f->shard_cap) * sizeof *s);
        f->shards = s;
        f->shard_cap = cap;
    }
    if (shard >= f->n_shards)
        f->n_shards = shard + 1;
    return &f->shards[shard];
}

static void add_tokens(cr_loop_figures *f, const cr_loop_delta *d, double now)
{
    uint64_t hit = d->cached_tokens, all = d->prompt_tokens;
    f->served[d->admitted][1] += hit;
    f->served[d->admitted][0] += all - hit;
    roll(&f->hit, now, (double)hit, (double)all);
    roll(&f->hit_admitted[d->admitted], now, (double)hit, (double)all);
    shard_fig *s = d->has_shard ? shard_at(f, d->shard) : NULL;
    if (s) {
        s->outcomes++;
        s->prompt_tokens += all;
        s->cached_tokens += hit;
        roll(&s->hit, now, (double)hit, (double)all);
    }
}

static void add_errors(cr_loop_figures *f, const cr_loop_delta *d, double now)
{
    for (int t = 0; t < CR_N_TERMS; t++) {
        if (!(d->error_has & (1u << t)))
            continue;
        term_fig *e = &f->terms[d->path][t];
        e->samples++;
        roll(&e->ape, now, d->ape[t], 1);
        roll(&e->bias, now, d->error_ms[t], 1);
    }
}

void cr_loop_figures_add(cr_loop_figures *f, const cr_loop_delta *d, double now)
{
    pthread_mutex_lock(&f->lock);
    f->rejected += (uint64_t)d->rejected;
    f->accepted += (uint64_t)!d->rejected;
    f->matched += (uint64_t)d->matched;
    f->observations += (uint64_t)d->observed;
    if (d->has_tokens)
        add_tokens(f, d, now);
    if (d->path >= 0)
        add_errors(f, d, now);
    if (d->regret_path >= 0) {
        f->regrets[d->regret_path]++;
        f->regret_ms[d->regret_path] += d->regret_ms;
    }
    pthread_mutex_unlock(&f->lock);
}

void cr_loop_figures_read(cr_loop_figures *f, double now, cr_loop_stats *out,
                          cr_loop_shard_stats *shards, uint32_t max_shards)
{
    pthread_mutex_lock(&f->lock);
    out->outcomes_accepted = f->accepted;
    out->outcomes_matched = f->matched;
    out->outcomes_rejected = f->rejected;
    out->observations = f->observations;
    memcpy(out->served_tokens, f->served, sizeof f->served);
    out->hit_ratio = ratio(f->hit, now);
    for (int a = 0; a < 2; a++)
        out->hit_ratio_admitted[a] = ratio(f->hit_admitted[a], now);
    for (int p = 0; p < CR_N_PATHS; p++) {
        for (int t = 0; t < CR_N_TERMS; t++) {
            const term_fig *e = &f->terms[p][t];
            out->errors[p][t] = (cr_loop_error_stats){e->samples, ratio(e->ape, now),
                                                      ratio(e->bias, now)};
        }
        out->regrets[p] = f->regrets[p];
        out->regret_ms[p] = f->regret_ms[p];
    }
    out->n_shards = f->n_shards;
    for (uint32_t i = 0; i < max_shards && i < f->n_shards; i++) {
        const shard_fig *s = &f->shards[i];
        shards[i] = (cr_loop_shard_stats){s->outcomes, s->prompt_tokens, s->cached_tokens,
                                          ratio(s->hit, now)};
    }
    pthread_mutex_unlock(&f->lock);
}

/* The calibration's section of the state file (its layout: inject.h).
 * Loading parses everything into a scratch copy and checks it before the
 * injector is touched, so a bad section changes nothing. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"

#define FIT_BYTES (21 * 8 + 8 + 1)
enum { KIND_PREFILL, KIND_H2D, N_KINDS };

static void save_fit(cr_buf *b, const cr_fit *f)
{
    for (int j = 0; j < CR_FIT_MAX; j++)
        cr_buf_f64(b, f->theta[j]);
    for (int i = 0; i < CR_FIT_MAX; i++)
        for (int j = 0; j < CR_FIT_MAX; j++)
            cr_buf_f64(b, f->p[i][j]);
    cr_buf_f64(b, f->p_cap);
    for (int j = 0; j < CR_FIT_MAX; j++)
        cr_buf_f64(b, f->coef[j]);
    cr_buf_f64(b, f->err_fit);
    cr_buf_f64(b, f->err_prior);
    cr_buf_f64(b, f->weight);
    cr_buf_f64(b, f->x_min);
    cr_buf_f64(b, f->x_max);
    cr_buf_u64(b, f->n);
    cr_buf_u8(b, (uint8_t)f->adopted);
}

static const cr_fit *gpu_fit(const cr_gpu_calibration *g, int kind)
{
    return kind == KIND_PREFILL ? &g->prefill : &g->h2d;
}

void cr_injector_save_calibration(cr_injector *inj, cr_buf *b)
{
    pthread_mutex_lock(&inj->lock);
    uint32_t n = 0;
    for (size_t g = 0; g < CR_PROBE_MAX_GPUS; g++)
        for (int k = 0; k < N_KINDS; k++)
            n += gpu_fit(&inj->gpus[g], k)->n > 0;
    cr_buf_u32(b, n);
    for (uint32_t g = 0; g < CR_PROBE_MAX_GPUS; g++)
        for (int k = 0; k < N_KINDS; k++) {
            const cr_fit *f = gpu_fit(&inj->gpus[g], k);
            if (!f->n)
                continue;
            cr_buf_u32(b, g);
            cr_buf_u8(b, (uint8_t)k);
            save_fit(b, f);
        }
    const cr_link_table *t = &inj->links;
    size_t at = b->len;
    cr_buf_u32(b, 0); /* the count, patched below: only entries in use count */
    n = 0;
    for (size_t bk = 0; bk <= t->mask; bk++)
        for (int32_t i = t->buckets[bk]; i >= 0; i = t->pool[i].next) {
            const cr_link_entry *e = &t->pool[i];
            if (!e->fit.n)
                continue;
            size_t len = strlen(e->name);
            cr_buf_u8(b, (uint8_t)len);
            cr_buf_put(b, e->name, len);
            save_fit(b, &e->fit);
            n++;
        }
    if (!b->failed)
        for (int i = 0; i < 4; i++)
            b->p[at + i] = (uint8_t)(n >> (8 * i));
    pthread_mutex_unlock(&inj->lock);
}

/* Each value the RLS state may hold, for a fit of dim coefficients; err
 * names it under what. */
static cr_status load_fit(cr_cursor *c, cr_fit *f, int dim, const char *what, cr_error *err)
{
    double *v[21];
    int k = 0;
    for (int j = 0; j < CR_FIT_MAX; j++)
        v[k++] = &f->theta[j];
    for (int i = 0; i < CR_FIT_MAX; i++)
        for (int j = 0; j < CR_FIT_MAX; j++)
            v[k++] = &f->p[i][j];
    v[k++] = &f->p_cap;
    for (int j = 0; j < CR_FIT_MAX; j++)
        v[k++] = &f->coef[j];
    double *tail[5] = {&f->err_fit, &f->err_prior, &f->weight, &f->x_min, &f->x_max};
    memcpy(v + k, tail, sizeof tail);
    for (k = 0; k < 21; k++)
        *v[k] = cr_get_f64(c);
    f->n = cr_get_u64(c);
    uint8_t adopted = cr_get_u8(c);
    f->adopted = adopted;
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "calibration %s is truncated", what);
    for (k = 0; k < 21; k++)
        if (!isfinite(*v[k]))
            return cr_fail(err, CR_EINVAL, "calibration %s value %d must be finite, got %g", what,
                           k, *v[k]);
    if (f->n < 1 || adopted > 1)
        return cr_fail(err, CR_EINVAL,
                       "calibration %s must have samples >= 1 and adopted 0 or 1, got %llu, %u",
                       what, (unsigned long long)f->n, adopted);
    for (int i = 0; i < dim; i++)
        if (!(f->p[i][i] > 0))
            return cr_fail(err, CR_EINVAL, "calibration %s.p[%d][%d] must be > 0, got %g", what,
                           i, i, f->p[i][i]);
    if (!(f->p_cap > 0) || f->err_fit < 0 || f->err_prior < 0 || f->weight < 0 ||
        f->x_min > f->x_max)
        return cr_fail(err, CR_EINVAL, "calibration %s has a bound or error out of range", what);
    return CR_OK;
}

/* The section parsed, not yet applied. */
typedef struct parsed {
    cr_fit gpus[CR_PROBE_MAX_GPUS][N_KINDS]; /* n 0: none */
    size_t n_links;
    struct parsed_link {
        char name[CR_INJECT_NAME_MAX + 1];
        cr_fit fit;
    } *links;
} parsed;

static cr_status parse_gpus(cr_cursor *c, parsed *p, cr_error *err)
{
    uint32_t n = cr_get_u32(c);
    if (c->failed || !cr_cursor_holds(c, n, 5 + FIT_BYTES))
        return cr_fail(err, CR_EINVAL, "calibration gpu count %u does not fit the %zu bytes left",
                       n, c->left);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t gpu = cr_get_u32(c);
        uint8_t kind = cr_get_u8(c);
        char what[48];
        snprintf(what, sizeof what, "gpus[%u]", i);
        if (gpu >= CR_PROBE_MAX_GPUS || kind >= N_KINDS)
            return cr_fail(err, CR_EINVAL, "calibration %s names gpu %u kind %u, beyond %d, %d",
                           what, gpu, kind, CR_PROBE_MAX_GPUS - 1, N_KINDS - 1);
        cr_status st = load_fit(c, &p->gpus[gpu][kind], kind == KIND_PREFILL ? 3 : 2, what, err);
        if (st != CR_OK)
            return st;
    }
    return CR_OK;
}

static cr_status parse_links(cr_cursor *c, parsed *p, cr_error *err)
{
    uint32_t n = cr_get_u32(c);
    if (c->failed || n > CR_INJECT_MAX_LINKS || !cr_cursor_holds(c, n, 2 + FIT_BYTES))
        return cr_fail(err, CR_EINVAL,
                       "calibration link count %u must be at most %d and fit the %zu bytes left",
                       n, CR_INJECT_MAX_LINKS, c->left);
    if (!(p->links = calloc(n ? n : 1, sizeof *p->links)))
        return cr_fail(err, CR_ENOMEM, "out of memory restoring %u links", n);
    for (; p->n_links < n; p->n_links++) {
        struct parsed_link *l = &p->links[p->n_links];
        char what[48];
        snprintf(what, sizeof what, "links[%zu]", p->n_links);
        uint8_t len = cr_get_u8(c);
        const uint8_t *name = cr_get_bytes(c, len);
        if (!name || len < 1 || len > CR_INJECT_NAME_MAX || memchr(name, 0, len))
            return cr_fail(err, CR_EINVAL,
                           "calibration %s.name must be 1..%d bytes without NUL, got %u", what,
                           CR_INJECT_NAME_MAX, len);
        memcpy(l->name, name, len);
        cr_status st = load_fit(c, &l->fit, 2, what, err);
        if (st != CR_OK)
            return st;
    }
    return CR_OK;
}

static void apply(cr_injector *inj, const parsed *p)
{
    pthread_mutex_lock(&inj->lock);
    for (size_t g = 0; g < CR_PROBE_MAX_GPUS; g++) {
        inj->gpus[g].prefill = p->gpus[g][KIND_PREFILL];
        inj->gpus[g].h2d = p->gpus[g][KIND_H2D];
    }
    for (size_t i = 0; i < inj->links.cap; i++)
        inj->links.pool[i].fit.n = 0;
    for (size_t i = 0; i < p->n_links; i++)
        cr_link_table_get(&inj->links, p->links[i].name, -INFINITY)->fit = p->links[i].fit;
    pthread_mutex_unlock(&inj->lock);
}

cr_status cr_injector_load_calibration(cr_injector *inj, cr_cursor *c, int do_apply,
                                       cr_error *err)
{
    parsed *p = calloc(1, sizeof *p);
    if (!p)
        return cr_fail(err, CR_ENOMEM, "out of memory restoring the calibration");
    cr_status st = parse_gpus(c, p, err);
    if (st == CR_OK)
        st = parse_links(c, p, err);
    if (st == CR_OK && do_apply)
        apply(inj, p);
    free(p->links);
    free(p);
    return st;
}

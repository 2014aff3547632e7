/* The injector: a checked copy of the config, the reservation timelines
 * behind cr_inject_select and the calibration that cr_injector_observe
 * feeds (calibrate.c). Validation, model resolution and per-source link
 * lookup happen before the lock; under it only the calibration overlay,
 * the timeline reads, the decision arithmetic and the reservation, so that
 * concurrent callers see each other's reservations in some serial order. */
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b)
{
    return strcmp(((const cr_kv_source_spec *)a)->name, ((const cr_kv_source_spec *)b)->name);
}

static int copy_sources(cr_injector *inj, const cr_inject_config *cfg)
{
    inj->cfg.kv_sources = NULL;
    if (!cfg->n_kv_sources)
        return 0;
    size_t bytes = cfg->n_kv_sources * sizeof *cfg->kv_sources;
    if (!(inj->cfg.kv_sources = malloc(bytes)))
        return -1;
    memcpy(inj->cfg.kv_sources, cfg->kv_sources, bytes);
    qsort(inj->cfg.kv_sources, cfg->n_kv_sources, sizeof *cfg->kv_sources, by_name);
    return 0;
}

/* NULL when out of memory (or out of mutexes). */
static cr_injector *alloc_injector(const cr_inject_config *cfg)
{
    cr_injector *inj = calloc(1, sizeof *inj);
    if (!inj || pthread_mutex_init(&inj->lock, NULL) != 0) {
        free(inj);
        return NULL;
    }
    inj->cfg = *cfg;
    inj->cfg.model_config = NULL; /* the caller's; read already */
    inj->fit.lambda = exp2(-1.0 / cfg->calibration_half_life);
    inj->fit.min_samples = cfg->calibration_min_samples;
    for (size_t g = 0; g < CR_PROBE_MAX_GPUS; g++)
        inj->gpu_busy_until_ms[g] = -INFINITY;
    cr_calibration_init(inj);
    if (copy_sources(inj, cfg) == 0 &&
        cr_link_table_init(&inj->links, CR_INJECT_MAX_LINKS) == CR_OK)
        return inj;
    cr_injector_free(inj);
    return NULL;
}

cr_injector *cr_injector_new(const cr_inject_config *cfg, cr_error *err)
{
    if (cr_inject_config_check(cfg, err) != CR_OK)
        return NULL;
    cr_injector *inj = alloc_injector(cfg);
    if (!inj)
        snprintf(err->msg, sizeof err->msg, "out of memory creating the injector");
    return inj;
}

void cr_injector_free(cr_injector *inj)
{
    if (!inj)
        return;
    pthread_mutex_destroy(&inj->lock);
    cr_link_table_free(&inj->links);
    for (int g = 0; g < CR_PROBE_MAX_GPUS; g++)
        cr_pending_free(&inj->gpu_pending[g]);
    free(inj->cfg.kv_sources);
    free(inj);
}

/* The model and its labels, calibration applied. */
static cr_status resolve(cr_injector *inj, const cr_node_snapshot *snap, uint32_t gpu,
                         cr_inject_model *out, cr_inject_labels *labels, cr_error *err)
{
    if (cr_inject_model_resolve_labels(&inj->cfg, snap, gpu, out, labels, err) != CR_OK)
        return CR_EINVAL;
    pthread_mutex_lock(&inj->lock);
    cr_calibration_apply(inj, gpu, out, labels);
    pthread_mutex_unlock(&inj->lock);
    return CR_OK;
}

cr_status cr_injector_model(cr_injector *inj, const cr_node_snapshot *snap, uint32_t gpu,
                            cr_inject_model *out, cr_error *err)
{
    cr_inject_labels labels;
    if (resolve(inj, snap, gpu, out, &labels, err) != CR_OK)
        return CR_EINVAL;
    cr_inject_model_write_source(out, &labels);
    return CR_OK;
}

cr_status cr_injector_coefficients(cr_injector *inj, const cr_node_snapshot *snap,
                                   uint32_t gpu, cr_inject_model *out, cr_error *err)
{
    cr_inject_labels labels;
    cr_status st = resolve(inj, snap, gpu, out, &labels, err);
    out->source[0] = '\0';
    return st;
}

cr_inject_link cr_injector_link_prior(const cr_injector *inj, const cr_inject_model *m,
                                      const char *name)
{
    cr_kv_source_spec key;
    const cr_kv_source_spec *s = NULL;
    cr_inject_link link = {m->link_gbps, m->link_rtt_ms, 0};
    strcpy(key.name, name);    /* validated: <= CR_INJECT_NAME_MAX bytes */
    if (inj->cfg.n_kv_sources) /* bsearch's base must not be NULL */
        s = bsearch(&key, inj->cfg.kv_sources, inj->cfg.n_kv_sources, sizeof key, by_name);
    if (s) {
        link.gbps = s->gbps;
        link.rtt_ms = s->rtt_ms;
    }
    return link;
}

/* The link carries the bytes for transfer - rtt; the rtt is latency that
 * overlaps the next transfer. */
static void reserve(cr_injector *inj, const cr_inject_request *req, const cr_inject_link *links,
                    cr_inject_response *out, double now_ms)
{
    int kv = out->mode == CR_INJECT_KV_CACHE;
    double *gpu = &inj->gpu_busy_until_ms[req->gpu], back;
    double ms = kv ? out->kv.prefill_ms : out->text.prefill_ms;
    *gpu = fmax(*gpu, now_ms) + ms;
    if (inj->cfg.reservation_confirm_s > 0) {
        out->reservation = cr_pending_add(&inj->gpu_pending[req->gpu], *gpu, ms, &back);
        *gpu -= back;
    }
    if (kv)
        cr_link_table_reserve(&inj->links, out->source, now_ms,
                              out->kv.transfer_ms - links[out->source_index].rtt_ms);
}

/* Under the lock: reservations of gpu no outcome confirmed by their
 * predicted end + --reservation-confirm-s give their time back. */
void cr_injector_expire(cr_injector *inj, uint32_t gpu, double now_ms)
{
    if (inj->cfg.reservation_confirm_s <= 0)
        return;
    double back = cr_pending_expire(&inj->gpu_pending[gpu], now_ms,
                                    inj->cfg.reservation_confirm_s * 1e3);
    if (back > 0)
        inj->gpu_busy_until_ms[gpu] -= back;
}

void cr_injector_confirm(cr_injector *inj, uint32_t gpu, uint64_t reservation)
{
    if (gpu >= CR_PROBE_MAX_GPUS || !reservation)
        return;
    pthread_mutex_lock(&inj->lock);
    cr_pending_confirm(&inj->gpu_pending[gpu], reservation);
    pthread_mutex_unlock(&inj->lock);
}

uint64_t cr_injector_expired(cr_injector *inj)
{
    uint64_t n = 0;
    pthread_mutex_lock(&inj->lock);
    for (int g = 0; g < CR_PROBE_MAX_GPUS; g++)
        n += inj->gpu_pending[g].expired;
    pthread_mutex_unlock(&inj->lock);
    return n;
}

/* Under the lock: the caps on what reserve() would add (see
 * cr_inject_select), checked before anything is reserved: at most
 * --max-reservation-ms per decision, and no timeline past the horizon. */
static cr_status check_reservation(const cr_injector *inj, const cr_inject_request *req,
                                   const cr_inject_link *links, const cr_inject_response *out,
                                   double now_ms, cr_error *err)
{
    int kv = out->mode == CR_INJECT_KV_CACHE;
    double cap = inj->cfg.max_reservation_ms, horizon_ms = inj->cfg.reservation_horizon_s * 1e3;
    double prefill = kv ? out->kv.prefill_ms : out->text.prefill_ms;
    double transfer = kv ? out->kv.transfer_ms - links[out->source_index].rtt_ms : 0;
    const cr_link_entry *e = kv ? cr_link_table_find(&inj->links, out->source) : NULL;
    double gpu_ahead = fmax(inj->gpu_busy_until_ms[req->gpu] - now_ms, 0) + prefill;
    double link_ahead = (e ? fmax(e->busy_until_ms - now_ms, 0) : 0) + transfer;
    int gpu_first = prefill > cap || (transfer <= cap && gpu_ahead > horizon_ms);
    char what[CR_INJECT_NAME_MAX + 40];
    if (gpu_first)
        snprintf(what, sizeof what, "prefill on GPU %u", req->gpu);
    else
        snprintf(what, sizeof what, "link transfer from %s", out->source);
    if (prefill > cap || transfer > cap)
        return cr_fail(err, CR_EINVAL,
                       "prompt_tokens %u + knowledge_tokens %u would reserve %.0f ms of %s, "
                       "over --max-reservation-ms %g; nothing reserved",
                       req->prompt_tokens, req->knowledge_tokens,
                       gpu_first ? prefill : transfer, what, cap);
    if (gpu_ahead > horizon_ms || link_ahead > horizon_ms)
        return cr_fail(err, CR_ENOMEM,
                       "reserved %s would reach %.1f s ahead, past --reservation-horizon-s %g; "
                       "nothing reserved (retry later, or ClearReservations)",
                       what, (gpu_first ? gpu_ahead : link_ahead) / 1e3,
                       inj->cfg.reservation_horizon_s);
    return CR_OK;
}

/* Under the lock: the wait and the calibration of each source the
 * decision may pick (C > 0) and the link table tracks. */
static void track_links(const cr_injector *inj, const cr_inject_request *req,
                        const cr_inject_model *m, double now_ms, cr_inject_link *links)
{
    for (size_t i = 0; i < req->n_sources; i++) {
        const cr_link_entry *e = req->sources[i].cached_tokens > 0
                                     ? cr_link_table_find(&inj->links, req->sources[i].name)
                                     : NULL;
        if (e) {
            links[i].wait_ms = fmax(0, e->busy_until_ms - now_ms);
            cr_calibration_link(e, m, &links[i]);
        }
    }
}

cr_status cr_inject_select(cr_injector *inj, const cr_node_snapshot *snap,
                           const cr_inject_request *req, double now_ms, cr_inject_response *out,
                           cr_error *err)
{
    cr_inject_model m;
    cr_inject_labels labels;
    cr_inject_link links[CR_INJECT_MAX_SOURCES];
    if (cr_inject_request_check(req, snap, now_ms, err) != CR_OK ||
        cr_inject_model_resolve_labels(&inj->cfg, snap, req->gpu, &m, &labels, err) != CR_OK)
        return CR_EINVAL;
    for (size_t i = 0; i < req->n_sources; i++)
        links[i] = cr_injector_link_prior(inj, &m, req->sources[i].name);

    pthread_mutex_lock(&inj->lock);
    cr_calibration_apply(inj, req->gpu, &m, &labels);
    cr_injector_expire(inj, req->gpu, now_ms);
    double w = req->has_queue_wait ? req->queue_wait_ms
                                   : fmax(0, inj->gpu_busy_until_ms[req->gpu] - now_ms);
    track_links(inj, req, &m, now_ms, links);
    cr_inject_decide(&m, req, w, links, out);
    cr_status st = req->dry_run ? CR_OK : check_reservation(inj, req, links, out, now_ms, err);
    if (st == CR_OK && !req->dry_run)
        reserve(inj, req, links, out, now_ms);
    pthread_mutex_unlock(&inj->lock);
    return st;
}

/* Empties one timeline, counting it when it held time past now_ms. */
static void clear_timeline(double *busy_until_ms, double now_ms, cr_inject_cleared *out,
                           uint32_t *count)
{
    if (*busy_until_ms > now_ms) {
        out->ms += *busy_until_ms - now_ms;
        (*count)++;
    }
    *busy_until_ms = -INFINITY;
}

static void clear_links(cr_link_table *t, const char *source, double now_ms,
                        cr_inject_cleared *out)
{
    if (source) {
        cr_link_entry *e = cr_link_table_find(t, source);
        if (e)
            clear_timeline(&e->busy_until_ms, now_ms, out, &out->links);
        return;
    }
    for (size_t i = 0; i < t->cap; i++) /* free entries are idle already */
        clear_timeline(&t->pool[i].busy_until_ms, now_ms, out, &out->links);
}

cr_status cr_injector_clear(cr_injector *inj, const cr_node_snapshot *snap,
                            const cr_inject_clear *which, double now_ms, cr_inject_cleared *out,
                            cr_error *err)
{
    memset(out, 0, sizeof *out);
    size_t len = which->source ? strlen(which->source) : 1;
    if (which->has_gpu && cr_inject_check_gpu(snap, which->gpu, err) != CR_OK)
        return CR_EINVAL;
    if (len < 1 || len > CR_INJECT_NAME_MAX)
        return cr_fail(err, CR_EINVAL, "source must be 1..%d bytes, got %zu", CR_INJECT_NAME_MAX,
                       len);
    if (!isfinite(now_ms))
        return cr_fail(err, CR_EINVAL, "now_ms must be finite, got %g", now_ms);
    int all = !which->has_gpu && !which->source;
    pthread_mutex_lock(&inj->lock);
    for (uint32_t g = 0; g < CR_PROBE_MAX_GPUS; g++) {
        if (all || (which->has_gpu && g == which->gpu)) {
            clear_timeline(&inj->gpu_busy_until_ms[g], now_ms, out, &out->gpus);
            cr_pending_free(&inj->gpu_pending[g]); /* nothing left to expire */
        }
    }
    if (all || which->source)
        clear_links(&inj->links, which->source, now_ms, out);
    pthread_mutex_unlock(&inj->lock);
    return CR_OK;
}

size_t cr_injector_tracked_links(cr_injector *inj)
{
    pthread_mutex_lock(&inj->lock);
    size_t n = inj->links.used;
    pthread_mutex_unlock(&inj->lock);
    return n;
}

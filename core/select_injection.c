/* SelectInjection with its receipt: a decision that is not a dry run and
 * names a request is kept, so its outcome can be compared with what it
 * predicted. */
#include <string.h>

#include "internal.h"

/* The receipt of a decision just made against snap; 0, or -1 when it was
 * not kept (its model did not resolve, or memory ran out). */
static int keep_receipt(cr_core *c, const char *id, const cr_inject_request *req,
                        const cr_inject_response *out, const cr_node_snapshot *snap, double now,
                        cr_receipt *r)
{
    memset(r, 0, sizeof *r);
    cr_error err;
    if (cr_injector_model(c->injector, snap, req->gpu, &r->model, &err) != CR_OK)
        return -1; /* cannot happen: the selection resolved the same GPU */
    strcpy(r->request_id, id); /* length checked by cr_core_select */
    r->decided_at_s = now;
    r->prompt_tokens = req->prompt_tokens;
    r->knowledge_tokens = req->knowledge_tokens;
    r->gpu = req->gpu;
    r->n_sources = (uint32_t)req->n_sources;
    r->has_queue_wait = req->has_queue_wait;
    r->queue_wait_ms = req->has_queue_wait ? req->queue_wait_ms : 0;
    r->cached_tokens = out->source_index >= 0 ? req->sources[out->source_index].cached_tokens : 0;
    r->decision = *out;
    return cr_receipts_put(c->receipts, r);
}

cr_status cr_core_select(cr_core *c, const char *request_id, const cr_inject_request *req,
                         cr_inject_response *out, cr_error *err)
{
    size_t id_len = request_id ? strlen(request_id) : 0;
    if (id_len > CR_LOOP_REQUEST_ID_MAX)
        return cr_fail(err, CR_EINVAL, "request_id must be at most %d bytes, got %zu",
                       CR_LOOP_REQUEST_ID_MAX, id_len);
    double now = core_now(c);
    const cr_node_snapshot *snap = cr_probe_acquire(c->probe);
    cr_status st = cr_inject_select(c->injector, snap, req, now * 1e3, out, err);
    cr_receipt r;
    int kept = st == CR_OK && id_len && !req->dry_run && c->receipts &&
               keep_receipt(c, request_id, req, out, snap, now, &r) == 0;
    cr_node_snapshot_release(snap);
    if (st == CR_OK && c->hooks.selected)
        c->hooks.selected(c->hooks.ctx, out);
    if (kept && c->hooks.receipted)
        c->hooks.receipted(c->hooks.ctx, &r);
    return st;
}

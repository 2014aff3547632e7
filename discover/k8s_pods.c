/* The InferencePool and its pods as the API server sends them (GIE v1's
 * InferencePool, core/v1's Pod, PodList and watch events), read with
 * cJSON, and the endpoints they make. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

/* The string at a path of object keys, or NULL. */
static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* s copied into out when it fits; 0 when it does not (or is NULL). */
static int copy(char *out, size_t cap, const char *s)
{
    if (!s || strlen(s) >= cap)
        return 0;
    memcpy(out, s, strlen(s) + 1);
    return 1;
}

cr_status k8s_pool_parse(const char *json, k8s_pool *out, cr_error *err)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(root, "spec");
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(spec, "selector");
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(sel, "matchLabels");
    const cJSON *ports = cJSON_GetObjectItemCaseSensitive(spec, "targetPorts");
    const cJSON *x;
    cr_status st = CR_OK;
    size_t n = 0;
    memset(out, 0, sizeof *out);
    if (!root)
        st = cr_fail(err, CR_EINVAL, "the InferencePool is no JSON");
    else if (!cJSON_IsObject(labels) || !labels->child)
        st = cr_fail(err, CR_EINVAL, "the InferencePool has no spec.selector.matchLabels");
    const cJSON *each = st == CR_OK ? labels : NULL;
    cJSON_ArrayForEach(x, each)
    {
        int w = cJSON_IsString(x)
                    ? snprintf(out->selector + n, sizeof out->selector - n, "%s%s=%s",
                               n ? "," : "", x->string, x->valuestring)
                    : -1;
        if (w < 0 || (size_t)w >= sizeof out->selector - n) {
            st = cr_fail(err, CR_EINVAL, "the InferencePool's matchLabels are bad or too long");
            break;
        }
        n += (size_t)w;
    }
    if (st == CR_OK && (!cJSON_IsArray(ports) || cJSON_GetArraySize(ports) < 1 ||
                        cJSON_GetArraySize(ports) > CR_K8S_MAX_PORTS))
        st = cr_fail(err, CR_EINVAL, "the InferencePool's spec.targetPorts must hold 1..%d ports",
                     CR_K8S_MAX_PORTS);
    each = st == CR_OK ? ports : NULL;
    cJSON_ArrayForEach(x, each)
    {
        const cJSON *num = cJSON_GetObjectItemCaseSensitive(x, "number");
        if (!cJSON_IsNumber(num) || num->valuedouble < 1 || num->valuedouble > 65535 ||
            num->valuedouble != (double)num->valueint) {
            st = cr_fail(err, CR_EINVAL, "the InferencePool's spec.targetPorts[%zu].number "
                                         "must be a port, 1..65535", out->n_ports);
            break;
        }
        out->ports[out->n_ports++] = (uint32_t)num->valueint;
    }
    cJSON_Delete(root);
    return st;
}

/* A Pod object into *out; 0 without a name. */
static int pod_read(const cJSON *pod, k8s_pod *out)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(pod, "status");
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(meta, "deletionTimestamp");
    const char *phase = str_at(status, "phase", NULL), *kv;
    const cJSON *c;
    memset(out, 0, sizeof *out);
    if (!copy(out->name, sizeof out->name, str_at(meta, "name", NULL)))
        return 0;
    if (!copy(out->ip, sizeof out->ip, str_at(status, "podIP", NULL)))
        out->ip[0] = '\0';
    kv = str_at(meta, "annotations", CR_K8S_POD_ANNOTATION);
    if (!copy(out->kv, sizeof out->kv, kv))
        out->kv[0] = '\0';
    out->deleting = del && !cJSON_IsNull(del);
    out->done = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions"))
    {
        const char *type = str_at(c, "type", NULL), *v = str_at(c, "status", NULL);
        if (type && v && !strcmp(type, "Ready"))
            out->ready = !strcmp(v, "True");
    }
    return 1;
}

/* The resourceVersion of an object's metadata into rv; 0 without one. */
static int rv_read(const cJSON *o, char *rv)
{
    return copy(rv, K8S_RV_MAX + 1, str_at(cJSON_GetObjectItemCaseSensitive(o, "metadata"),
                                           "resourceVersion", NULL));
}

cr_status k8s_pods_list(k8s_pods *p, const char *json, cr_error *err)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items"), *x;
    char rv[K8S_RV_MAX + 1];
    size_t n = 0;
    cr_status st = CR_OK;
    if (!cJSON_IsArray(items) || !rv_read(root, rv))
        st = cr_fail(err, CR_EINVAL, "the pod list has no items or metadata.resourceVersion");
    else if (cJSON_GetArraySize(items) > CR_K8S_MAX_PODS)
        st = cr_fail(err, CR_EINVAL, "the pod list has %d pods, at most %d",
                     cJSON_GetArraySize(items), CR_K8S_MAX_PODS);
    k8s_pod *v = st == CR_OK ? malloc(CR_K8S_MAX_PODS * sizeof *v) : NULL;
    if (st == CR_OK && !v)
        st = cr_fail(err, CR_ENOMEM, "out of memory for the pod list");
    const cJSON *each = st == CR_OK ? items : NULL;
    cJSON_ArrayForEach(x, each)
    {
        if (!pod_read(x, &v[n++])) {
            st = cr_fail(err, CR_EINVAL, "the pod list's items[%zu] has no metadata.name", n - 1);
            break;
        }
    }
    if (st == CR_OK) {
        memcpy(p->v, v, n * sizeof *v);
        p->n = n;
        memcpy(p->rv, rv, sizeof rv);
    }
    free(v);
    cJSON_Delete(root);
    return st;
}

static size_t find(const k8s_pods *p, const char *name)
{
    size_t i = 0;
    while (i < p->n && strcmp(p->v[i].name, name))
        i++;
    return i;
}

/* An ADDED, MODIFIED or DELETED pod applied to p. */
static k8s_event pod_event(k8s_pods *p, const char *type, const cJSON *obj, cr_error *err)
{
    k8s_pod pod;
    if (!pod_read(obj, &pod)) {
        cr_fail(err, CR_EINVAL, "a %s event's pod has no metadata.name", type);
        return K8S_EVENT_ERROR;
    }
    size_t i = find(p, pod.name);
    if (!strcmp(type, "DELETED")) {
        if (i < p->n)
            p->v[i] = p->v[--p->n];
    } else if (i < p->n) {
        p->v[i] = pod;
    } else if (p->n < CR_K8S_MAX_PODS) {
        p->v[p->n++] = pod;
    } else {
        cr_fail(err, CR_EINVAL, "more than %d pods", CR_K8S_MAX_PODS);
        return K8S_EVENT_ERROR;
    }
    return K8S_EVENT_CHANGED;
}

k8s_event k8s_pods_event(k8s_pods *p, const char *line, cr_error *err)
{
    cJSON *root = cJSON_Parse(line);
    const char *type = str_at(root, "type", NULL);
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "object");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
    k8s_event ev = K8S_EVENT_ERROR;
    char text[160];
    if (!type || !cJSON_IsObject(obj)) {
        cr_fail(err, CR_EINVAL, "a watch event is no {type, object}");
    } else if (!strcmp(type, "ERROR")) {
        char *s = cJSON_PrintUnformatted(obj);
        k8s_status_text(s ? s : "", text, sizeof text);
        free(s);
        ev = cJSON_IsNumber(code) && code->valueint == 410 ? K8S_EVENT_GONE : K8S_EVENT_ERROR;
        cr_fail(err, CR_EINVAL, "the watch ended with an error: %s", text);
    } else if (!strcmp(type, "BOOKMARK")) {
        ev = rv_read(obj, p->rv) ? K8S_EVENT_BOOKMARK : K8S_EVENT_ERROR;
        if (ev == K8S_EVENT_ERROR)
            cr_fail(err, CR_EINVAL, "a BOOKMARK without metadata.resourceVersion");
    } else if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED") || !strcmp(type, "DELETED")) {
        ev = pod_event(p, type, obj, err);
        if (ev == K8S_EVENT_CHANGED)
            rv_read(obj, p->rv);
    } else {
        cr_fail(err, CR_EINVAL, "a watch event of unknown type \"%.32s\"", type);
    }
    cJSON_Delete(root);
    return ev;
}

void k8s_status_text(const char *body, char *out, size_t cap)
{
    cJSON *root = cJSON_Parse(body);
    const char *reason = str_at(root, "reason", NULL), *msg = str_at(root, "message", NULL);
    if (reason || msg)
        snprintf(out, cap, "%s: %s", reason ? reason : "", msg ? msg : "");
    else
        snprintf(out, cap, "%.100s", body);
    cJSON_Delete(root);
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const cr_endpoint_spec *)a)->id, ((const cr_endpoint_spec *)b)->id);
}

void k8s_endpoints(const k8s_pods *p, const k8s_pool *pool, const char *template,
                   cr_endpoint_spec *specs, k8s_endpoint *ep, size_t *n, size_t *skipped)
{
    cr_error unused;
    *n = *skipped = 0;
    for (size_t i = 0; i < p->n; i++) {
        const k8s_pod *pod = &p->v[i];
        if (!*pod->ip || pod->done)
            continue;
        for (size_t j = 0; j < pool->n_ports; j++) {
            k8s_endpoint *e = &ep[*n];
            int v6 = strchr(pod->ip, ':') != NULL;
            int w = pool->n_ports > 1
                        ? snprintf(e->id, sizeof e->id, "%s:%u", pod->name, pool->ports[j])
                        : snprintf(e->id, sizeof e->id, "%s", pod->name);
            if (*n == CR_ENDPOINTS_MAX || w < 0 || (size_t)w >= sizeof e->id ||
                (*pod->kv ? !copy(e->kv, sizeof e->kv, pod->kv)
                          : cr_discover_kv_address(template, pod->ip, e->kv, sizeof e->kv,
                                                   &unused) != CR_OK)) {
                ++*skipped;
                continue;
            }
            snprintf(e->address, sizeof e->address, v6 ? "[%s]:%u" : "%s:%u", pod->ip,
                     pool->ports[j]);
            specs[*n] = (cr_endpoint_spec){
                .id = e->id, .address = e->address, .kv_events = e->kv, .stated = 1,
                .state = pod->deleting ? CR_ENDPOINT_DRAINING
                         : pod->ready  ? CR_ENDPOINT_ACTIVE
                                       : CR_ENDPOINT_DOWN};
            ++*n;
        }
    }
    qsort(specs, *n, sizeof *specs, by_id);
}

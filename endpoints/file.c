/* The endpoints file (endpoints.h): YAML or JSON (JSON is YAML's flow
 * style), read with libyaml's document loader so that every error names
 * the line of the node it is about. A first pass over the parser's events
 * bounds what the loader may build (depth, nodes, one document): the
 * scanner's work per token grows with the depth, so a 1 MiB file nested
 * 100,000 deep took half a minute to refuse. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "endpoints.h"

/* What parsing keeps: the document, the file's name for messages. */
typedef struct reader {
    yaml_document_t doc;
    const char *name;
    cr_error *err;
} reader;

/* CR_EINVAL "NAME:LINE: " and the formatted why, LINE node's (1-based; 1
 * without a node). */
static cr_status bad(reader *r, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cr_status bad(reader *r, const yaml_node_t *node, const char *fmt, ...)
{
    char why[CR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return cr_fail(r->err, CR_EINVAL, "%s:%lu: %s", r->name,
                   (unsigned long)(node ? node->start_mark.line + 1 : 1), why);
}

/* The scalar's text, or NULL for another node or a scalar holding a NUL
 * byte (YAML's "\0": as a C string it would be cut there). */
static const char *scalar(const yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE)
        return NULL;
    const char *s = (const char *)n->data.scalar.value;
    return strlen(s) == n->data.scalar.length ? s : NULL;
}

/* CR_OK when value node x of entry where's key is a string without a NUL;
 * else the refusal, naming entry and key. */
static cr_status string_value(reader *r, const yaml_node_t *x, const char *where,
                              const char *key)
{
    if (x->type != YAML_SCALAR_NODE)
        return bad(r, x, "%s.%s must be a %s", where, key,
                   strcmp(key, "weight") == 0 ? "number" : "string");
    size_t len = x->data.scalar.length, nul = strlen((const char *)x->data.scalar.value);
    if (nul != len) /* SetEndpoints' words for it (wire/scan.c) */
        return bad(r, x, "%s.%s must not contain a NUL byte, found at byte %zu of %zu", where,
                   key, nul, len);
    return CR_OK;
}

/* One entry (a mapping of id, address, optional weight and kv_events) into *v, its
 * strings pointing into the document (copied out by the caller). */
static cr_status entry(reader *r, yaml_node_t *m, size_t i, cr_endpoint_spec *v)
{
    char where[48];
    snprintf(where, sizeof where, "endpoints[%zu]", i);
    if (m->type != YAML_MAPPING_NODE)
        return bad(r, m, "%s must be a mapping of id, address, weight and kv_events", where);
    *v = (cr_endpoint_spec){0};
    int weighed = 0; /* a key given twice is refused, so this loop is short */
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&r->doc, p->key);
        yaml_node_t *x = yaml_document_get_node(&r->doc, p->value);
        const char *key = scalar(k);
        if (!key || (strcmp(key, "id") && strcmp(key, "address") && strcmp(key, "weight") &&
                     strcmp(key, "kv_events")))
            return bad(r, k, "%s: unknown key (id, address, weight and kv_events are allowed)",
                       where);
        if ((strcmp(key, "id") == 0 && v->id) || (strcmp(key, "address") == 0 && v->address) ||
            (strcmp(key, "kv_events") == 0 && v->kv_events) ||
            (strcmp(key, "weight") == 0 && weighed++))
            return bad(r, k, "%s: a key given twice", where);
        cr_status st = string_value(r, x, where, key);
        if (st != CR_OK)
            return st;
        const char *val = scalar(x);
        if (strcmp(key, "weight") == 0) {
            /* the set's own rule (cr_endpoints_check), here for the line */
            cr_error why;
            int number = cr_parse_double(val, &v->weight) == 0;
            if (cr_endpoint_weight_check(where, v->weight, number ? NULL : val, &why) != CR_OK)
                return bad(r, x, "%s", why.msg);
        } else if (strcmp(key, "id") == 0) {
            v->id = val;
        } else if (strcmp(key, "kv_events") == 0) {
            v->kv_events = val;
        } else {
            v->address = val;
        }
    }
    if (!v->id)
        return bad(r, m, "%s has no id", where);
    if (!v->address)
        return bad(r, m, "%s has no address", where);
    return CR_OK;
}

/* The list under the root's "endpoints" key. */
static cr_status the_list(reader *r, yaml_node_t **list)
{
    yaml_node_t *root = yaml_document_get_root_node(&r->doc);
    if (!root)
        return bad(r, NULL, "empty file: want {\"endpoints\": [...]}");
    if (root->type != YAML_MAPPING_NODE)
        return bad(r, root, "the top level must be a mapping with the key \"endpoints\"");
    *list = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&r->doc, p->key);
        if (!scalar(k) || strcmp(scalar(k), "endpoints") != 0)
            return bad(r, k, "unknown top-level key (\"endpoints\" is the only one)");
        if (*list)
            return bad(r, k, "\"endpoints\" is given twice");
        *list = yaml_document_get_node(&r->doc, p->value);
    }
    if (!*list)
        return bad(r, root, "no \"endpoints\" key");
    if ((*list)->type != YAML_SEQUENCE_NODE)
        return bad(r, *list, "\"endpoints\" must be a list");
    return CR_OK;
}

cr_endpoint_spec *cr_endpoint_specs_copy(const cr_endpoint_spec *v, size_t n)
{
    size_t bytes = n * sizeof *v;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(v[i].id) + strlen(v[i].address) +
                 (v[i].kv_events ? strlen(v[i].kv_events) : 0) + 3;
    cr_endpoint_spec *out = malloc(bytes ? bytes : 1);
    if (!out)
        return NULL;
    char *s = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        out[i] = v[i];
        const char *kv = v[i].kv_events ? v[i].kv_events : "";
        size_t a = strlen(v[i].id) + 1, b = strlen(v[i].address) + 1, c = strlen(kv) + 1;
        out[i].id = memcpy(s, v[i].id, a);
        out[i].address = memcpy(s + a, v[i].address, b);
        out[i].kv_events = memcpy(s + a + b, kv, c);
        s += a + b + c;
    }
    return out;
}

static cr_status parse_doc(reader *r, cr_endpoint_spec **out, size_t *n)
{
    yaml_node_t *list = NULL;
    cr_status st = the_list(r, &list);
    if (st != CR_OK)
        return st;
    size_t count = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    if (count == 0)
        return bad(r, list, "endpoints must not be empty");
    if (count > CR_ENDPOINTS_MAX)
        return bad(r, list, "endpoints has %zu entries, at most %d", count, CR_ENDPOINTS_MAX);
    cr_endpoint_spec *v = calloc(count, sizeof *v);
    if (!v)
        return cr_fail(r->err, CR_ENOMEM, "out of memory for %zu endpoints", count);
    for (size_t i = 0; i < count && st == CR_OK; i++)
        st = entry(r, yaml_document_get_node(&r->doc, list->data.sequence.items.start[i]), i,
                   &v[i]);
    cr_error why;
    if (st == CR_OK && cr_endpoints_check(v, count, &why) != CR_OK) {
        /* the entry the check names, for its line */
        size_t i = 0;
        sscanf(why.msg, "endpoints[%zu]", &i);
        yaml_node_t *m = yaml_document_get_node(
            &r->doc, list->data.sequence.items.start[i < count ? i : 0]);
        st = bad(r, m, "%s", why.msg);
    }
    if (st == CR_OK && !(*out = cr_endpoint_specs_copy(v, count)))
        st = cr_fail(r->err, CR_ENOMEM, "out of memory for %zu endpoints", count);
    if (st == CR_OK)
        *n = count;
    free(v);
    return st;
}

/* The parser's problem as "NAME:LINE: problem context". */
static cr_status not_yaml(const yaml_parser_t *p, const char *name, cr_error *err)
{
    return cr_fail(err, CR_EINVAL, "%s:%lu: %s%s%s", name, (unsigned long)p->problem_mark.line + 1,
                   p->problem ? p->problem : "not YAML or JSON", p->context ? " " : "",
                   p->context ? p->context : "");
}

/* The first pass: the parser's events only, nothing built. Refuses a
 * collection nested past CR_ENDPOINTS_FILE_DEPTH, more nodes than
 * CR_ENDPOINTS_FILE_NODES and a second document (the loader would take
 * the first and drop the rest without a word), each as soon as it starts,
 * so the scanner never runs far into a hostile file. */
static cr_status bounded(const char *text, size_t len, const char *name, cr_error *err)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return cr_fail(err, CR_ENOMEM, "out of memory for a YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    cr_status st = CR_OK;
    unsigned depth = 0, nodes = 0, documents = 0;
    for (int end = 0; !end && st == CR_OK;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            st = not_yaml(&p, name, err);
            break;
        }
        unsigned long line = (unsigned long)ev.start_mark.line + 1;
        int opens = ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT;
        int node = opens || ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT;
        depth += opens;
        depth -= ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT;
        nodes += node;
        end = ev.type == YAML_STREAM_END_EVENT;
        if (ev.type == YAML_DOCUMENT_START_EVENT && ++documents > 1)
            st = cr_fail(err, CR_EINVAL,
                         "%s:%lu: a second YAML document: an endpoints file holds one", name, line);
        else if (depth > CR_ENDPOINTS_FILE_DEPTH)
            st = cr_fail(err, CR_EINVAL,
                         "%s:%lu: nested deeper than %d (an endpoints file needs 3)", name, line,
                         CR_ENDPOINTS_FILE_DEPTH);
        else if (nodes > CR_ENDPOINTS_FILE_NODES)
            st = cr_fail(err, CR_EINVAL,
                         "%s:%lu: more than %d YAML nodes (%d endpoints need at most %d)", name,
                         line, CR_ENDPOINTS_FILE_NODES, CR_ENDPOINTS_MAX,
                         CR_ENDPOINTS_FILE_NODES_NEEDED);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return st;
}

cr_status cr_endpoints_parse(const char *text, size_t len, const char *name,
                             cr_endpoint_spec **out, size_t *n, cr_error *err)
{
    *out = NULL;
    *n = 0;
    reader r = {.name = name ? name : "endpoints", .err = err};
    if (len > CR_ENDPOINTS_FILE_MAX)
        return cr_fail(err, CR_EINVAL, "%s: %zu bytes, at most %d", r.name, len,
                       CR_ENDPOINTS_FILE_MAX);
    cr_status st = bounded(text, len, r.name, err);
    if (st != CR_OK)
        return st;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return cr_fail(err, CR_ENOMEM, "out of memory for a YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &r.doc)) {
        st = not_yaml(&p, r.name, err);
        yaml_parser_delete(&p);
        return st;
    }
    st = parse_doc(&r, out, n);
    yaml_document_delete(&r.doc);
    yaml_parser_delete(&p);
    return st;
}

cr_status cr_endpoints_read_file(const char *path, cr_endpoint_spec **out, size_t *n,
                                 cr_error *err)
{
    *out = NULL;
    *n = 0;
    char *text;
    size_t len;
    cr_status st = cr_file_read(path, path, CR_ENDPOINTS_FILE_MAX, &text, &len, err);
    if (st != CR_OK)
        return st;
    st = cr_endpoints_parse(text, len, path, out, n, err);
    free(text);
    return st;
}

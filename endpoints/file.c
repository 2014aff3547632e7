/* The endpoints file (endpoints.h): YAML or JSON (JSON is YAML's flow
 * style), read with libyaml's document loader so that every error names
 * the line of the node it is about. */
#include <errno.h>
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

/* CR_EINVAL "NAME:LINE: why" for node (1-based lines). */
static cr_status bad(reader *r, const yaml_node_t *node, const char *why, const char *what)
{
    return cr_fail(r->err, CR_EINVAL, "%s:%lu: %s%s", r->name,
                   (unsigned long)(node ? node->start_mark.line + 1 : 1), why, what ? what : "");
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* One entry (a mapping of id, address and optional weight) into *v, its
 * strings pointing into the document (copied out by the caller). */
static cr_status entry(reader *r, yaml_node_t *m, size_t i, cr_endpoint_spec *v)
{
    char where[48];
    snprintf(where, sizeof where, "endpoints[%zu]", i);
    if (m->type != YAML_MAPPING_NODE)
        return bad(r, m, where, " must be a mapping of id, address and weight");
    *v = (cr_endpoint_spec){0};
    int weighed = 0; /* a key given twice is refused, so this loop is short */
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&r->doc, p->key);
        yaml_node_t *x = yaml_document_get_node(&r->doc, p->value);
        const char *key = scalar(k), *val = scalar(x);
        if (!key || (strcmp(key, "id") && strcmp(key, "address") && strcmp(key, "weight")))
            return bad(r, k, where, ": unknown key (id, address and weight are allowed)");
        if ((strcmp(key, "id") == 0 && v->id) || (strcmp(key, "address") == 0 && v->address) ||
            (strcmp(key, "weight") == 0 && weighed++))
            return bad(r, k, where, ": a key given twice");
        if (!val)
            return bad(r, x, where, strcmp(key, "id") == 0        ? ".id must be a string"
                                    : strcmp(key, "address") == 0 ? ".address must be a string"
                                                                  : ".weight must be a number");
        if (strcmp(key, "weight") == 0) {
            if (cr_parse_double(val, &v->weight) != 0 || !(v->weight > 0) ||
                v->weight > CR_ENDPOINT_WEIGHT_MAX)
                return bad(r, x, where, ".weight must be a number in (0, 1000]");
        } else if (strcmp(key, "id") == 0) {
            v->id = val;
        } else {
            v->address = val;
        }
    }
    if (!v->id)
        return bad(r, m, where, " has no id");
    if (!v->address)
        return bad(r, m, where, " has no address");
    return CR_OK;
}

/* The list under the root's "endpoints" key. */
static cr_status the_list(reader *r, yaml_node_t **list)
{
    yaml_node_t *root = yaml_document_get_root_node(&r->doc);
    if (!root)
        return bad(r, NULL, "empty file: want {\"endpoints\": [...]}", NULL);
    if (root->type != YAML_MAPPING_NODE)
        return bad(r, root, "the top level must be a mapping with the key \"endpoints\"", NULL);
    *list = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&r->doc, p->key);
        if (!scalar(k) || strcmp(scalar(k), "endpoints") != 0)
            return bad(r, k, "unknown top-level key (\"endpoints\" is the only one)", NULL);
        if (*list)
            return bad(r, k, "\"endpoints\" is given twice", NULL);
        *list = yaml_document_get_node(&r->doc, p->value);
    }
    if (!*list)
        return bad(r, root, "no \"endpoints\" key", NULL);
    if ((*list)->type != YAML_SEQUENCE_NODE)
        return bad(r, *list, "\"endpoints\" must be a list", NULL);
    return CR_OK;
}

cr_endpoint_spec *cr_endpoint_specs_copy(const cr_endpoint_spec *v, size_t n)
{
    size_t bytes = n * sizeof *v;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(v[i].id) + strlen(v[i].address) + 2;
    cr_endpoint_spec *out = malloc(bytes ? bytes : 1);
    if (!out)
        return NULL;
    char *s = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        out[i] = v[i];
        size_t a = strlen(v[i].id) + 1, b = strlen(v[i].address) + 1;
        out[i].id = memcpy(s, v[i].id, a);
        out[i].address = memcpy(s + a, v[i].address, b);
        s += a + b;
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
        return bad(r, list, "endpoints must not be empty", NULL);
    if (count > CR_ENDPOINTS_MAX)
        return cr_fail(r->err, CR_EINVAL, "%s:%lu: endpoints has %zu entries, at most %d",
                       r->name, (unsigned long)list->start_mark.line + 1, count,
                       CR_ENDPOINTS_MAX);
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
        st = bad(r, m, why.msg, NULL);
    }
    if (st == CR_OK && !(*out = cr_endpoint_specs_copy(v, count)))
        st = cr_fail(r->err, CR_ENOMEM, "out of memory for %zu endpoints", count);
    if (st == CR_OK)
        *n = count;
    free(v);
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
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return cr_fail(err, CR_ENOMEM, "out of memory for a YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    cr_status st;
    if (!yaml_parser_load(&p, &r.doc)) {
        st = cr_fail(err, CR_EINVAL, "%s:%lu: %s%s%s", r.name,
                     (unsigned long)p.problem_mark.line + 1,
                     p.problem ? p.problem : "not YAML or JSON", p.context ? " " : "",
                     p.context ? p.context : "");
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
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_fail(err, CR_EINVAL, "%s: %s", path, strerror(errno));
    char *text = malloc(CR_ENDPOINTS_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return cr_fail(err, CR_ENOMEM, "out of memory for %s", path);
    }
    size_t len = fread(text, 1, CR_ENDPOINTS_FILE_MAX + 1, f);
    int failed = ferror(f);
    fclose(f);
    cr_status st = failed ? cr_fail(err, CR_EINVAL, "%s: read error", path)
                          : cr_endpoints_parse(text, len, path, out, n, err);
    free(text);
    return st;
}

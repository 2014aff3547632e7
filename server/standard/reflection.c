#include "reflection.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "reply.h"

typedef Google__Protobuf__FileDescriptorProto FileProto;
typedef Google__Protobuf__DescriptorProto MessageProto;
typedef Grpc__Reflection__V1__ServerReflectionRequest Request;
typedef Grpc__Reflection__V1__ServerReflectionResponse Response;

typedef struct refl_file {
    char *name;
    uint8_t *bytes; /* serialized FileDescriptorProto */
    size_t len;
    size_t *deps; /* indices of its direct dependencies */
    size_t n_deps;
} refl_file;

typedef struct refl_symbol {
    char *name; /* fully qualified, no leading dot */
    size_t file;
    int is_message;
} refl_symbol;

struct cr_reflection {
    refl_file *files;
    size_t n_files;
    refl_symbol *syms;
    size_t n_syms, cap_syms;
    char **services;
    size_t n_services;
};

static int add_symbol(cr_reflection *r, const char *scope, const char *name, size_t file,
                      int is_message)
{
    if (r->n_syms == r->cap_syms) {
        size_t cap = r->cap_syms ? 2 * r->cap_syms : 64;
        refl_symbol *grown = realloc(r->syms, cap * sizeof *grown);
        if (!grown)
            return -1;
        r->syms = grown;
        r->cap_syms = cap;
    }
    size_t len = strlen(scope) + strlen(name) + 2;
    char *full = malloc(len);
    if (!full)
        return -1;
    snprintf(full, len, "%s%s%s", scope, *scope ? "." : "", name);
    r->syms[r->n_syms++] = (refl_symbol){full, file, is_message};
    return 0;
}

static int add_message(cr_reflection *r, const char *scope, const MessageProto *m, size_t file)
{
    if (add_symbol(r, scope, m->name, file, 1) != 0)
        return -1;
    const char *inner = r->syms[r->n_syms - 1].name;
    for (size_t i = 0; i < m->n_enum_type; i++)
        if (add_symbol(r, inner, m->enum_type[i]->name, file, 0) != 0)
            return -1;
    for (size_t i = 0; i < m->n_nested_type; i++)
        if (add_message(r, inner, m->nested_type[i], file) != 0)
            return -1;
    return 0;
}

static int add_service(cr_reflection *r, const FileProto *f, size_t i, size_t file)
{
    const Google__Protobuf__ServiceDescriptorProto *svc = f->service[i];
    if (add_symbol(r, f->package ? f->package : "", svc->name, file, 0) != 0)
        return -1;
    const char *full = r->syms[r->n_syms - 1].name;
    char **grown = realloc(r->services, (r->n_services + 1) * sizeof *grown);
    if (!grown || !(grown[r->n_services] = strdup(full))) {
        r->services = grown ? grown : r->services;
        return -1;
    }
    r->services = grown;
    r->n_services++;
    for (size_t m = 0; m < svc->n_method; m++)
        if (add_symbol(r, full, svc->method[m]->name, file, 0) != 0)
            return -1;
    return 0;
}

static int index_file(cr_reflection *r, const FileProto *f, size_t i)
{
    refl_file *rf = &r->files[i];
    const char *pkg = f->package ? f->package : "";
    rf->name = strdup(f->name ? f->name : "");
    rf->len = protobuf_c_message_get_packed_size(&f->base);
    rf->bytes = malloc(rf->len ? rf->len : 1);
    if (!rf->name || !rf->bytes)
        return -1;
    protobuf_c_message_pack(&f->base, rf->bytes);
    for (size_t k = 0; k < f->n_message_type; k++)
        if (add_message(r, pkg, f->message_type[k], i) != 0)
            return -1;
    for (size_t k = 0; k < f->n_enum_type; k++)
        if (add_symbol(r, pkg, f->enum_type[k]->name, i, 0) != 0)
            return -1;
    for (size_t k = 0; k < f->n_service; k++)
        if (add_service(r, f, k, i) != 0)
            return -1;
    return 0;
}

static size_t find_file(const cr_reflection *r, const char *name)
{
    for (size_t i = 0; i < r->n_files; i++)
        if (!strcmp(r->files[i].name, name))
            return i;
    return SIZE_MAX;
}

static int link_deps(cr_reflection *r, const Google__Protobuf__FileDescriptorSet *set)
{
    for (size_t i = 0; i < r->n_files; i++) {
        const FileProto *f = set->file[i];
        r->files[i].deps = calloc(f->n_dependency + 1, sizeof(size_t));
        if (!r->files[i].deps)
            return -1;
        for (size_t d = 0; d < f->n_dependency; d++) {
            size_t j = find_file(r, f->dependency[d]);
            if (j == SIZE_MAX)
                return -1; /* the set was built with --include_imports */
            r->files[i].deps[r->files[i].n_deps++] = j;
        }
    }
    return 0;
}

cr_reflection *cr_reflection_new(const uint8_t *data, size_t len)
{
    Google__Protobuf__FileDescriptorSet *set =
        google__protobuf__file_descriptor_set__unpack(NULL, len, data);
    cr_reflection *r = calloc(1, sizeof *r);
    if (!set || !r)
        goto fail;
    r->n_files = set->n_file;
    r->files = calloc(set->n_file + 1, sizeof *r->files);
    if (!r->files)
        goto fail;
    for (size_t i = 0; i < set->n_file; i++)
        if (index_file(r, set->file[i], i) != 0)
            goto fail;
    if (link_deps(r, set) != 0)
        goto fail;
    google__protobuf__file_descriptor_set__free_unpacked(set, NULL);
    return r;
fail:
    if (set)
        google__protobuf__file_descriptor_set__free_unpacked(set, NULL);
    cr_reflection_free(r);
    return NULL;
}

void cr_reflection_free(cr_reflection *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->files && i < r->n_files; i++) {
        free(r->files[i].name);
        free(r->files[i].bytes);
        free(r->files[i].deps);
    }
    for (size_t i = 0; i < r->n_syms; i++)
        free(r->syms[i].name);
    for (size_t i = 0; i < r->n_services; i++)
        free(r->services[i]);
    free(r->files);
    free(r->syms);
    free(r->services);
    free(r);
}

static const refl_symbol *find_symbol(const cr_reflection *r, const char *name)
{
    if (*name == '.')
        name++;
    for (size_t i = 0; i < r->n_syms; i++)
        if (!strcmp(r->syms[i].name, name))
            return &r->syms[i];
    return NULL;
}

/* Appends file i and, depth first, everything it imports, each once. */
static void collect(const cr_reflection *r, size_t i, unsigned char *seen, ProtobufCBinaryData *out,
                    size_t *n)
{
    if (seen[i])
        return;
    seen[i] = 1;
    out[(*n)++] = (ProtobufCBinaryData){r->files[i].len, r->files[i].bytes};
    for (size_t d = 0; d < r->files[i].n_deps; d++)
        collect(r, r->files[i].deps[d], seen, out, n);
}

typedef struct answer {
    Response resp;
    Grpc__Reflection__V1__FileDescriptorResponse files;
    Grpc__Reflection__V1__ListServiceResponse list;
    Grpc__Reflection__V1__ServiceResponse *svc, **svc_ptrs;
    Grpc__Reflection__V1__ExtensionNumberResponse ext;
    Grpc__Reflection__V1__ErrorResponse error;
    ProtobufCBinaryData *blobs;
    unsigned char *seen;
} answer;

static void answer_error(answer *a, int code, const char *fmt, const char *what)
{
    static __thread char text[256];
    snprintf(text, sizeof text, fmt, what);
    grpc__reflection__v1__error_response__init(&a->error);
    a->error.error_code = code;
    a->error.error_message = text;
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    a->resp.error_response = &a->error;
}

static void answer_file(const cr_reflection *r, answer *a, size_t file)
{
    size_t n = 0;
    a->blobs = calloc(r->n_files, sizeof *a->blobs);
    a->seen = calloc(r->n_files, 1);
    if (!a->blobs || !a->seen) {
        answer_error(a, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s", "out of memory");
        return;
    }
    collect(r, file, a->seen, a->blobs, &n);
    grpc__reflection__v1__file_descriptor_response__init(&a->files);
    a->files.n_file_descriptor_proto = n;
    a->files.file_descriptor_proto = a->blobs;
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    a->resp.file_descriptor_response = &a->files;
}

static void answer_services(const cr_reflection *r, answer *a)
{
    a->svc = calloc(r->n_services + 1, sizeof *a->svc);
    a->svc_ptrs = calloc(r->n_services + 1, sizeof *a->svc_ptrs);
    if (!a->svc || !a->svc_ptrs) {
        answer_error(a, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s", "out of memory");
        return;
    }
    for (size_t i = 0; i < r->n_services; i++) {
        grpc__reflection__v1__service_response__init(&a->svc[i]);
        a->svc[i].name = r->services[i];
        a->svc_ptrs[i] = &a->svc[i];
    }
    grpc__reflection__v1__list_service_response__init(&a->list);
    a->list.n_service = r->n_services;
    a->list.service = a->svc_ptrs;
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    a->resp.list_services_response = &a->list;
}

static void answer_extensions(answer *a, const refl_symbol *sym, const char *name)
{
    if (!sym || !sym->is_message) {
        answer_error(a, GRPC_STATUS_NOT_FOUND, "message type not found: %s", name);
        return;
    }
    grpc__reflection__v1__extension_number_response__init(&a->ext);
    a->ext.base_type_name = sym->name; /* none of our messages has extensions */
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
    a->resp.all_extension_numbers_response = &a->ext;
}

static void answer_request(const cr_reflection *r, const Request *req, answer *a)
{
    const refl_symbol *sym;
    size_t file;
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        if ((file = find_file(r, req->file_by_filename)) == SIZE_MAX)
            answer_error(a, GRPC_STATUS_NOT_FOUND, "file not found: %s", req->file_by_filename);
        else
            answer_file(r, a, file);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        if (!(sym = find_symbol(r, req->file_containing_symbol)))
            answer_error(a, GRPC_STATUS_NOT_FOUND, "symbol not found: %s",
                         req->file_containing_symbol);
        else
            answer_file(r, a, sym->file);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        answer_error(a, GRPC_STATUS_NOT_FOUND, "extension not found in %s",
                     req->file_containing_extension->containing_type);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        answer_extensions(a, find_symbol(r, req->all_extension_numbers_of_type),
                          req->all_extension_numbers_of_type);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        answer_services(r, a);
        break;
    default:
        answer_error(a, GRPC_STATUS_INVALID_ARGUMENT, "%s", "empty reflection request");
    }
}

static void reflect(void *ctx, const void *message, cr_reply *out)
{
    const Request *req = message;
    answer a;
    memset(&a, 0, sizeof a);
    grpc__reflection__v1__server_reflection_response__init(&a.resp);
    a.resp.valid_host = req->host;
    a.resp.original_request = (Request *)req;
    answer_request(ctx, req, &a);
    cr_reply_message(out, &a.resp.base, SIZE_MAX, NULL);
    free(a.blobs);
    free(a.seen);
    free(a.svc);
    free(a.svc_ptrs);
}

void cr_reflection_handle(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &grpc__reflection__v1__server_reflection_request__descriptor, data, len,
                   out, reflect);
}

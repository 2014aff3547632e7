/* record --stream: RecordArrivals fed from lines of input, one message per
 * line ("OWNER[=WEIGHT] ..." separated by spaces or commas; blank lines and
 * '#' comments skipped), each answer printed as one JSON line. */
#include <stdlib.h>
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cli.h"
#include "common.h"
#include "json.h"
#include "wire.h"

typedef struct feed {
    FILE *in;
    int omit_routes;
    char *line;
    size_t cap, lineno;
    Cacheroute__V1__RecordArrivalRequest req;
    int64_t *owners;
    double *weights;
    size_t room;
    int bad, failed; /* a bad line was read; printing failed */
} feed;

static int grow(feed *f, size_t n)
{
    if (n <= f->room)
        return 0;
    size_t room = n * 2;
    int64_t *o = realloc(f->owners, room * sizeof *o);
    if (o)
        f->owners = o;
    double *w = o ? realloc(f->weights, room * sizeof *w) : NULL;
    if (!w)
        return -1;
    f->weights = w;
    f->room = room;
    return 0;
}

/* One OWNER[=WEIGHT] token into entry n; 0, or -1 after saying why. */
static int parse_entry(feed *f, char *tok, size_t n)
{
    char *eq = strchr(tok, '=');
    if (eq)
        *eq = '\0';
    if (grow(f, n + 1) != 0) {
        fprintf(stderr, "cacheroute: line %zu: out of memory\n", f->lineno);
        return -1;
    }
    if (cr_parse_i64(tok, &f->owners[n]) != 0) {
        fprintf(stderr, "cacheroute: line %zu: owner must be a 64-bit integer, got '%s'\n",
                f->lineno, tok);
        return -1;
    }
    f->weights[n] = 0;
    if (eq && cr_parse_double(eq + 1, &f->weights[n]) != 0) {
        fprintf(stderr, "cacheroute: line %zu: weight must be a number, got '%s'\n", f->lineno,
                eq + 1);
        return -1;
    }
    return eq ? 1 : 0;
}

/* The line's entries into f->req; 0 when it has none, -1 when bad. */
static long parse_line(feed *f)
{
    size_t n = 0, weighted = 0;
    char *save, *tok = strtok_r(f->line, " \t,\r\n", &save);
    for (; tok && *tok != '#'; tok = strtok_r(NULL, " \t,\r\n", &save), n++) {
        int w = parse_entry(f, tok, n);
        if (w < 0)
            return -1;
        weighted += (size_t)w;
    }
    if (weighted && weighted != n) {
        fprintf(stderr, "cacheroute: line %zu: give a weight for every owner or for none\n",
                f->lineno);
        return -1;
    }
    cacheroute__v1__record_arrival_request__init(&f->req);
    f->req.n_owners = n;
    f->req.owners = f->owners;
    f->req.n_weights = weighted;
    f->req.weights = f->weights;
    f->req.omit_routes = f->omit_routes;
    return (long)n;
}

static const ProtobufCMessage *next_request(void *ctx)
{
    feed *f = ctx;
    while (!f->bad && !f->failed && getline(&f->line, &f->cap, f->in) >= 0) {
        f->lineno++;
        long n = parse_line(f);
        if (n > 0)
            return &f->req.base;
        f->bad = n < 0;
    }
    return NULL;
}

static int print_answer(void *ctx, ProtobufCMessage *m)
{
    feed *f = ctx;
    f->failed = cr_cli_print(m, JSON_COMPACT);
    protobuf_c_message_free_unpacked(m, NULL);
    return f->failed;
}

int cr_cli_record_stream(cr_client *c, const char *file, int omit_routes)
{
    feed f = {.in = cr_cli_open_input(file), .omit_routes = omit_routes};
    if (!f.in)
        return EXIT_USAGE;
    cr_error err;
    grpc_status_code st =
        cr_client_bidi(c, SERVICE "RecordArrivals", next_request, &f,
                       &cacheroute__v1__record_arrival_response__descriptor, print_answer, &f,
                       &err);
    if (f.in != stdin)
        fclose(f.in);
    free(f.line);
    free(f.owners);
    free(f.weights);
    if (st != GRPC_STATUS_OK) {
        fprintf(stderr, "cacheroute: %s: %s\n", cr_wire_status_name(st), err.msg);
        return EXIT_RPC;
    }
    return f.bad ? EXIT_USAGE : f.failed;
}

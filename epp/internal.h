/* The endpoint picker's parts, private to epp/: the shared handle
 * (epp.c), a ProcessingRequest read into what a stream uses (request.c),
 * the ProcessingResponse writers (reply.c), and the route and its outcome
 * (pick.c); stream.c's state machine drives them. */
#ifndef CR_EPP_INTERNAL_H
#define CR_EPP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "epp.h"
#include "tokenize.h"

/* ---- the shared handle (epp.c) ------------------------------------------ */

typedef struct cr_epp_hold cr_epp_hold;

struct cr_epp {
    cr_epp_config cfg;  /* owner_header points at owner below */
    char *owner;
    cr_core *core;
    cr_tokenizer *tokenizer; /* engine mode only */
    atomic_uint_fast64_t next_id;   /* request ids: "epp-" and this, in hex */
    atomic_uint_fast64_t next_engine; /* engine mode's round robin */
    char *base_model;        /* cfg.base_model points at it */
    atomic_uint_fast64_t open, streams, routed, outcomes, bytes_in, bytes_out, bad_addresses;
    atomic_uint_fast64_t buffered; /* request body bytes the streams hold (their capacity) */
    atomic_uint_fast64_t errors[CR_EPP_N_ERRORS];
    /* streams whose request may be held at the door (hold.c) */
    pthread_mutex_t hold_lock;
    int hold_lock_made;
    cr_epp_hold *held;      /* the list's head, under hold_lock */
    cr_ticker *dispatcher;  /* cr_epp_dispatch every cfg.dispatch_s */
};

static inline void cr_epp_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ---- held at the door (hold.c) ------------------------------------------- */

/* A stream's part in holding, in the stream. */
struct cr_epp_hold {
    cr_epp_hold *prev, *next; /* listed, under hold_lock */
    int listed;
    const char *request_id;   /* the stream's */
    void (*wake)(void *arg);  /* the host's (cr_epp_stream_wake_by); NULL: cannot wait */
    void *wake_arg;
    uint64_t handle;          /* the door's, once queued; 0 none (the stream's
                               * own: the dispatcher never reads it) */
    int parked;               /* got is the door's answer, for the wake's step */
    cr_core_dispatched got;
};

/* 1 when the core's door has a queue (--admit-max-queued > 0): a request
 * it would hold waits on its stream. */
int cr_epp_holds(cr_epp *e);
/* What the stream asks Envoy to wait for a held request's answer: the
 * door's longest wait, two dispatch periods and a second. */
double cr_epp_hold_timeout_s(cr_epp *e);
/* Lists h (its request_id and wake set) before its route. */
void cr_epp_hold_list(cr_epp *e, cr_epp_hold *h);
/* The route was not queued: unlisted. */
void cr_epp_hold_unlist(cr_epp *e, cr_epp_hold *h);
/* The door's answer parked on h into *got (1), or 0 when none came. */
int cr_epp_hold_take(cr_epp *e, cr_epp_hold *h, cr_core_dispatched *got);
/* h's stream closes: unlisted, its request taken out of the door, and a
 * route parked and not answered given back (as caller's). */
void cr_epp_hold_close(cr_epp *e, cr_epp_hold *h, uint64_t caller);
/* The lock, and with a door that holds the dispatch ticker (cr_epp_new,
 * after cr_core_set_door); stopped and destroyed by cr_epp_hold_stop. */
cr_status cr_epp_hold_start(cr_epp *e, cr_error *err);
void cr_epp_hold_stop(cr_epp *e);

/* ---- a ProcessingRequest read (request.c) -------------------------------- */

/* A slice of the unpacked message's bytes. */
typedef struct cr_epp_text {
    const char *p;
    size_t n;
} cr_epp_text;

/* Which of ProcessingRequest's oneof it is: its field number. */
enum {
    CR_EPP_IN_REQUEST_HEADERS = 2,
    CR_EPP_IN_RESPONSE_HEADERS = 3,
    CR_EPP_IN_REQUEST_BODY = 4,
    CR_EPP_IN_RESPONSE_BODY = 5,
    CR_EPP_IN_REQUEST_TRAILERS = 6,
    CR_EPP_IN_RESPONSE_TRAILERS = 7
};

/* A body mode as ProcessingMode.BodySendMode numbers it. */
enum { CR_EPP_MODE_NONE = 0, CR_EPP_MODE_BUFFERED = 2, CR_EPP_MODE_FULL_DUPLEX = 4 };

typedef struct cr_epp_in {
    int kind;                /* CR_EPP_IN_*; 0: none set */
    int end_of_stream;       /* headers' or body's */
    const uint8_t *body;     /* request_body, response_body */
    size_t body_len;
    /* Headers kept (request headers; :status of response headers), slices
     * of the message; p NULL when absent. */
    cr_epp_text method, path, content_type, owner, status;
    cr_epp_text objective, fairness, slo; /* the door's headers (epp.h) */
    const char *too_large;   /* a kept header's name when over CR_EPP_MAX_HEADER_BYTES */
    /* metadata_context: the subset hint joined "a,b,c" (malloc'd, for the
     * stream to take; NULL when none) and the served endpoint (a slice). */
    char *subset;
    int has_subset;
    cr_epp_text served;
    /* protocol_config's body modes (ProcessingMode.BodySendMode numbers). */
    int has_modes;
    int request_mode, response_mode;
    void *unpacked; /* the message, for cr_epp_in_free */
} cr_epp_in;

/* Unpacks msg (len bytes) into *in, reading owner_header's value (""
 * none). CR_EINVAL with err when it is no ProcessingRequest or sets no
 * phase; CR_ENOMEM. On success cr_epp_in_free releases it. */
cr_status cr_epp_in_read(const uint8_t *msg, size_t len, const char *owner_header, cr_epp_in *in,
                         cr_error *err);
void cr_epp_in_free(cr_epp_in *in);

/* ---- ProcessingResponse writers (reply.c) --------------------------------
 * Each appends one packed message to out: CR_OK, or CR_ENOMEM (out of
 * memory, or out full). */

/* Which phase an answer is for: ProcessingResponse's oneof field number. */
enum {
    CR_EPP_OUT_REQUEST_HEADERS = 1,
    CR_EPP_OUT_RESPONSE_HEADERS = 2,
    CR_EPP_OUT_REQUEST_BODY = 3,
    CR_EPP_OUT_RESPONSE_BODY = 4,
    CR_EPP_OUT_REQUEST_TRAILERS = 5,
    CR_EPP_OUT_RESPONSE_TRAILERS = 6
};

/* A HeadersResponse (phase 1 or 2) or BodyResponse (3 or 4), CONTINUE;
 * with destination not NULL, it sets x-gateway-destination-endpoint to it,
 * clears the route cache, and puts it under dynamic_metadata["envoy.lb"]. */
cr_status cr_epp_reply_common(cr_epp_out *out, int phase, const char *destination);
/* BodyResponse (phase 3 or 4) whose body_mutation is a streamed_response of
 * body[0..len) and end_of_stream, written by hand (the hot path). */
cr_status cr_epp_reply_chunk(cr_epp_out *out, int phase, const uint8_t *body, size_t len,
                             int end_of_stream);
/* body[0..len) as streamed chunks of at most CR_EPP_CHUNK_BYTES, the last
 * with end_of_stream (one empty chunk for an empty body). */
cr_status cr_epp_reply_chunks(cr_epp_out *out, int phase, const uint8_t *body, size_t len,
                              int end_of_stream);
/* A ProcessingResponse with no response, only override_message_timeout
 * of seconds (>= 0): Envoy waits that long for the answer still to come
 * (up to its max_message_timeout; with none configured it ignores it). */
cr_status cr_epp_reply_timeout(cr_epp_out *out, double seconds);
/* An empty TrailersResponse (phase 5 or 6). */
cr_status cr_epp_reply_trailers(cr_epp_out *out, int phase);
/* An ImmediateResponse of status, its x-cacheroute-error header and body
 * why (made printable ASCII), and details "cacheroute_epp_" + reason;
 * with shed not NULL also CR_EPP_SHED_HEADER: shed. */
cr_status cr_epp_reply_immediate(cr_epp_out *out, int status, cr_epp_error reason,
                                 const char *why, const char *shed);

/* ---- the route and its outcome (pick.c) ---------------------------------- */

/* What the route of one request needs of its stream. */
typedef struct cr_epp_pick {
    const cr_openai_request *body; /* NULL: routed by load alone */
    const uint8_t *raw;            /* the body's bytes (engine mode forwards them) */
    size_t raw_len;
    int64_t owner;
    int has_owner;
    const char *subset;            /* the hint "a,b,c"; NULL none */
    uint64_t caller;
    const char *request_id;
    /* The objective headers' (request.h's fields; 0 or NULL: none). */
    const char *objective, *fairness;
    size_t objective_len, fairness_len;
    double slo_ttft_ms;
    int can_wait; /* the stream is listed (hold.c): the door may hold it */
} cr_epp_pick;

/* What it gives: the shard routed to (UINT32_MAX when nothing was routed)
 * and the destination "ip:port[,ip:port...]"; or the status and reason to
 * answer with, why in err. */
typedef struct cr_epp_picked {
    uint32_t shard;
    /* an ip:port is at most 53 bytes ("[" 45-byte IPv6 "]:65535"), and a comma */
    char destination[(CR_EPP_MAX_FALLBACKS + 1) * 54];
    int status;            /* 0: routed; else 400, 503, 429 */
    cr_epp_error reason;
    const char *shed; /* 429 by the door: "slo" */
    uint64_t held; /* status 0 and no shard: the door holds it, this its handle */
    uint32_t prompt_tokens; /* the route's L (for a held request's receipt) */
} cr_epp_picked;

/* Routes p through the core. A route answered but with no ip:port to give
 * is released here (its outcome reported) and answered 503. */
void cr_epp_pick_route(cr_epp *e, const cr_epp_pick *p, cr_epp_picked *out, cr_error *err);

/* The destination of routed answer a to request q (its request id,
 * caller, size and objective; its hashes are not read) into out, counted
 * routed, and its receipt kept (a dispatched request's replaces its
 * queued one); or 503 (a placed route's work released) with err. */
void cr_epp_pick_answer(cr_epp *e, const cr_route_request *q, const cr_route_answer *a,
                        cr_epp_picked *out, cr_error *err);

/* 503's reason when there is no endpoint set (NULL when there is one). */
const char *cr_epp_no_set(cr_epp *e);

/* The shard of the endpoint whose address is addr (n bytes) in the
 * current set, or UINT32_MAX. */
uint32_t cr_epp_shard_of(cr_epp *e, const char *addr, size_t n);

/* Reports o for caller (cr_core_report_as), counted; should the core
 * refuse it (a usage beyond its bounds), reports the request id alone, so
 * the route's work is released whatever the engine said. */
void cr_epp_report(cr_epp *e, uint64_t caller, const cr_outcome *o);


#endif

/* cacheroute-epp-load's messages: what one HTTP request sends through an
 * ext_proc processor (packed once, at start, with protoc-c), and the
 * reading of what comes back (by hand: only the oneof case, the
 * destination header and a streamed body's length and end are needed, and
 * the driver must cost less than the server it loads). */
#ifndef CR_BENCH_EPP_LOAD_MSGS_H
#define CR_BENCH_EPP_LOAD_MSGS_H

#include <grpc/slice.h>
#include <stddef.h>

/* One conversation's request: packed ProcessingRequest messages, each a
 * grpc_slice sent as is (refcounted, never copied). */
typedef struct epp_conv {
    grpc_slice *req;       /* request_headers, then the body's chunks (last end_of_stream) */
    size_t n_req;
    grpc_slice *resp;      /* response_headers, then the SSE chunks (last end_of_stream) */
    size_t n_resp;
    size_t body_bytes;     /* the chat body's length */
    size_t sse_bytes;      /* the response body's length */
} epp_conv;

typedef struct epp_conv_opts {
    size_t body_bytes;  /* the chat body's length, about (exact unless smaller than its frame) */
    size_t chunk_bytes; /* request body chunks, at most (Envoy forwards what it reads) */
    unsigned sse_chunks; /* token chunks before the final usage chunk */
} epp_conv_opts;

/* Conversation number i (distinct prompts from its second message on;
 * every conversation shares one system prompt). 0, or -1 when out of
 * memory. */
int epp_conv_make(epp_conv *c, unsigned i, const epp_conv_opts *o);
void epp_conv_free(epp_conv *c);

/* What one ProcessingResponse is, as far as the driver checks it. */
typedef enum epp_answer_kind {
    EPP_A_BAD,             /* not a ProcessingResponse we understand */
    EPP_A_REQ_HEADERS,     /* request_headers: has_destination says if set */
    EPP_A_RESP_HEADERS,
    EPP_A_REQ_BODY,        /* request_body: body_len, end */
    EPP_A_RESP_BODY,       /* response_body: body_len, end */
    EPP_A_TRAILERS,
    EPP_A_IMMEDIATE        /* immediate_response: status */
} epp_answer_kind;

typedef struct epp_answer {
    epp_answer_kind kind;
    int has_destination;  /* x-gateway-destination-endpoint set, with clear_route_cache */
    size_t body_len;      /* a streamed_response's body bytes */
    int end;              /* its end_of_stream */
    unsigned status;      /* an immediate response's HTTP status */
} epp_answer;

/* Reads a packed ProcessingResponse of len bytes. */
void epp_answer_read(const unsigned char *msg, size_t len, epp_answer *a);

#endif

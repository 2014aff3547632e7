/* cacheroute epp: the endpoint picker of a Gateway API inference gateway,
 * over Envoy's external processing protocol (ext_proc v3, one bidirectional
 * stream per HTTP request; docs/epp.md), and gRPC-free: a stream is a state
 * machine that takes the data plane's ProcessingRequest messages as bytes
 * and gives the ProcessingResponse messages to send back as bytes, so that
 * the server's gRPC framework hosts it like any other stream, and a unit
 * test or a fuzzer drives it directly.
 *
 * What one stream does, in order:
 *   request headers   kept; the method, path, owner header, the
 *                     objective headers (CR_EPP_OBJECTIVE_HEADER ...) and the
 *                     gateway's subset hint read. Answered at once in
 *                     BUFFERED mode (CONTINUE), held in FULL_DUPLEX_STREAMED
 *                     until the destination is known. A request without a
 *                     body (a GET) is routed here, by load alone.
 *   request body      chunks gathered (at most --epp-max-body-bytes); at
 *                     end_of_stream the OpenAI body is read (openai.h), its
 *                     prompt becomes block keys (keys.h), and the core routes
 *                     it (cr_core_route, the same rule as Route) with a
 *                     request id of the stream's own. The answer sets the
 *                     header x-gateway-destination-endpoint to the best
 *                     endpoint's ip:port then --epp-fallbacks next best,
 *                     comma separated, the same value under
 *                     dynamic_metadata["envoy.lb"], and clear_route_cache;
 *                     in full duplex the held headers are answered with it,
 *                     then the body goes back as streamed_response chunks of
 *                     at most CR_EPP_CHUNK_BYTES, the last with end_of_stream;
 *                     in BUFFERED mode the body's answer carries it.
 *   held              (the door queued it; --admit-max-queued > 0) only
 *                     override_message_timeout is sent, and the answer
 *                     above comes at a wake (cr_epp_stream_wake_by) once
 *                     cr_epp_dispatch has the door's word: the route, or
 *                     429 at the deadline (docs/epp.md, "Held at the door").
 *   response headers, body chunks, trailers
 *                     echoed at once (streamed chunks in full duplex); the
 *                     status kept, the first non-empty body chunk's time is
 *                     the TTFT, and usage (prompt_tokens,
 *                     prompt_tokens_details.cached_tokens) read from the
 *                     final SSE event or the JSON body.
 *   end               the outcome (request id, shard served, tokens, TTFT,
 *                     5xx as an error) reported to the core as the stream's
 *                     caller (cr_core_report_as): it releases the route's
 *                     outstanding work. A stream that ends any other way
 *                     (the client left, reset, shutdown, an error answered)
 *                     reports what it has, so no route's work is left
 *                     behind.
 * Errors answer an ImmediateResponse with a header x-cacheroute-error
 * saying why: 400 (a body that cannot be read, naming the field; an
 * objective header out of range, naming it), 413 (over
 * --epp-max-body-bytes), 503 (no eligible endpoint), 429 (shed, with
 * CR_EPP_SHED_HEADER saying by what). A message
 * that is not a ProcessingRequest, or one out of order, ends the stream
 * with a protocol error (INVALID_ARGUMENT at the gRPC layer).
 *
 * Bounds: a stream holds its request body (at most max_body_bytes), its
 * headers (at most CR_EPP_MAX_HEADER_BYTES), the responses not yet taken,
 * and a response tail of at most CR_EPP_USAGE_TAIL_BYTES; the number of
 * streams is the gRPC layer's (--max-calls-per-method, per connection
 * --max-concurrent-streams).
 *
 * Thread safety: cr_epp is shared by every stream and thread-safe; one
 * stream is driven by one thread at a time. */
#ifndef CR_EPP_H
#define CR_EPP_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "core.h"

#define CR_EPP_CHUNK_BYTES 62000          /* a streamed body chunk sent back, at most */
#define CR_EPP_MAX_FALLBACKS CR_ROUTE_MAX_ALTERNATIVES /* --epp-fallbacks, at most */
#define CR_EPP_MAX_BODY_LIMIT (16u << 20) /* --epp-max-body-bytes, at most */
#define CR_EPP_MAX_BUFFERED_LIMIT ((uint64_t)1 << 40) /* --epp-max-buffered-bytes, at most */
#define CR_EPP_MAX_HEADER_BYTES (64u << 10) /* request headers kept, at most */
#define CR_EPP_MAX_REQUESTS_LIMIT (1u << 20) /* --epp-max-requests, at most */
#define CR_EPP_MAX_TOKENIZE_TIMEOUT 10.0    /* --epp-tokenize-timeout, seconds, at most */
#define CR_EPP_USAGE_TAIL_BYTES (16u << 10) /* response bytes kept to find usage */
#define CR_EPP_DESTINATION_HEADER "x-gateway-destination-endpoint"
#define CR_EPP_SERVED_KEY "x-gateway-destination-endpoint-served"
#define CR_EPP_SUBSET_KEY "x-gateway-destination-endpoint-subset"
#define CR_EPP_ERROR_HEADER "x-cacheroute-error"
/* The objective headers the door reads (GIE's and llm-d's names), and the
 * header a 429 says why with: "requests" (--epp-max-requests), "buffered"
 * (--epp-max-buffered-bytes) or "slo" (the door shed it, or dropped it
 * held at its deadline: no endpoint is predicted to meet its TTFT
 * objective in time); "queued" (with retry-after) is the contract's for a
 * request queued and answered at once, which the picker no longer does. */
#define CR_EPP_OBJECTIVE_HEADER "x-gateway-inference-objective"
#define CR_EPP_FAIRNESS_HEADER "x-gateway-inference-fairness-id"
#define CR_EPP_SLO_HEADER "x-llm-d-slo-ttft-ms"
#define CR_EPP_SHED_HEADER "x-cacheroute-shed"

/* How prompts become block keys (--epp-tokens). */
typedef enum cr_epp_tokens {
    CR_EPP_TOKENS_ESTIMATE, /* 4 bytes per 32-bit pseudo-token, no tokenizer */
    CR_EPP_TOKENS_ENGINE    /* an endpoint's /tokenize; estimate on failure */
} cr_epp_tokens;

/* The body mode assumed when the data plane does not announce one
 * (ProtocolConfiguration, Envoy 1.33 and later, which wins). */
typedef enum cr_epp_body_mode {
    CR_EPP_FULL_DUPLEX, /* FULL_DUPLEX_STREAMED: what GIE requires */
    CR_EPP_BUFFERED     /* BUFFERED */
} cr_epp_body_mode;

/* Why a stream ended with an error, or a request was answered with one
 * (cacheroute_epp_errors_total{reason}). Stable names: cr_epp_error_name. */
typedef enum cr_epp_error {
    CR_EPP_ERR_BAD_BODY,      /* 400: the body could not be read */
    CR_EPP_ERR_TOO_LARGE,     /* 413: over --epp-max-body-bytes */
    CR_EPP_ERR_NO_ENDPOINT,   /* 503: no eligible endpoint */
    CR_EPP_ERR_SHED,          /* 429: dropped at the door */
    CR_EPP_ERR_PROTOCOL,      /* a message that is no ProcessingRequest, or out of order */
    CR_EPP_ERR_ABANDONED,     /* the data plane left before the request was routed */
    CR_EPP_ERR_RESET,         /* the stream broke after the route: counted on the endpoint */
    CR_EPP_ERR_UPSTREAM_5XX,  /* the endpoint answered 5xx: counted on the endpoint */
    CR_EPP_ERR_TOKENIZE,      /* engine mode fell back to estimate */
    CR_EPP_N_ERRORS
} cr_epp_error;
const char *cr_epp_error_name(cr_epp_error e);

typedef struct cr_epp_config {
    uint32_t fallbacks;         /* --epp-fallbacks: next best after the best, <= CR_EPP_MAX_FALLBACKS */
    const char *owner_header;   /* --epp-owner-header (lower case), "" = none */
    size_t max_body_bytes;      /* --epp-max-body-bytes */
    cr_epp_tokens tokens;       /* --epp-tokens */
    double tokenize_timeout_s;  /* --epp-tokenize-timeout */
    cr_epp_body_mode body_mode; /* --epp-body-mode */
    uint32_t block_tokens;      /* --block-tokens: tokens per block key */
    uint32_t max_hashes;        /* --max-route-hashes: block keys a route takes (a
                                 * longer prompt keeps its first ones) */
    /* --epp-max-requests: streams open at once, 1..CR_EPP_MAX_REQUESTS_LIMIT;
     * a stream opened beyond it answers its request headers 429 (shed),
     * x-cacheroute-error "shed: N requests in flight (--epp-max-requests)". */
    uint32_t max_requests;
    /* --epp-max-buffered-bytes: request bodies all streams may hold at once
     * while they are gathered, at least max_body_bytes; a body that would
     * pass it answers 429 (shed), x-cacheroute-error "shed: request bodies
     * held would pass N bytes (--epp-max-buffered-bytes)". */
    uint64_t max_buffered_bytes;
    /* --epp-base-model: the model name the pool's engines serve as their
     * base model ("" = none). Its requests' namespace has no model part,
     * as vLLM's KV events name only a LoRA adapter (and a cache salt), so
     * that engine-mode keys match them; any other model name is an adapter
     * and its own namespace. */
    const char *base_model;
    /* How often the requests the door holds are dispatched or dropped (a
     * ticker calling cr_epp_dispatch, while a stream is held); 0 = never:
     * the caller calls cr_epp_dispatch (tests). The sidecar's is 0.01. */
    double dispatch_s;
    /* Called once per routed request with the seconds from its headers in
     * to its destination out (cacheroute_epp_decision_seconds); optional. */
    void (*decided)(void *ctx, double seconds);
    void *ctx;
} cr_epp_config;

typedef struct cr_epp cr_epp;

/* 1 when addr is "ip:port" (IPv4 a.b.c.d:port or [IPv6]:port, port
 * 1..65535): what a data plane can dial, so the one test of an endpoint's
 * address both for routing and for --check-config. Pure. */
int cr_epp_is_ip_port(const char *addr);

/* The picker over core (which must outlive it); NULL with err when cfg is
 * out of range (naming the flag: "--epp-fallbacks must be at most 8, got
 * 9"; --epp-max-body-bytes 1..CR_EPP_MAX_BODY_LIMIT, --epp-tokenize-timeout
 * in (0, 10], --epp-max-requests 1..CR_EPP_MAX_REQUESTS_LIMIT,
 * --epp-owner-header lower case, --block-tokens and --max-route-hashes at
 * least 1), out of memory, or (engine mode) the tokenizer cannot start. */
cr_epp *cr_epp_new(const cr_epp_config *cfg, cr_core *core, cr_error *err);
void cr_epp_free(cr_epp *e);
/* 1 when a stream's step may block on I/O (engine tokens: a /tokenize
 * call of at most the timeout): the host then runs steps that complete a
 * request body off its I/O threads. */
int cr_epp_may_block(const cr_epp *e);

/* Counters since start, for metrics. Thread-safe. */
typedef struct cr_epp_stats {
    uint64_t streams_open;     /* now */
    uint64_t streams;          /* opened since start */
    uint64_t buffered;         /* request body bytes held now (--epp-max-buffered-bytes) */
    uint64_t routed;           /* requests given a destination */
    uint64_t outcomes;         /* outcomes reported to the core */
    uint64_t bytes_in, bytes_out; /* HTTP body bytes seen and sent back */
    uint64_t bad_addresses;    /* endpoints left out of a destination: not ip:port */
    uint64_t errors[CR_EPP_N_ERRORS];
} cr_epp_stats;
void cr_epp_stats_read(const cr_epp *e, cr_epp_stats *out);

/* The responses one step gives, in the order to send them: each a packed
 * ProcessingResponse in malloc'd memory the host takes over (and frees). */
typedef struct cr_epp_out {
    size_t n;
    struct {
        uint8_t *data;
        size_t len;
    } msg[4 + CR_EPP_MAX_BODY_LIMIT / CR_EPP_CHUNK_BYTES + 1]; /* the largest body in chunks, and more */
} cr_epp_out;

/* What a step asks of the host. */
typedef enum cr_epp_next {
    CR_EPP_MORE,     /* send out, then read the next message */
    CR_EPP_FINISHED, /* send out (an immediate response), then end the stream OK */
    CR_EPP_FAILED    /* a protocol error: end the stream INVALID_ARGUMENT with err */
} cr_epp_next;

typedef struct cr_epp_stream cr_epp_stream;

/* A new stream, for the client whose identity has tag caller (0: none),
 * opened at now (monotonic seconds, the clock of every later call); NULL
 * when out of memory. */
cr_epp_stream *cr_epp_stream_open(cr_epp *e, uint64_t caller, double now);

/* How s's host is asked to step it with no message (msg NULL, len 0): a
 * held request's answer is ready (docs/epp.md, "Held at the door"). A
 * stream without one is never held: what the door would hold is answered
 * 429 "queued" at once. wake may be called from any thread, until the
 * stream is closed (never after cr_epp_stream_close began), and must not
 * call into the picker; set once, right after cr_epp_stream_open. */
void cr_epp_stream_wake_by(cr_epp_stream *s, void (*wake)(void *arg), void *arg);

/* One ProcessingRequest's bytes (len of them) at now: appends the
 * responses to send to *out (which the caller zeroes before the first
 * step and empties after sending) and says what next. msg NULL (len 0)
 * is a wake: the answer of a request the door held, when it came (a
 * route, or a 429 when it was dropped at its deadline); else nothing. */
cr_epp_next cr_epp_stream_step(cr_epp_stream *s, const uint8_t *msg, size_t len, double now,
                               cr_epp_out *out, cr_error *err);

/* How a stream ended, for cr_epp_stream_close. */
typedef enum cr_epp_end {
    CR_EPP_END_CLOSED, /* the data plane half-closed, or we finished it */
    CR_EPP_END_BROKEN  /* cancelled, reset, deadline, or shutdown */
} cr_epp_end;

/* Ends s at now: its outcome goes to the core if the stream routed a
 * request and has not reported it (a broken stream after a route counts
 * against the endpoint), and s is freed. Every stream opened is closed
 * exactly once. */
void cr_epp_stream_close(cr_epp_stream *s, cr_epp_end how, double now);

/* Takes what the door dispatched or dropped (cr_core_admit_dispatch)
 * to the held streams, parked and woken; a dispatched request whose
 * stream has closed has its route given back. How many. The picker's own
 * ticker calls it every cfg.dispatch_s while a stream is held (when the
 * core's door had a queue, --admit-max-queued > 0, at cr_epp_new).
 * Thread-safe. */
size_t cr_epp_dispatch(cr_epp *e);

/* Frees what out holds and empties it. */
void cr_epp_out_clear(cr_epp_out *out);

#endif

/* cacheroute request: the one shape of a Route request and the one shape
 * of a route's answer, shared by every layer between the wire and the rule:
 * the server's decoder (wire.h) and protobuf-c's fallback fill a
 * cr_route_request, the core checks it (core.h), the rule reads it
 * (route.h), and the replay fills the same struct; the rule answers a
 * cr_route_answer, for Route and RecordArrival alike, and the answer
 * writers (answer.h) write it. Below wire/ and route/ both, so that
 * neither pulls in the other: types only, and the reasons' names. */
#ifndef CR_REQUEST_H
#define CR_REQUEST_H

#include <stddef.h>
#include <stdint.h>

/* The most prompt tokens a request may say it has (inject.h's
 * CR_INJECT_MAX_TOKENS, checked equal where both are seen: core/route.c). */
#define CR_REQUEST_MAX_TOKENS 10000000
/* The most next-best shards a request may ask for (the endpoint picker's
 * fallbacks). */
#define CR_ROUTE_MAX_ALTERNATIVES 8
/* An answer's shard when the request's `only` list has no usable shard. */
#define CR_ROUTE_NO_SHARD UINT32_MAX

/* An objective's name and a fairness id, at most, in bytes (RouteItem's
 * objective and fairness_id, the picker's headers): the door's
 * CR_ADMIT_NAME_MAX, as its priorities and SLOs are its table's (admit.h;
 * the core checks them equal). */
#define CR_REQUEST_OBJECTIVE_MAX 63
#define CR_REQUEST_FAIRNESS_MAX 63
/* A request's priority is in [-CR_REQUEST_PRIORITY_MAX,
 * CR_REQUEST_PRIORITY_MAX]; its TTFT objective in [0,
 * CR_REQUEST_SLO_MAX_MS] ms. */
#define CR_REQUEST_PRIORITY_MAX 1000
#define CR_REQUEST_SLO_MAX_MS 86400000.0

/* One request to route: RouteItem's fields, as the wire gives them. The
 * pointers are the filler's (the request's own bytes, an arena); the core
 * and the rule only read them during the call. */
typedef struct cr_route_request {
    int has_owner, has_prompt_tokens;
    int64_t owner;           /* its session: recorded as one arrival */
    uint32_t prompt_tokens;  /* L; 0 = n_hashes x --block-tokens */
    const uint64_t *hashes;  /* its blocks' chained hashes, in prompt order */
    size_t n_hashes;         /* at most --max-route-hashes (the core checks) */
    const char *space;       /* its namespace (model, adapter, cache salt): space_len
                              * bytes, no NUL needed after them; NULL or 0 = none */
    size_t space_len;
    const char *request_id;  /* NUL-terminated; NULL or "" = none: an outcome
                              * with it releases the route */
    uint64_t caller;         /* who asks: authorization's tag of the client's
                              * identity, 0 = none; its request ids and its
                              * share of the outstanding work are its own */
    const uint32_t *only;    /* the shards it may go to (a gateway's subset
                              * hint), n_only of them; NULL = any */
    uint32_t n_only;
    uint32_t alternatives;   /* next-best shards wanted in the answer, at most
                              * CR_ROUTE_MAX_ALTERNATIVES; 0 = none (Route) */
    /* Its objective at the door (admit.h, docs/admission.md), every part
     * optional: none of them given, the door never looks at it. */
    const char *objective;   /* a name in the objectives' table, objective_len
                              * bytes; its priority and SLO are the defaults */
    size_t objective_len;
    int has_priority;
    int32_t priority;        /* >= 0 critical, < 0 sheddable */
    double slo_ttft_ms;      /* its TTFT SLO; 0 = the objective's, or none */
    const char *fairness;    /* its fairness id (a tenant), fairness_len bytes */
    size_t fairness_len;
    int can_wait;            /* 1: its caller can wait for a later dispatch
                              * (cr_core_admit_dispatch), so the door may
                              * hold it; 0: what it would hold is shed (a
                              * unary Route answers at once) */
    double meet_ms;          /* internal, never from the wire: the TTFT, ms, the
                              * ttft rule places it to meet when its pick would
                              * miss it (the cheapest shard predicted to meet it;
                              * none: the pick); 0 = the pick. The core's door
                              * sets it from the request's SLO (--admit-meet-slo) */
} cr_route_request;

/* The door's word on a request (admit.h's cr_admit_verdict, same values). */
#define CR_ROUTE_DOOR_ROUTED 0 /* sent on (or never looked at) */
#define CR_ROUTE_DOOR_QUEUED 1 /* held at the door: not routed yet */
#define CR_ROUTE_DOOR_SHED 2   /* refused: answer 429 */

/* The door's word as RouteDecision's door names it: "" (routed), "queued",
 * "shed"; "unknown" for any other value. A static string. Pure. */
const char *cr_route_door_name(int door);

/* Why a request went where it did. The names are stable (the wire's reason
 * strings): never rename one. */
typedef enum cr_route_reason {
    CR_ROUTE_WHY_PREFIX,       /* "prefix": the longest cached prefix */
    CR_ROUTE_WHY_SESSION,      /* "session": where its owner's conversation is */
    CR_ROUTE_WHY_PLANNED,      /* "planned": among its owner's planned shards */
    CR_ROUTE_WHY_SPILL,        /* "spill": less cached than elsewhere, a shorter queue */
    CR_ROUTE_WHY_LEAST_LOADED, /* "least_loaded": no shard holds more of it */
    CR_ROUTE_WHY_RULE,         /* "rule": --route-by plan, bounded or live */
    CR_ROUTE_N_WHY
} cr_route_reason;

/* The reason's wire name ("prefix", ...): a static string; "unknown"
 * past CR_ROUTE_N_WHY. Pure. */
const char *cr_route_reason_name(cr_route_reason r);

/* One route's answer. Route (RouteResponse's RouteDecision) reads shard,
 * admitted and the predictions; RecordArrival (RecordArrivalResponse's
 * Route) reads owner, rate, admitted and shard, and the rule fills the
 * predictions only when it makes them (ttft). */
typedef struct cr_route_answer {
    int64_t owner;            /* RecordArrival: the arrival's owner */
    double rate;              /* RecordArrival: its rate just after (the estimator's) */
    int admitted;             /* its owner is admitted in the table routed by */
    uint32_t shard;           /* where to send it */
    uint32_t cached_tokens;   /* predicted hit on that shard */
    cr_route_reason reason;
    double queue_wait_ms, prefill_ms; /* predicted */
    /* The next-best usable shards after shard, best first, as many as the
     * request asked for and there are (n_alternatives); with `only`, among
     * those. shard is CR_ROUTE_NO_SHARD when `only` holds no usable shard. */
    uint32_t n_alternatives;
    uint32_t alternative[CR_ROUTE_MAX_ALTERNATIVES];
    /* The door's word (CR_ROUTE_DOOR_*). Queued or shed, admitted is 0 and
     * the predictions are the rule's pick's, for the answer's "why";
     * queued, held is the handle its dispatch will carry. */
    int door;
    uint64_t held;
} cr_route_answer;

#endif

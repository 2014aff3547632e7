/* cacheroute endpoints: the fleet as named endpoints. A shard is an
 * endpoint's slot: an id (stable, the caller's name for the engine: a pod
 * name, say), an address (host:port or URL, opaque to cacheroute: the
 * answers carry it to the caller) and a capacity weight. A slot keeps its
 * endpoint for the endpoint's life, so a join or a removal never renumbers
 * another endpoint's shard, and the prefix index, sessions and outstanding
 * work the router keeps per shard stay with their engine.
 *
 * A set is immutable once made (published through cr_ref: the core swaps
 * in a new one per change while routes read the old); every change makes
 * the next version:
 *   join     an id that left comes back to its own gone slot; a new id
 *            takes the lowest slot that has been gone for
 *            CR_ENDPOINTS_REUSE_S seconds, else a new slot at the end
 *            (an answer naming a freed slot's old endpoint can still be
 *            read from the set that routed it), else, all 1024 taken, the
 *            slot gone longest, in quarantine or not (one this change
 *            frees included): a set of at most 1024 always applies, and no
 *            churn of ids can fill the slots
 *   remove   an id left out of a new set: its slot is GONE (its id and
 *            address kept until the slot is reused)
 *   drain    DRAINING: takes no new sessions; its sessions move when they
 *            next arrive
 *   fail     DOWN (too many errors reported): as DRAINING, until
 *            down_until_s, then ACTIVE again (tried again)
 * A new set keeps a listed endpoint's slot and state (draining and down
 * included): only a drain's undo or the retry time ends those.
 *   stated   a source that knows its endpoints' states (Kubernetes) says
 *            them in each spec: a stated DRAINING or DOWN enters that
 *            state (DOWN until the source says otherwise) and marks the
 *            slot by_source; a stated ACTIVE ends only a by_source state,
 *            never a drain or the failure detector's DOWN (their own ends
 *            apply). A drain or a failure of a by_source slot makes it
 *            the set's own again.
 *
 * Thread safety: a set is read-only, any number of threads may read one;
 * the calls that make sets are pure functions of their arguments. */
#ifndef CR_ENDPOINTS_H
#define CR_ENDPOINTS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "options.h"

#define CR_ENDPOINTS_MAX 1024           /* slots (shards), gone ones included */
#define CR_ENDPOINT_ID_MAX 128          /* bytes in an id */
#define CR_ENDPOINT_ADDRESS_MAX 256     /* bytes in an address */
#define CR_ENDPOINT_WEIGHT_MIN 0.001   /* a capacity weight's bounds, 0 aside */
#define CR_ENDPOINT_WEIGHT_MAX 1000.0
#define CR_ENDPOINTS_FILE_MAX (1 << 20) /* bytes in an endpoints file */
#define CR_ENDPOINTS_FILE_DEPTH 16      /* nesting in one (a valid one has 3) */
#define CR_ENDPOINTS_FILE_NODES 10240   /* YAML nodes in one */
#define CR_ENDPOINTS_FILE_NODES_NEEDED (9 * CR_ENDPOINTS_MAX + 3) /* the most a valid one has */
#define CR_ENDPOINTS_REUSE_S 60.0       /* a GONE slot's quarantine */

typedef enum cr_endpoint_state {
    CR_ENDPOINT_ACTIVE,
    CR_ENDPOINT_DRAINING,
    CR_ENDPOINT_DOWN,
    CR_ENDPOINT_GONE
} cr_endpoint_state;

/* "active", "draining", "down", "gone": stable names (wire and metrics). */
const char *cr_endpoint_state_name(cr_endpoint_state s);

/* One endpoint as a caller gives it (a file, SetEndpoints, DNS or
 * Kubernetes discovery). */
typedef struct cr_endpoint_spec {
    const char *id;      /* 1..CR_ENDPOINT_ID_MAX bytes, printable ASCII */
    const char *address; /* 1..CR_ENDPOINT_ADDRESS_MAX bytes, printable ASCII */
    double weight;       /* capacity: cr_endpoint_weight_check; 0 = 1 */
    /* Where its engine publishes KV events (tcp://10.0.0.5:5557): NULL or
     * "" for none, else 1..CR_ENDPOINT_ADDRESS_MAX bytes, printable ASCII. */
    const char *kv_events;
    /* 1 when the source knows the endpoint's state (Kubernetes: a pod
     * ready, terminating or not ready), given in state: ACTIVE, DRAINING
     * or DOWN. 0 (a file, SetEndpoints, DNS): states are the set's own
     * (drains, the failure detector), as before. See "stated" above. */
    int stated;
    cr_endpoint_state state;
} cr_endpoint_spec;

/* One slot of a set. */
typedef struct cr_endpoint {
    char id[CR_ENDPOINT_ID_MAX + 1];
    char address[CR_ENDPOINT_ADDRESS_MAX + 1];
    char kv_events[CR_ENDPOINT_ADDRESS_MAX + 1]; /* "" none */
    double weight;
    cr_endpoint_state state;
    uint8_t by_source;   /* 1: state is what its source stated ("stated") */
    double since_s;      /* when it entered state (the caller's clock) */
    double down_until_s; /* DOWN: when it is tried again (INFINITY: stated) */
} cr_endpoint;

/* What one change did, slot by slot (counts). */
typedef struct cr_endpoints_change {
    uint32_t joined, removed, drained, undrained, failed, recovered;
} cr_endpoints_change;

typedef struct cr_endpoints {
    cr_ref ref;
    uint64_t version;  /* 1 for the first set, one more per change */
    uint32_t n_slots;  /* shards 0..n_slots-1; slot s is shard s */
    uint32_t n_state[4]; /* slots per cr_endpoint_state */
    double next_retry_s; /* the earliest DOWN slot's down_until_s; INFINITY: none */
    /* Every change since the first set, added up (for counters); the
     * sessions that had to move, as the caller adds them. */
    uint64_t total[6]; /* joined, removed, drained, undrained, failed, recovered */
    uint64_t sessions_to_move;
    uint32_t longest_id, longest_address; /* bytes, over every slot */
    cr_endpoint slot[];
} cr_endpoints;

/* A reference more / less (cr_ref_retain / cr_ref_release); NULL is
 * ignored. */
void cr_endpoints_retain(const cr_endpoints *e);
void cr_endpoints_release(const cr_endpoints *e);

/* The one rule for a weight, SetEndpoints' and the file's alike: 0 (the
 * default, 1) or in [CR_ENDPOINT_WEIGHT_MIN, CR_ENDPOINT_WEIGHT_MAX] (the
 * ttft rule divides its costs by it). CR_OK, or CR_EINVAL "WHAT.weight
 * must be in [0.001, 1000] or 0 (for 1), got W"; with text (a file's
 * weight that is no number) W is text, quoted. Pure. */
cr_status cr_endpoint_weight_check(const char *what, double w, const char *text,
                                   cr_error *err);

/* Checks n specs as a whole set: CR_EINVAL naming the first bad entry and
 * field: "endpoints must not be empty", "endpoints has 1025 entries, at
 * most 1024", "endpoints[2].id must be 1..128 bytes of printable ASCII,
 * got \"\"", "endpoints[3].id \"vllm-0\" is given twice (endpoints[0])",
 * "endpoints[1].address must be 1..256 bytes of printable ASCII, got
 * \"\"", "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got
 * -1", "endpoints[4].kv_events must be 0..256 bytes of printable ASCII,
 * got ...", "endpoints[5].state must be active, draining or down, got 3".
 * Pure. */
cr_status cr_endpoints_check(const cr_endpoint_spec *v, size_t n, cr_error *err);

/* Parses an endpoints file's text (len bytes, at most
 * CR_ENDPOINTS_FILE_MAX): YAML or JSON, {"endpoints": [{"id": "vllm-0",
 * "address": "10.0.0.5:8000", "weight": 1, "kv_events":
 * "tcp://10.0.0.5:5557"}, ...]} ("weight" and "kv_events" optional,
 * nothing else allowed), then cr_endpoints_check. Refused before a node
 * is built: nesting past CR_ENDPOINTS_FILE_DEPTH, more than
 * CR_ENDPOINTS_FILE_NODES nodes, a second YAML document; refused after:
 * a string holding a NUL byte. *out is one malloc'd block holding the
 * specs and their strings (the caller frees it), *n entries. CR_EINVAL
 * with err "NAME:LINE: why" (name: the file's, for the message);
 * CR_ENOMEM out of memory. Pure. */
cr_status cr_endpoints_parse(const char *text, size_t len, const char *name,
                             cr_endpoint_spec **out, size_t *n, cr_error *err);

/* Reads path (cr_file_read: a regular file, never blocking; at most
 * CR_ENDPOINTS_FILE_MAX bytes, by its size before a byte is read) and
 * parses it as cr_endpoints_parse does; CR_EINVAL "PATH: cannot read:
 * why" when it cannot be read. */
cr_status cr_endpoints_read_file(const char *path, cr_endpoint_spec **out, size_t *n,
                                 cr_error *err);

/* v[0..n) and their strings copied into one malloc'd block (the caller
 * frees it); NULL when out of memory. */
cr_endpoint_spec *cr_endpoint_specs_copy(const cr_endpoint_spec *v, size_t n);

/* The set after replacing old's endpoints (NULL: none yet) by v[0..n)
 * (checked here as cr_endpoints_check does) at now: joins, removals, the
 * listed ones' addresses and weights updated, states kept. *out has one
 * reference for the caller; *chg counts what changed (all 0: nothing did,
 * and *out is a new set of the same content and the next version).
 * CR_EINVAL as cr_endpoints_check (never for want of slots: see "join"
 * above); CR_ENOMEM. Pure. */
cr_status cr_endpoints_apply(const cr_endpoints *old, const cr_endpoint_spec *v, size_t n,
                             double now, cr_endpoints **out, cr_endpoints_change *chg,
                             cr_error *err);

/* The set after slot's endpoint enters state (ACTIVE, DRAINING or DOWN;
 * DOWN until until_s) at now; a slot already in state keeps its since_s
 * (a DOWN one takes the new until_s). *out as cr_endpoints_apply; NULL
 * with CR_ENOMEM. A GONE or missing slot: CR_EINVAL. Pure. */
cr_status cr_endpoints_with_state(const cr_endpoints *old, uint32_t slot, cr_endpoint_state state,
                                  double now, double until_s, cr_endpoints **out,
                                  cr_endpoints_change *chg, cr_error *err);

/* The set made of another's slots, slot for slot (a replica adopting its
 * leader's set): slots[0..n) copied as they are (since_s and down_until_s
 * already on the caller's clock) under version. Each slot is checked:
 * n in 1..CR_ENDPOINTS_MAX, an id and an address as cr_endpoints_check wants
 * them, a weight in [CR_ENDPOINT_WEIGHT_MIN, CR_ENDPOINT_WEIGHT_MAX] (0
 * has become 1 in a slot), a known state, finite times, no id held by two
 * slots that are not GONE; CR_EINVAL naming the first bad one
 * ("slot[3].weight must be in [0.001, 1000], got 0"), nothing
 * made. *chg counts what differs from old (NULL: none yet) slot by slot,
 * and the totals go on from old's. *out as cr_endpoints_apply. Pure. */
cr_status cr_endpoints_adopt(const cr_endpoints *old, const cr_endpoint *slots, uint32_t n,
                             uint64_t version, cr_endpoints **out, cr_endpoints_change *chg,
                             cr_error *err);

/* The slot of id among the set's non-GONE endpoints, or UINT32_MAX. O(n). */
uint32_t cr_endpoints_find(const cr_endpoints *e, const char *id);

/* Which slots may take a request: usable[s] = 1 for ACTIVE slots; when
 * none is, the DRAINING ones; when none is either, the DOWN ones (some
 * shard always answers while any endpoint is listed). usable has n_slots
 * places. */
void cr_endpoints_usable(const cr_endpoints *e, uint8_t *usable);

/* ---- failure detection ---------------------------------------------------- */

/* An endpoint is DOWN after fail_errors errors reported for it (ReportOutcome's
 * error) within fail_window_s seconds, for down_s seconds, then tried
 * again. */
typedef struct cr_endpoints_config {
    uint32_t fail_errors; /* --endpoint-fail-errors; 0 = never marked down */
    double fail_window_s; /* --endpoint-fail-window */
    double down_s;        /* --endpoint-down-for */
} cr_endpoints_config;

/* Its rows (--endpoint-fail-errors, --endpoint-fail-window,
 * --endpoint-down-for): top-level keys of the effective configuration. */
extern const cr_option_table cr_endpoints_options;

#endif

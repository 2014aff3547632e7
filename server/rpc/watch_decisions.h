/* Server-streaming broadcasts: a call kind whose calls each receive every
 * message published after they arrived (WatchDecisions' receipts,
 * WatchEndpoints' changes: a hub each), through a bounded queue per
 * watcher. A method of this kind is authorized as a unary one is (rpc.h,
 * cr_access): a caller who may not call it is ended PERMISSION_DENIED.
 *
 * A watch has at most one send in flight; what is published meanwhile waits
 * in its queue. When the queue is full the oldest waiting message is dropped
 * and counted, and the count goes out with the watcher's next message as the
 * uint64 field lost_field (the hub appends that field to the encoded bytes:
 * on the protobuf wire a field appended to a message sets it), so a slow
 * watcher learns how many it lost and never holds up a publisher.
 *
 * Publishing hands the encoded bytes over once (every watcher's queue holds
 * a reference to the same slice) and starts idle watchers' sends: one short
 * lock, no wait on any client. Thread-safe. */
#ifndef CR_WATCH_DECISIONS_H
#define CR_WATCH_DECISIONS_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

/* Open watches at most; one more is answered RESOURCE_EXHAUSTED. */
#define CR_WATCH_MAX_WATCHERS 64
/* Messages waiting per watcher before the oldest is dropped. */
#define CR_WATCH_QUEUE_LEN 256

typedef struct cr_watch_hub cr_watch_hub;

typedef struct cr_watch_config {
    const ProtobufCMessageDescriptor *request; /* the call's request type */
    uint32_t lost_field; /* field number of the streamed message's uint64 lost count */
    size_t max_watchers; /* CR_WATCH_MAX_WATCHERS in the sidecar */
    size_t queue_len;    /* CR_WATCH_QUEUE_LEN in the sidecar; >= 1 */
} cr_watch_config;

/* NULL when out of memory. cr_watch_hub_free after the server is freed. */
cr_watch_hub *cr_watch_hub_new(const cr_watch_config *cfg);
void cr_watch_hub_free(cr_watch_hub *h);

/* Whether any watch is open: a publisher may skip encoding when none is. */
int cr_watch_active(cr_watch_hub *h);

/* Queues the len bytes at body (one encoded message, without the lost
 * field) for every open watch, taking body over: it must come from malloc
 * and is freed once the last watch is done with it (at once when none is
 * open). Returns the watches it reached. */
size_t cr_watch_publish(cr_watch_hub *h, uint8_t *body, size_t len);

/* Sends every open watch what it has queued and ends it with UNAVAILABLE
 * "server shutting down"; watches arriving later are ended the same way. */
void cr_watch_end(cr_watch_hub *h);

typedef struct cr_watch_stats {
    uint64_t watchers;  /* open now */
    uint64_t sent;      /* messages sent, over every watcher */
    uint64_t lost;      /* messages dropped from full queues, over every watcher */
    uint64_t refused;   /* watches refused at the CR_WATCH_MAX_WATCHERS bound */
} cr_watch_stats;

void cr_watch_stats_read(cr_watch_hub *h, cr_watch_stats *out);

/* Why the len bytes at req are not a request the hub's calls accept (the
 * text, err->msg), or NULL when they are: the first thing a call is
 * checked for. Thread-safe; the hub is only read. */
const char *cr_watch_request_error(const cr_watch_hub *h, const uint8_t *req, size_t len,
                                   cr_error *err);

/* The call kind; the method's ctx is the cr_watch_hub. The request is read
 * (a malformed one ends the call INVALID_ARGUMENT) but has no fields the
 * hub acts on. */
extern const cr_call_kind cr_watch_kind;

#endif

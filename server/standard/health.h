/* grpc.health.v1.Health for "", "cacheroute.v1.CacheRoute",
 * "envoy.service.ext_proc.v3.ExternalProcessor", "liveness" and
 * "readiness" (all SERVING, or all NOT_SERVING through a drain): Check, and
 * Watch streams that are pushed every change. Thread-safe. */
#ifndef CR_HEALTH_H
#define CR_HEALTH_H

#include "rpc.h"

typedef struct cr_health cr_health;

cr_health *cr_health_new(void);
void cr_health_free(cr_health *h);

/* Sets both services SERVING (1) or NOT_SERVING (0) and notifies watchers. */
void cr_health_set_serving(cr_health *h, int serving);

/* Sends every open Watch its last status and ends it with UNAVAILABLE;
 * Watch calls arriving later are ended the same way. */
void cr_health_end_watches(cr_health *h);

/* Unary handler for Check; ctx is the cr_health. */
void cr_health_check(void *ctx, const uint8_t *req, size_t len, cr_reply *out);

/* The call kind for Watch; the method's ctx is the cr_health. */
extern const cr_call_kind cr_health_watch_kind;

#endif

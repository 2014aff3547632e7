/* Shared between the metrics registry and its HTTP front. */
#ifndef CR_METRICS_INTERNAL_H
#define CR_METRICS_INTERNAL_H

#include "metrics.h"

typedef struct cr_metrics_http cr_metrics_http;

/* Where the registry keeps its HTTP server (NULL when not serving). */
cr_metrics_http **cr_metrics_http_slot(cr_metrics *m);

#endif

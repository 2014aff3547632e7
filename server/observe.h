/* What the sidecar makes of the core's reports: metrics and log lines, and
 * the scrape-time gauges read from the core. */
#ifndef CR_OBSERVE_H
#define CR_OBSERVE_H

#include "core.h"
#include "metrics.h"

/* Hooks that count into m and log; m must outlive the core. */
cr_core_hooks cr_observe_hooks(cr_metrics *m);

/* A cr_metrics_sample_fn with ctx = the cr_core: estimator, installed table,
 * probed node and cost-model gauges. */
void cr_observe_gauges(void *ctx, cr_page *page);

#endif

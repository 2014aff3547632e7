/* Sidecar configuration: command-line flags, each with a CACHEROUTE_*
 * environment variable (flags win), validated up front. */
#ifndef CR_CONFIG_H
#define CR_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "estimator.h"
#include "inject.h"
#include "log.h"
#include "planner.h"

typedef struct cr_string_list {
    char **items;
    size_t n;
} cr_string_list;

typedef struct cr_config {
    char *listen;         /* host:port */
    long threads;         /* worker threads; 0 = number of cores */
    cr_planner_config planner;
    cr_estimator_config estimator;
    double replan_interval; /* seconds; 0 = off */
    long max_message_bytes;
    double shutdown_grace; /* seconds */
    char *metrics_listen;  /* host:port, or "" for off */
    cr_log_level log_level;
    cr_inject_config inject; /* cost-model flags, parsed by the inject component */
    double probe_interval;   /* seconds between GPU/NIC probes; 0 = start-up only */
    cr_string_list nics;     /* --nic: probe exactly these interfaces */
    char *sysfs_root;
} cr_config;

/* Fills cfg from the environment and argv. Returns 0 to run, 1 when --help or
 * --version printed what was asked, 2 for --check-config (cfg is loaded and
 * valid; the caller prints it and exits), -1 on a bad flag or value with a
 * one-line message naming it in err. Strings in cfg are owned by cfg. */
int cr_config_load(cr_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* The effective configuration as a JSON object (for the start-up log and
 * --check-config). */
json_t *cr_config_json(const cr_config *cfg);
void cr_config_free(cr_config *cfg);
void cr_config_usage(FILE *out);

#endif

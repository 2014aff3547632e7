/* --endpoints-file: the endpoint set read from a file (a mounted
 * ConfigMap) into the core at start, again whenever the file changes
 * (checked every CR_ENDPOINTS_FILE_POLL_S: its device, inode, size and
 * modification time, through symlinks, as a ConfigMap update swaps them)
 * and on SIGHUP. A file that cannot be read or is refused keeps the set
 * that is there, logged at warn with the file and line (once per reason),
 * and is read again every CR_ENDPOINTS_FILE_RETRY_S until it applies; at
 * start it is an error. It is read as cr_endpoints_read_file reads it: a
 * regular file (a FIFO never blocks the poller), bounded before parsing. */
#ifndef CR_ENDPOINTS_FILE_H
#define CR_ENDPOINTS_FILE_H

#include <stdint.h>

#include "core.h"

#define CR_ENDPOINTS_FILE_POLL_S 0.5
#define CR_ENDPOINTS_FILE_RETRY_S 5.0

typedef struct cr_endpoints_watch cr_endpoints_watch;

/* Reads path into core (cr_core_set_endpoints) and starts the poller.
 * NULL with err naming the file and line when it cannot be read or is
 * refused, or out of memory. */
cr_endpoints_watch *cr_endpoints_watch_start(const char *path, cr_core *core, cr_error *err);

/* Re-reads the file now (SIGHUP), whether or not it changed. Thread-safe. */
void cr_endpoints_watch_reload(cr_endpoints_watch *w);

/* Reads that were refused (the old set kept) and applied, since start. */
void cr_endpoints_watch_counts(cr_endpoints_watch *w, uint64_t *refused, uint64_t *applied);

/* Stops the poller and frees w; NULL is ignored. */
void cr_endpoints_watch_stop(cr_endpoints_watch *w);

/* With --epp-listen, each address is where the gateway sends requests
 * (x-gateway-destination-endpoint), so it must be ip:port: IPv4
 * a.b.c.d:port or [v6]:port, port 1..65535. CR_EINVAL with err naming path,
 * the entry (its index and id) and the value; CR_OK when all are. */
cr_status cr_endpoints_check_ip_ports(const char *path, const cr_endpoint_spec *v, size_t n,
                                      cr_error *err);

#endif

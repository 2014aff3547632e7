/* Structured logs: one JSON object per line on stderr, with "ts" (UTC,
 * RFC 3339, milliseconds), "level", "msg" and the caller's fields. Lines are
 * written with one write(2) each, so threads never interleave them. */
#ifndef CR_LOG_H
#define CR_LOG_H

#include <jansson.h>

typedef enum cr_log_level { CR_LOG_DEBUG, CR_LOG_INFO, CR_LOG_WARN, CR_LOG_ERROR } cr_log_level;

/* The level names in cr_log_level's order, NULL-terminated. */
extern const char *const cr_log_levels[];

/* Parses "debug", "info", "warn" or "error"; returns 0 on success. */
int cr_log_parse_level(const char *s, cr_log_level *out);
const char *cr_log_level_name(cr_log_level level);
void cr_log_set_level(cr_log_level level);
int cr_log_enabled(cr_log_level level);

/* Sends gRPC core's own log lines through cr_log (as "grpc" lines with
 * their source file and line), so stderr stays one JSON object per line.
 * Call before grpc_init. */
void cr_log_capture_grpc(void);

/* Logs msg with fields (a JSON object or NULL; the reference is stolen, as
 * json_pack's result usually is: cr_log(CR_LOG_INFO, "x", json_pack(...))).
 * Thread-safe. */
void cr_log(cr_log_level level, const char *msg, json_t *fields);

#endif

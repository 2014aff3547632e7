/* What the CLI's command files share; main.c defines these. */
#ifndef CR_CLIENT_CLI_H
#define CR_CLIENT_CLI_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <stdio.h>

#include "call.h"

#define SERVICE "/cacheroute.v1.CacheRoute/"
#define EXIT_RPC 1   /* a gRPC error (on stderr) */
#define EXIT_USAGE 2 /* bad arguments or input */

/* Prints m as JSON on stdout with jansson's flags (then a newline, and
 * flushes); returns 0, or EXIT_RPC when out of memory. */
int cr_cli_print(const ProtobufCMessage *m, size_t json_flags);

/* Calls method and prints the answer as indented JSON; returns the exit
 * code. On success with keep given, the answer is left in *keep for the
 * caller (who frees it with protobuf_c_message_free_unpacked). */
int cr_cli_call_and_print(cr_client *c, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_type, ProtobufCMessage **keep);

/* file, or stdin for NULL or "-"; NULL after saying why on stderr. */
FILE *cr_cli_open_input(const char *file);

/* Decisions and their outcomes (outcomes.c); each returns the exit code. */
int cr_cli_report(cr_client *c, const char *file);
int cr_cli_decision(cr_client *c, const char *request_id);
int cr_cli_watch(cr_client *c, uint64_t count); /* 0 = until Ctrl-C */
int cr_cli_stats(cr_client *c);

/* The endpoint set (endpoints.c): cmd "endpoints" lists it, "drain" and
 * "undrain" take id; the exit code. */
int cr_cli_endpoints(cr_client *c, const char *cmd, const char *id);

/* record --stream (record.c): RecordArrivals, one message per line of file
 * (NULL or "-": stdin), one JSON line per answer; the exit code. */
int cr_cli_record_stream(cr_client *c, const char *file, int omit_routes);

#endif

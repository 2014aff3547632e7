#include "call.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wire.h"

void cr_client_open(cr_client *c, const char *target, double timeout)
{
    /* Answers are bounded by the server's --max-message-bytes, not by the
     * 4 MiB client default. */
    grpc_arg arg = {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}};
    grpc_channel_args args = {1, &arg};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->channel = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    c->timeout = timeout;
}

void cr_client_close(cr_client *c)
{
    grpc_channel_destroy(c->channel);
    grpc_completion_queue_shutdown(c->cq);
    while (grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(c->cq);
}

grpc_status_code cr_client_call(cr_client *c, const char *method, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *resp_type,
                                ProtobufCMessage **resp, char *err, size_t errlen)
{
    /* Beyond about 30 years a timeout means "no deadline" (and would
     * overflow the millisecond count). */
    gpr_timespec deadline =
        c->timeout > 1e9 ? gpr_inf_future(GPR_CLOCK_REALTIME)
                         : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                        gpr_time_from_millis((int64_t)(c->timeout * 1e3),
                                                             GPR_TIMESPAN));
    grpc_slice path = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                               path, NULL, deadline, NULL);
    grpc_byte_buffer *send, *recv = NULL;
    size_t send_len;
    int packed = cr_wire_pack(req, SIZE_MAX, &send, &send_len);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    *resp = NULL;
    if (packed != 0) {
        snprintf(err, errlen, "out of memory packing %s (%zu bytes)", req->descriptor->name,
                 send_len);
        status = GRPC_STATUS_RESOURCE_EXHAUSTED;
    } else if (grpc_call_start_batch(call, ops, 6, call, NULL) != GRPC_CALL_OK) {
        snprintf(err, errlen, "cannot start the call");
        status = GRPC_STATUS_INTERNAL;
    } else {
        grpc_completion_queue_pluck(c->cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        char *text = grpc_slice_to_c_string(details);
        snprintf(err, errlen, "%s", text);
        gpr_free(text);
        if (status == GRPC_STATUS_OK && !(*resp = cr_wire_unpack(recv, resp_type))) {
            snprintf(err, errlen, "malformed %s answer", resp_type->name);
            status = GRPC_STATUS_INTERNAL;
        }
    }
    if (send)
        grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    return status;
}

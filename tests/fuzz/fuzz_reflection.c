/* grpc.reflection.v1 ServerReflectionInfo, one request message (what the
 * stream does with each): decode, the lookup by file, symbol, extension or
 * list, over the descriptor set the sidecar embeds. */
#include <stdlib.h>

#include "descriptor_set.h"
#include "fuzz.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "reflection.h"

typedef Grpc__Reflection__V1__ServerReflectionResponse Response;

static cr_reflection *reflection(void)
{
    static cr_reflection *r;
    if (!r)
        r = cr_reflection_new(cr_descriptor_set, cr_descriptor_set_len);
    CR_FUZZ_CHECK(r, "the embedded descriptor set does not index");
    return r;
}

static void check_files(const Grpc__Reflection__V1__FileDescriptorResponse *f)
{
    CR_FUZZ_CHECK(f->n_file_descriptor_proto >= 1, "a file answer without files");
    for (size_t i = 0; i < f->n_file_descriptor_proto; i++) {
        const ProtobufCBinaryData *b = &f->file_descriptor_proto[i];
        Google__Protobuf__FileDescriptorProto *p =
            google__protobuf__file_descriptor_proto__unpack(NULL, b->len, b->data);
        CR_FUZZ_CHECK(p && p->name, "file %zu of the answer does not decode", i);
        google__protobuf__file_descriptor_proto__free_unpacked(p, NULL);
    }
}

static void check_answer(const Response *resp)
{
    CR_FUZZ_CHECK(resp->original_request, "the answer does not carry its request");
    switch (resp->message_response_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE:
        check_files(resp->file_descriptor_response);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE:
        CR_FUZZ_CHECK((resp->error_response->error_code == GRPC_STATUS_NOT_FOUND ||
                       resp->error_response->error_code == GRPC_STATUS_INVALID_ARGUMENT) &&
                          *resp->error_response->error_message,
                      "error %d '%s'", resp->error_response->error_code,
                      resp->error_response->error_message);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE:
        CR_FUZZ_CHECK(resp->list_services_response->n_service >= 3, "%zu services listed",
                      resp->list_services_response->n_service);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE:
        CR_FUZZ_CHECK(*resp->all_extension_numbers_response->base_type_name,
                      "extension numbers of no type");
        break;
    default:
        CR_FUZZ_CHECK(0, "an answer of no kind (%d)", (int)resp->message_response_case);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_reply r = {.status = GRPC_STATUS_OK};
    cr_reflection_handle(reflection(), data, size, &r);
    ProtobufCMessage *m = cr_fuzz_check_reply(
        &r, CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_INVALID_ARGUMENT),
        &grpc__reflection__v1__server_reflection_request__descriptor,
        &grpc__reflection__v1__server_reflection_response__descriptor, data, size, SIZE_MAX);
    if (m) {
        check_answer((const Response *)m);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    free(r.body);
    return 0;
}

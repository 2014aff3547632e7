/* GetDecision: a kept receipt by its request_id. */
#include <string.h>

#include "internal.h"

int cr_core_decision(cr_core *c, const char *request_id, cr_receipt *out)
{
    if (!c->receipts || !request_id || !*request_id ||
        strlen(request_id) > CR_LOOP_REQUEST_ID_MAX)
        return 0;
    return cr_receipts_get(c->receipts, request_id, out);
}

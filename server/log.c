#include "log.h"

#include <grpc/support/log.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int min_level = CR_LOG_INFO;
const char *const cr_log_levels[] = {"debug", "info", "warn", "error", NULL};

int cr_log_parse_level(const char *s, cr_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, cr_log_levels[i]) == 0) {
            *out = (cr_log_level)i;
            return 0;
        }
    return -1;
}

const char *cr_log_level_name(cr_log_level level) { return cr_log_levels[level]; }
void cr_log_set_level(cr_log_level level) { atomic_store(&min_level, (int)level); }
int cr_log_enabled(cr_log_level level) { return (int)level >= atomic_load(&min_level); }

static void grpc_line(gpr_log_func_args *a)
{
    cr_log_level level = a->severity == GPR_LOG_SEVERITY_ERROR  ? CR_LOG_ERROR
                         : a->severity == GPR_LOG_SEVERITY_INFO ? CR_LOG_INFO
                                                                : CR_LOG_DEBUG;
    cr_log(level, a->message,
           json_pack("{s:s,s:s,s:i}", "component", "grpc", "file", a->file, "line", a->line));
}

void cr_log_capture_grpc(void) { gpr_set_log_function(grpc_line); }

void cr_log(cr_log_level level, const char *msg, json_t *fields)
{
    if (!cr_log_enabled(level)) {
        json_decref(fields);
        return;
    }
    struct timespec ts;
    struct tm tm;
    char stamp[40];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", ts.tv_nsec / 1000000);

    json_t *line =
        json_pack("{s:s,s:s,s:s}", "ts", stamp, "level", cr_log_levels[level], "msg", msg);
    if (line && fields)
        json_object_update_missing(line, fields); /* ts/level/msg win */
    json_decref(fields);
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(line);
    if (!text)
        return;
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room: we replace the NUL */
    ssize_t unused = write(STDERR_FILENO, text, len + 1);
    (void)unused;
    free(text);
}

/* The state file on disk: atomic replacement and whole-file reads. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "state.h"

static cr_status sys_fail(cr_error *err, const char *what, const char *path)
{
    return cr_fail(err, CR_ENOMEM, "%s %s: %s", what, path, strerror(errno));
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The folder holding path, fsync'd so the rename itself is durable. */
static int sync_folder(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

cr_status cr_state_write_file(const char *path, const uint8_t *p, size_t len, double stall_s,
                              cr_error *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return cr_fail(err, CR_ENOMEM, "state file path is too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sys_fail(err, "cannot create", tmp);
    size_t half = len / 2;
    int rc = write_all(fd, p, half);
    if (rc == 0 && stall_s > 0)
        sleep_s(stall_s);
    if (rc == 0)
        rc = write_all(fd, p + half, len - half);
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    if (rc != 0 || rename(tmp, path) != 0) {
        cr_status st = sys_fail(err, rc ? "cannot write" : "cannot rename over", rc ? tmp : path);
        unlink(tmp);
        return st;
    }
    if (sync_folder(path) != 0)
        return sys_fail(err, "cannot fsync the folder of", path);
    return CR_OK;
}

static cr_status read_fd(int fd, const char *path, uint8_t **out, size_t *len, cr_error *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return cr_fail(err, CR_EINVAL, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > CR_STATE_MAX_BYTES)
        return cr_fail(err, CR_EINVAL, "%s must be a regular file of at most %llu bytes, got "
                       "%lld bytes", path, (unsigned long long)CR_STATE_MAX_BYTES,
                       (long long)st.st_size);
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return cr_fail(err, CR_EINVAL, "out of memory reading %zu bytes of %s", size, path);
    while (got < size) {
        ssize_t n = read(fd, p + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got != size) { /* it shrank while read, or an I/O error */
        free(p);
        return cr_fail(err, CR_EINVAL, "cannot read %s: %zu of %zu bytes", path, got, size);
    }
    *out = p;
    *len = size;
    return CR_OK;
}

cr_status cr_state_read_file(const char *path, uint8_t **out, size_t *len, int *missing,
                             cr_error *err)
{
    *out = NULL;
    *len = 0;
    *missing = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        *missing = 1;
        return CR_OK;
    }
    if (fd < 0)
        return cr_fail(err, CR_EINVAL, "cannot open %s: %s", path, strerror(errno));
    cr_status st = read_fd(fd, path, out, len, err);
    close(fd);
    return st;
}

int cr_state_move_aside(const char *path, char *moved, size_t size, cr_error *err)
{
    if (snprintf(moved, size, "%s.corrupt", path) >= (int)size) {
        cr_fail(err, CR_EINVAL, "state file path is too long: %s", path);
        return -1;
    }
    if (rename(path, moved) != 0) {
        sys_fail(err, "cannot move aside", path);
        return -1;
    }
    return 0;
}

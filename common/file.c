/* Reading the files the sidecar is given (common.h, "files"): one place
 * where a path a flag names is opened, so that none of them can block. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* What st is, for a refusal's message. */
static const char *kind(const struct stat *st)
{
    return S_ISFIFO(st->st_mode)    ? "a FIFO"
           : S_ISDIR(st->st_mode)   ? "a directory"
           : S_ISCHR(st->st_mode)   ? "a character device"
           : S_ISBLK(st->st_mode)   ? "a block device"
           : S_ISSOCK(st->st_mode)  ? "a socket"
                                    : "something else";
}

int cr_file_open(const char *path, const char *label, struct stat *st, cr_error *err)
{
    /* O_NONBLOCK: a FIFO opens at once (without it, the open waits for a
     * writer, deaf to signals); a regular file's reads ignore the flag. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st) != 0) {
        int why = errno;
        cr_fail(err, CR_EINVAL, "%s: cannot read: %s", label, strerror(why));
        if (fd >= 0)
            close(fd);
        errno = why;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        cr_fail(err, CR_EINVAL, "%s: cannot read: it must be a regular file, not %s", label,
                kind(st));
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

/* Reads fd to its end into one block: the size fstat gave and one byte
 * more, to see it grew (or was never told, as /proc's files say 0); then
 * up to max + 1 (one more than allowed: too large). */
static cr_status read_all(int fd, size_t size, size_t max, char **out, size_t *len,
                          const char *label, cr_error *err)
{
    size_t cap = size + 1, n = 0;
    char *p = NULL;
    for (;;) {
        char *q = realloc(p, cap + 1); /* + the NUL */
        if (!q) {
            free(p);
            return cr_fail(err, CR_ENOMEM, "%s: out of memory reading it", label);
        }
        p = q;
        while (n < cap) {
            ssize_t got = read(fd, p + n, cap - n);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                free(p);
                return cr_fail(err, CR_EINVAL, "%s: cannot read: %s", label, strerror(errno));
            }
            if (got == 0)
                goto done;
            n += (size_t)got;
        }
        if (cap > max)
            break;
        cap = max + 1;
    }
done:
    if (n > max) {
        free(p);
        return cr_fail(err, CR_EINVAL, "%s: more than %zu bytes", label, max);
    }
    p[n] = '\0';
    *out = p;
    *len = n;
    return CR_OK;
}

cr_status cr_file_read(const char *path, const char *label, size_t max, char **out,
                       size_t *len, cr_error *err)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    int fd = cr_file_open(path, label, &st, err);
    if (fd < 0)
        return CR_EINVAL;
    cr_status s;
    if ((uint64_t)st.st_size > max) /* refused before a byte is read */
        s = cr_fail(err, CR_EINVAL, "%s: %lld bytes, at most %zu", label,
                    (long long)st.st_size, max);
    else
        s = read_all(fd, (size_t)st.st_size, max, out, len, label, err);
    close(fd);
    return s;
}

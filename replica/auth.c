/* --state-backend-password-file: what Redis's AUTH takes, read from a file
 * (a mounted Secret) rather than a flag or the URL, so the password is in
 * no process listing, environment, log line or --check-config. Errors name
 * the file and what is wrong with it, never its bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replica.h"

#define FLAG "--state-backend-password-file"

static int blank(char c) { return c == ' ' || c == '\t'; }

static cr_status bad(const char *path, const char *why, cr_error *err)
{
    return cr_fail(err, CR_EINVAL, FLAG " %.120s: %s (want PASSWORD or USER PASSWORD on one line)",
                   path, why);
}

static cr_status too_long(const char *path, cr_error *err)
{
    return cr_fail(err, CR_EINVAL, FLAG " %.120s: over %d bytes", path, CR_REPLICA_AUTH_MAX);
}

static cr_status unreadable(const char *path, int errnum, cr_error *err)
{
    return cr_fail(err, CR_EINVAL, FLAG " %.120s: cannot read: %s", path, strerror(errnum));
}

static void copy_word(char *dst, const char *src, size_t len)
{
    memcpy(dst, src, len);
    dst[len] = '\0';
}

cr_status cr_replica_auth_parse(const char *text, size_t len, const char *path,
                                cr_replica_auth *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    while (len > 0 && (blank(text[len - 1]) || text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    if (len > CR_REPLICA_AUTH_MAX)
        return too_long(path, err);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || c == '\r')
            return bad(path, "more than one line", err);
        if ((c < ' ' && c != '\t') || c == 0x7f)
            return bad(path, "a control character", err);
    }
    size_t start[3] = {0}, n[3] = {0}, at = 0;
    int words = 0;
    while (words < 3) {
        while (at < len && blank(text[at]))
            at++;
        if (at == len)
            break;
        start[words] = at;
        while (at < len && !blank(text[at]))
            at++;
        n[words] = at - start[words];
        words++;
    }
    if (words == 0 || words == 3)
        return bad(path, words ? "three words or more" : "empty", err);
    copy_word(out->pass, text + start[words - 1], n[words - 1]);
    if (words == 2)
        copy_word(out->user, text + start[0], n[0]);
    return CR_OK;
}

cr_status cr_replica_auth_read(const char *path, cr_replica_auth *out, cr_error *err)
{
    char buf[CR_REPLICA_AUTH_MAX + 64]; /* room for trailing blanks; more is over */
    char label[160];
    memset(out, 0, sizeof *out);
    snprintf(label, sizeof label, FLAG " %.120s", path);
    struct stat st;
    int fd = cr_file_open(path, label, &st, err); /* a regular file, never blocking */
    if (fd < 0)
        return CR_EINVAL;
    size_t n = 0;
    ssize_t got = 1;
    while (n < sizeof buf && (got = read(fd, buf + n, sizeof buf - n)) != 0)
        if (got > 0)
            n += (size_t)got;
        else if (errno != EINTR)
            break;
    int why = errno;
    close(fd);
    cr_status s = got < 0            ? unreadable(path, why, err)
                  : n == sizeof buf ? too_long(path, err)
                                    : cr_replica_auth_parse(buf, n, path, out, err);
    explicit_bzero(buf, sizeof buf);
    return s;
}

void cr_replica_auth_clear(cr_replica_auth *a) { explicit_bzero(a, sizeof *a); }

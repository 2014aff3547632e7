/* Reading sysfs: small text attributes, read whole with one read(2), the way
 * the kernel serves them. */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cr_path_fmt(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int cr_read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t r;
    do {
        r = read(fd, buf, len - 1);
    } while (r < 0 && errno == EINTR);
    close(fd);
    if (r < 0)
        return -1;
    while (r > 0 && isspace((unsigned char)buf[r - 1]))
        r--;
    buf[r] = '\0';
    return 0;
}

int cr_read_u64(const char *path, uint64_t *v)
{
    char buf[32], *end;
    if (cr_read_text(path, buf, sizeof buf) < 0 || !isdigit((unsigned char)buf[0]))
        return -1;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

void cr_for_each_entry(const char *dir, cr_dir_fn fn, void *ctx)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            fn(ctx, dir, e->d_name);
    }
    closedir(d);
}

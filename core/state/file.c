/* The state file on disk: its lock, atomic replacement and whole-file
 * reads. Every name is opened relative to the folder's descriptor, and
 * temporaries with O_EXCL | O_NOFOLLOW under a name no other process uses,
 * so neither a link planted at a temporary's name nor a second writer can
 * redirect or interleave a write. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
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

/* path split into its folder (opened, O_DIRECTORY) and its last name. */
typedef struct place {
    int dir;
    const char *name;
} place;

static int open_place(const char *path, place *out)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    out->name = slash ? slash + 1 : path;
    out->dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return out->dir >= 0 && *out->name ? 0 : -1;
}

/* ---- the lock ---- */

int cr_state_lock(const char *path, cr_error *err)
{
    char lock[PATH_MAX];
    if (snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock) {
        cr_fail(err, CR_EINVAL, "--state-file path is too long: %s", path);
        return -1;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        cr_fail(err, CR_EINVAL, "cannot open the --state-file lock %s: %s", lock,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) == 0) {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
            (void)0; /* the pid in the file is for people; the lock is what counts */
        return fd;
    }
    struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    long holder = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long)who.l_pid : -1;
    close(fd);
    cr_fail(err, CR_ESTATE,
            "--state-file %s is in use by another process (pid %ld holds %s): two sidecars "
            "must not share one state file",
            path, holder, lock);
    return -1;
}

/* Temporaries left by a process killed mid-write ("NAME.tmp.<pid>.<n>"):
 * the lock's holder is the only writer, so any there now is stale. */
void cr_state_sweep_temporaries(const char *path)
{
    place at;
    if (open_place(path, &at) != 0) {
        if (at.dir >= 0)
            close(at.dir);
        return;
    }
    int fd = dup(at.dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    size_t len = strlen(at.name);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, at.name, len) && !strncmp(e->d_name + len, ".tmp.", 5))
            unlinkat(at.dir, e->d_name, 0);
    if (d)
        closedir(d);
    else if (fd >= 0)
        close(fd);
    close(at.dir);
}

/* ---- writes ---- */

/* A temporary's name for this process, never reused within it. */
static int temp_name(const char *name, char *buf, size_t size)
{
    static atomic_uint seq;
    return snprintf(buf, size, "%s.tmp.%ld.%u", name, (long)getpid(), atomic_fetch_add(&seq, 1)) <
                   (int)size
               ? 0
               : -1;
}

/* A new temporary beside at.name, created (never opened: O_EXCL, and
 * O_NOFOLLOW for a link planted at its name), its name in tmp. A name
 * someone else took is passed over, a few times at most. */
static int create_temp(const place *at, char *tmp, size_t size)
{
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 64; tries++) {
        if (temp_name(at->name, tmp, size) != 0) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = openat(at->dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return -1;
    }
    return fd;
}

cr_status cr_state_write_file(const char *path, const uint8_t *p, size_t len, double stall_s,
                              cr_error *err)
{
    place at;
    char tmp[NAME_MAX + 1];
    if (open_place(path, &at) != 0) {
        cr_status st = sys_fail(err, "cannot open the folder of", path);
        if (at.dir >= 0)
            close(at.dir);
        return st;
    }
    int fd = create_temp(&at, tmp, sizeof tmp);
    if (fd < 0) {
        cr_status st = sys_fail(err, "cannot create a temporary beside", path);
        close(at.dir);
        return st;
    }
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
    cr_status st = CR_OK;
    if (rc != 0 || renameat(at.dir, tmp, at.dir, at.name) != 0) {
        st = sys_fail(err, rc ? "cannot write a temporary beside" : "cannot rename over", path);
        unlinkat(at.dir, tmp, 0);
    } else if (fsync(at.dir) != 0) {
        st = sys_fail(err, "cannot fsync the folder of", path);
    }
    close(at.dir);
    return st;
}

/* ---- reads ---- */

static int read_at(int fd, uint8_t *p, size_t size, off_t at)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, p + got, size - got, at + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The frame a file of size bytes must have, from its header and its
 * sections' own headers alone, before the whole is read. */
static cr_status check_frame_at(int fd, const char *path, uint64_t size, cr_error *err)
{
    uint8_t head[CR_STATE_HEADER_BYTES];
    if (size < CR_STATE_HEADER_BYTES + CR_STATE_SHA_BYTES || read_at(fd, head, sizeof head, 0))
        return CR_OK; /* too short to have a layout: the decoder names it */
    cr_status st = cr_state_check_header(head, sizeof head, err);
    uint64_t at = CR_STATE_HEADER_BYTES, end = size - CR_STATE_SHA_BYTES;
    for (int s = 0; st == CR_OK && s < CR_STATE_SECTIONS; s++) {
        uint8_t sec[12];
        uint64_t len = 0;
        if (at + sizeof sec <= end && read_at(fd, sec, sizeof sec, (off_t)at) == 0)
            for (int i = 0; i < 8; i++)
                len |= (uint64_t)sec[4 + i] << (8 * i);
        if (at + sizeof sec > end || len > end - at - sizeof sec)
            return cr_fail(err, CR_EINVAL,
                           "%s: section %d (%s) runs past the end of the file's %llu bytes",
                           path, s + 1, cr_state_section_name(s + 1), (unsigned long long)size);
        at += sizeof sec + len;
    }
    if (st == CR_OK && at != end)
        st = cr_fail(err, CR_EINVAL, "%s: its sections hold %llu bytes, the file %llu", path,
                     (unsigned long long)(at + CR_STATE_SHA_BYTES), (unsigned long long)size);
    return st;
}

/* fd: path, a regular file of size bytes (cr_file_open). */
static cr_status read_fd(int fd, off_t size_of, const char *path, uint64_t ceiling, uint8_t **out,
                         size_t *len, cr_error *err)
{
    if ((uint64_t)size_of > ceiling)
        return cr_fail(err, CR_EINVAL,
                       "%s holds %lld bytes, over the %llu this configuration reads (256 MiB "
                       "and 48 bytes per --max-owners)",
                       path, (long long)size_of, (unsigned long long)ceiling);
    cr_status checked = check_frame_at(fd, path, (uint64_t)size_of, err);
    if (checked != CR_OK)
        return checked;
    size_t size = (size_t)size_of;
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return cr_fail(err, CR_EINVAL, "out of memory reading %zu bytes of %s", size, path);
    if (read_at(fd, p, size, 0) != 0) { /* it shrank while read, or an I/O error */
        free(p);
        return cr_fail(err, CR_EINVAL, "cannot read all %zu bytes of %s", size, path);
    }
    *out = p;
    *len = size;
    return CR_OK;
}

cr_status cr_state_read_file(const char *path, uint64_t ceiling, uint8_t **out, size_t *len,
                             int *missing, cr_error *err)
{
    *out = NULL;
    *len = 0;
    *missing = 0;
    struct stat sb;
    int fd = cr_file_open(path, path, &sb, err); /* a FIFO never blocks; refused */
    if (fd < 0 && errno == ENOENT) {
        *missing = 1;
        return CR_OK;
    }
    if (fd < 0)
        return CR_EINVAL;
    cr_status st = read_fd(fd, sb.st_size, path, ceiling, out, len, err);
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

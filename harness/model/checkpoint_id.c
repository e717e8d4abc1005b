// harness/model/checkpoint_id.c — checkpoint identities for meta.csv (harness/model/checkpoint_id.h).
#include "checkpoint_id.h"

#include <dirent.h>     // opendir, readdir, closedir
#include <errno.h>      // errno
#include <limits.h>     // PATH_MAX
#include <stdint.h>     // uint64_t
#include <stdio.h>      // FILE, fopen, fread, open_memstream, snprintf
#include <stdlib.h>     // free, qsort, malloc
#include <string.h>     // strcmp, strlen, strerror, strstr, strncmp, strdup
#include <sys/stat.h>   // stat

#include "../../common/file_hash.h" // invar_file_xxh64

#define MAX_FILES 4096      // files of one checkpoint that are identified
#define ITEM_SEP "; "       // between the files of the text form

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// One file's entry, without its name: "xxh64=H" for JSON; "size=... header_xxh64=H" for
// safetensors (the header: its 8-byte little-endian length, then that many bytes of JSON,
// bounded by the file so a damaged length hashes what is there).
static bool describe_file(FILE *out, const char *path, const char *name, bool full, char *err,
                          int err_len) {
    struct stat st;
    errno = 0;
    if (stat(path, &st) != 0) {
        snprintf(err, (size_t)err_len, "%s: cannot read to identify the checkpoint: %s", path,
                 strerror(errno));
        return false;
    }
    uint64_t h;
    if (!ends_with(name, ".safetensors")) {
        if (!invar_file_xxh64(path, -1, &h, err, err_len)) return false;
        fprintf(out, "%s: xxh64=%016llx", name, (unsigned long long)h);
        return true;
    }
    unsigned char len8[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot read to identify the checkpoint: %s", path,
                 strerror(errno));
        return false;
    }
    size_t got = fread(len8, 1, sizeof len8, f);
    bool read_ok = !ferror(f);
    fclose(f);
    if (!read_ok) {
        snprintf(err, (size_t)err_len, "%s: reading to identify the checkpoint failed", path);
        return false;
    }
    unsigned long long json_len = 0;
    for (int i = 7; i >= 0; i--) json_len = json_len << 8 | len8[i];
    long long header = got < sizeof len8 || json_len > (unsigned long long)st.st_size
                           ? (long long)st.st_size : (long long)(8 + json_len);
    if (!invar_file_xxh64(path, header, &h, err, err_len)) return false;
    fprintf(out, "%s: size=%lld mtime=%lld.%09ld header_xxh64=%016llx", name,
            (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
            (unsigned long long)h);
    if (full) {
        if (!invar_file_xxh64(path, -1, &h, err, err_len)) return false;
        fprintf(out, " xxh64=%016llx", (unsigned long long)h);
    }
    return true;
}

bool checkpoint_id_compute(const char *dir, bool full, char **out, char *err, int err_len) {
    *out = NULL;
    errno = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, (size_t)err_len, "%s: cannot list the checkpoint directory: %s", dir,
                 strerror(errno));
        return false;
    }
    char **names = malloc(MAX_FILES * sizeof *names);
    int n = 0;
    bool ok = names != NULL;
    for (struct dirent *e; ok && (errno = 0, e = readdir(d));) {
        const char *name = e->d_name;
        if (strcmp(name, "config.json") != 0 && !ends_with(name, ".index.json") &&
            !ends_with(name, ".safetensors"))
            continue;
        if (n == MAX_FILES) {
            snprintf(err, (size_t)err_len, "%s: more than %d checkpoint files", dir, MAX_FILES);
            ok = false;
        } else if (!(names[n++] = strdup(name))) {
            n--;
            ok = false;
        }
    }
    if (ok && errno) {
        snprintf(err, (size_t)err_len, "%s: listing the checkpoint directory failed: %s", dir,
                 strerror(errno));
        ok = false;
    }
    closedir(d);
    if (ok) qsort(names, (size_t)n, sizeof *names, name_cmp);
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = ok ? open_memstream(&text, &text_len) : NULL;
    if (ok && !f) ok = false;
    for (int i = 0; ok && i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            snprintf(err, (size_t)err_len, "%s/%s: path too long", dir, names[i]);
            ok = false;
            break;
        }
        if (i > 0) fputs(ITEM_SEP, f);
        ok = describe_file(f, path, names[i], full, err, err_len);
    }
    if (f && (fclose(f) != 0) && ok) {
        snprintf(err, (size_t)err_len, "%s: out of memory for the checkpoint identity", dir);
        ok = false;
    }
    if (!ok && !err[0])
        snprintf(err, (size_t)err_len, "%s: out of memory identifying the checkpoint", dir);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!ok) {
        free(text);
        return false;
    }
    *out = text;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

// The entry of file `name` ("name: ...") in an identity, or NULL; *len gets its length.
static const char *find_entry(const char *id, const char *name, size_t name_len, size_t *len) {
    for (const char *p = id; p && *p;) {
        const char *end = strstr(p, ITEM_SEP);
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > name_len + 1 && strncmp(p, name, name_len) == 0 && p[name_len] == ':') {
            *len = n;
            return p;
        }
        p = end ? end + strlen(ITEM_SEP) : NULL;
    }
    return NULL;
}

// The value of field `key` ("key=value") inside one entry, copied into buf ("" when absent).
static void field(const char *entry, size_t len, const char *key, char *buf, int buf_len) {
    buf[0] = '\0';
    size_t key_len = strlen(key);
    for (const char *p = entry; p < entry + len; p++) {
        if ((p == entry || p[-1] == ' ') && (size_t)(entry + len - p) > key_len &&
            strncmp(p, key, key_len) == 0 && p[key_len] == '=') {
            const char *v = p + key_len + 1, *e = v;
            while (e < entry + len && *e != ' ') e++;
            snprintf(buf, (size_t)buf_len, "%.*s", (int)(e - v), v);
            return;
        }
    }
}

// Walks `a`'s entries; the first one that `b` lacks or holds differently is described.
static bool first_difference(const char *a, const char *b, bool a_is_was, char *what,
                             int what_len) {
    static const char *const keys[] = {"size", "mtime", "header_xxh64", "xxh64"};
    for (const char *p = a; p && *p;) {
        const char *end = strstr(p, ITEM_SEP);
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        size_t name_len = colon ? (size_t)(colon - p) : n;
        size_t other_len = 0;
        const char *other = find_entry(b, p, name_len, &other_len);
        if (!other) {
            snprintf(what, (size_t)what_len, "%.*s: %s", (int)name_len, p,
                     a_is_was ? "gone" : "new");
            return true;
        }
        if (other_len != n || strncmp(other, p, n) != 0) {
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                char va[64], vb[64];
                field(p, n, keys[k], va, sizeof va);
                field(other, other_len, keys[k], vb, sizeof vb);
                if (strcmp(va, vb) == 0) continue;
                snprintf(what, (size_t)what_len, "%.*s: %s was %s, now %s", (int)name_len, p,
                         strcmp(keys[k], "xxh64") == 0 ? "content xxh64" : keys[k],
                         a_is_was ? (va[0] ? va : "not recorded") : (vb[0] ? vb : "not recorded"),
                         a_is_was ? (vb[0] ? vb : "not computed") : (va[0] ? va : "not computed"));
                return true;
            }
            snprintf(what, (size_t)what_len, "%.*s: changed", (int)name_len, p);
            return true;
        }
        p = end ? end + strlen(ITEM_SEP) : NULL;
    }
    return false;
}

bool checkpoint_id_same(const char *was, const char *now, char *what, int what_len) {
    if (strcmp(was, now) == 0) return true;
    if (!first_difference(was, now, true, what, what_len) &&
        !first_difference(now, was, false, what, what_len))
        snprintf(what, (size_t)what_len, "the file list changed");
    return false;
}

// harness/probe/probe_http.c — transfers over libcurl's multi interface (harness/probe/probe_http.h).
#include "probe_http.h"

#include <errno.h>               // errno, EINTR
#include <stdio.h>               // snprintf
#include <stdlib.h>              // realloc, free
#include <string.h>              // memcpy, strlen, strerror
#include <time.h>                // nanosleep, timespec

#include "../../common/check.h" // invar_die, invar_calloc
#include "../host.h"             // host_seconds

enum { PROBE_MAX_REPLY = 64 << 20 };  // the default cap: a longer answer is an error, not a crash

typedef struct {
    probe_transfer *t;
    int index;
    CURL *easy;
    struct curl_slist *headers;  // the caller's plus Content-Type (owned)
    char curl_error[CURL_ERROR_SIZE];
    size_t cap;
    bool too_long;
    double t0;
} transfer_state;

static size_t on_data(char *data, size_t size, size_t n, void *user) {
    transfer_state *s = user;
    probe_transfer *t = s->t;
    size_t len = size * n;
    size_t cap = t->max_reply ? t->max_reply : (size_t)PROBE_MAX_REPLY;
    if (t->reply_len + len > cap) {
        s->too_long = true;
        return 0;  // makes libcurl stop with CURLE_WRITE_ERROR
    }
    if (t->reply_len + len + 1 > s->cap) {
        size_t cap = (t->reply_len + len + 1) * 2;
        char *grown = realloc(t->reply, cap);
        if (!grown) return 0;
        t->reply = grown;
        s->cap = cap;
    }
    memcpy(t->reply + t->reply_len, data, len);
    t->reply_len += len;
    t->reply[t->reply_len] = '\0';
    return len;
}

static void easy_ok(CURLcode rc, const char *op) {
    if (rc != CURLE_OK)
        invar_die(INVAR_EXIT_SYSTEM, "probe: curl_easy_setopt(%s) failed: %s", op,
                  curl_easy_strerror(rc));
}

static void multi_ok(CURLMcode rc, const char *op) {
    if (rc != CURLM_OK)
        invar_die(INVAR_EXIT_SYSTEM, "probe: %s failed: %s", op, curl_multi_strerror(rc));
}

static struct curl_slist *append_header(struct curl_slist *l, const char *h) {
    struct curl_slist *n = curl_slist_append(l, h);
    if (!n) invar_die(INVAR_EXIT_SYSTEM, "probe: curl_slist_append failed (out of memory)");
    return n;
}

static void start(CURLM *m, transfer_state *s, const probe_http_options *o) {
    probe_transfer *t = s->t;
    s->easy = curl_easy_init();
    if (!s->easy) invar_die(INVAR_EXIT_SYSTEM, "probe: curl_easy_init failed");
    for (const struct curl_slist *h = o->headers; h; h = h->next)
        s->headers = append_header(s->headers, h->data);
    if (t->body) s->headers = append_header(s->headers, "Content-Type: application/json");
    CURL *e = s->easy;
    easy_ok(curl_easy_setopt(e, CURLOPT_URL, t->url), "URL");
    easy_ok(curl_easy_setopt(e, CURLOPT_PRIVATE, s), "PRIVATE");
    easy_ok(curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->curl_error), "ERRORBUFFER");
    easy_ok(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L), "NOSIGNAL");
    easy_ok(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data), "WRITEFUNCTION");
    easy_ok(curl_easy_setopt(e, CURLOPT_WRITEDATA, s), "WRITEDATA");
    easy_ok(curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers), "HTTPHEADER");
    easy_ok(curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms), "TIMEOUT_MS");
    easy_ok(curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms),
            "CONNECTTIMEOUT_MS");
    if (t->body) {
        easy_ok(curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(t->body)),
                "POSTFIELDSIZE_LARGE");
        easy_ok(curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body), "POSTFIELDS");
    }
    s->t0 = host_seconds();
    t->started = s->t0;
    t->sent = true;
    multi_ok(curl_multi_add_handle(m, e), "curl_multi_add_handle");
}

static void finish(CURLM *m, transfer_state *s, CURLcode result) {
    probe_transfer *t = s->t;
    t->ended = host_seconds();
    t->seconds = t->ended - s->t0;
    if (curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &t->status) != CURLE_OK)
        t->status = 0;
    t->too_long = s->too_long;
    if (s->too_long)
        snprintf(t->error, sizeof t->error, "answer longer than %zu bytes",
                 t->max_reply ? t->max_reply : (size_t)PROBE_MAX_REPLY);
    else if (result == CURLE_ABORTED_BY_CALLBACK)
        snprintf(t->error, sizeof t->error, "cancelled: the probe stopped sending");
    else if (result != CURLE_OK)
        snprintf(t->error, sizeof t->error, "%s%s%s", curl_easy_strerror(result),
                 s->curl_error[0] ? ": " : "", s->curl_error);
    t->finished = true;
    multi_ok(curl_multi_remove_handle(m, s->easy), "curl_multi_remove_handle");
    curl_easy_cleanup(s->easy);
    curl_slist_free_all(s->headers);
    s->easy = NULL;
    s->headers = NULL;
}

void probe_http_run(probe_transfer *t, int n, int max_in_flight, const probe_http_options *o,
                    probe_transfer_done done, void *user) {
    CURLM *m = curl_multi_init();
    if (!m) invar_die(INVAR_EXIT_SYSTEM, "probe: curl_multi_init failed");
    transfer_state *st = invar_calloc((size_t)n + 1, sizeof *st, "transfers");
    double t0 = host_seconds();
    int next = 0, in_flight = 0;
    bool stopped = false;
    for (;;) {
        double now = host_seconds() - t0;
        if (stopped) {
            // Cancel what is in flight, and hand every unsent transfer back unsent.
            for (int i = 0; i < next; i++)
                if (st[i].easy) {
                    finish(m, &st[i], CURLE_ABORTED_BY_CALLBACK);
                    if (done) done(user, i, &t[i]);
                }
            for (; next < n; next++) {
                t[next].finished = true;
                snprintf(t[next].error, sizeof t[next].error,
                         "not sent: the probe stopped sending");
                if (done) done(user, next, &t[next]);
            }
            break;
        }
        while (next < n && in_flight < max_in_flight && t[next].send_at <= now &&
               (t[next].after < 0 || t[t[next].after].finished)) {
            st[next] = (transfer_state){.t = &t[next], .index = next};
            start(m, &st[next], o);
            next++;
            in_flight++;
        }
        if (in_flight == 0 && next == n) break;
        int running;
        multi_ok(curl_multi_perform(m, &running), "curl_multi_perform");
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            char *private;
            CURLcode result = msg->data.result;  // read before the handle goes
            if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &private) != CURLE_OK)
                invar_die(INVAR_EXIT_SYSTEM, "probe: curl_easy_getinfo(PRIVATE) failed");
            transfer_state *s = (transfer_state *)private;
            finish(m, s, result);
            in_flight--;
            if (done && !done(user, s->index, s->t)) stopped = true;
        }
        if (stopped) continue;
        // Sleep until a socket is ready or the next send is due (at most 50 ms: a transfer
        // waiting on another's end is looked at again soon).
        long wait_ms = 50;
        if (next < n && in_flight < max_in_flight) {
            double due = (t[next].send_at - (host_seconds() - t0)) * 1000.0;
            if (due < wait_ms) wait_ms = due > 0 ? (long)due : 0;
        }
        if (in_flight > 0) multi_ok(curl_multi_poll(m, NULL, 0, (int)wait_ms, NULL),
                                    "curl_multi_poll");
        else if (wait_ms > 0) {
            struct timespec ts = {0, wait_ms * 1000000L};
            if (nanosleep(&ts, NULL) != 0 && errno != EINTR)
                invar_die(INVAR_EXIT_SYSTEM, "probe: nanosleep failed: %s", strerror(errno));
        }
    }
    free(st);
    multi_ok(curl_multi_cleanup(m), "curl_multi_cleanup");
}

// harness/probe/probe_http.h — the HTTP side of `invar probe`: a set of transfers run over libcurl's
// multi interface, at most N in flight at once, each sent no earlier than its own time, so a
// "batch of N" is N requests the server holds at once and an arrival pattern is a send
// schedule. Each finished transfer is handed to a callback at once (its report row is written
// before the next one finishes).
#ifndef INVAR_HARNESS_PROBE_HTTP_H
#define INVAR_HARNESS_PROBE_HTTP_H

#include <stdbool.h>  // bool
#include <stddef.h>   // size_t

#include <curl/curl.h>  // struct curl_slist

typedef struct {
    // In
    const char *url;
    const char *body;       // POST body (JSON); NULL: GET
    double send_at;         // seconds after the set starts
    int after;              // index of a transfer that must finish first; -1: none
    size_t max_reply;       // the longest body kept; a longer one is an error (0: 64 MiB)
    // Out
    bool finished;
    bool sent;              // false: never sent (the set was stopped first)
    bool too_long;          // the body passed max_reply (error says so)
    long status;            // HTTP status; 0 when none arrived
    char error[512];        // transport failure ("" when a reply arrived): what and why
    char *reply;            // the body (NUL-terminated), owned: free()
    size_t reply_len;
    double started, ended;  // host_seconds() at the send and at the end (0: not sent)
    double seconds;         // from sending to the end
} probe_transfer;

typedef struct {
    struct curl_slist *headers;  // sent with every request (Content-Type is added for POSTs)
    long timeout_ms;             // per transfer, connection included
    long connect_timeout_ms;
} probe_http_options;

// Called as each transfer finishes; false stops the set: nothing more is sent, the transfers
// in flight are cancelled, and each of those and of the unsent ones is handed to done too,
// with its error saying so (done's answer is then ignored).
typedef bool (*probe_transfer_done)(void *user, int index, probe_transfer *t);

// Runs t[0 .. n) in index order, at most max_in_flight at once; calls done (may be NULL) for
// each as it finishes. A transfer's own failure is recorded in it, never fatal; a failure of
// libcurl itself (no memory, a multi call failing) exits 3 naming the call.
void probe_http_run(probe_transfer *t, int n, int max_in_flight, const probe_http_options *o,
                    probe_transfer_done done, void *user);

#endif

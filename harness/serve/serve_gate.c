// harness/serve/serve_gate.c — the door of `invar serve`: first request heads judged before
// libmicrohttpd sees them (harness/serve/serve_gate.h).
#include "serve_gate.h"

#include <arpa/inet.h>               // ntohs
#include <errno.h>                   // errno, EAGAIN, EINTR, EMFILE
#include <fcntl.h>                   // O_CLOEXEC
#include <poll.h>                    // poll, POLLIN, POLLRDHUP
#include <pthread.h>                 // pthread_create, pthread_join
#include <stdint.h>                  // uint64_t
#include <stdio.h>                   // fprintf, open_memstream, snprintf
#include <stdlib.h>                  // free
#include <string.h>                  // memchr, strerror, strncasecmp
#include <unistd.h>                  // close, pipe2, write

#include "../../common/check.h"      // invar_calloc, invar_die, INVAR_EXIT_SYSTEM
#include "../host.h"                 // host_seconds

// --- the head ------------------------------------------------------------------------------

// RFC 9110's token characters: a method and a header name are made of these.
static bool token_char(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c != 0 && memchr("!#$%&'*+-.^_`|~", c, 15) != NULL;
}

// A control character other than a tab (a NUL, a lone CR, DEL) has no place in a head.
static bool control_char(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

static serve_head refuse(serve_error *e, int status, const char *fmt, const char *what,
                         size_t what_len) {
    *e = (serve_error){.status = status, .type = "invalid_request_error"};
    // Only printable bytes of the client's text reach the message (it is echoed as JSON).
    char shown[64];
    size_t n = 0;
    for (size_t i = 0; i < what_len && n + 1 < sizeof shown; i++) {
        unsigned char c = (unsigned char)what[i];
        shown[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    shown[n] = '\0';
    snprintf(e->message, sizeof e->message, fmt, shown, what_len > n ? "..." : "");
    return SERVE_HEAD_REFUSED;
}

// The request line: METHOD SP TARGET SP HTTP/d.d (libmicrohttpd's reading: the method ends at
// the first space, the version starts after the last one, spaces around the target are skipped).
static serve_head check_request_line(const char *l, size_t n, int *records, serve_error *e) {
    for (size_t i = 0; i < n; i++)
        if (control_char((unsigned char)l[i]))
            return refuse(e, 400, "malformed request line '%s%s': a control character", l, n);
    const char *sp = memchr(l, ' ', n);
    if (!sp || sp == l)
        return refuse(e, 400, "malformed request line '%s%s': expected METHOD TARGET "
                      "HTTP/1.1", l, n);
    for (const char *p = l; p < sp; p++)
        if (!token_char((unsigned char)*p))
            return refuse(e, 400, "malformed request line '%s%s': the method is not a token",
                          l, n);
    const char *end = l + n;
    while (end > sp && end[-1] == ' ') end--;
    const char *version = end;
    while (version > sp + 1 && version[-1] != ' ') version--;
    const char *target = sp;
    while (target < end && *target == ' ') target++;
    if (version <= target || version[-1] != ' ')
        return refuse(e, 400, "request line '%s%s' is not METHOD TARGET HTTP/1.1 (HTTP/0.9 "
                      "is not served)", l, n);
    size_t vlen = (size_t)(end - version);
    if (vlen != 8 || memcmp(version, "HTTP/", 5) != 0 || version[6] != '.' ||
        version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
        return refuse(e, 400, "malformed HTTP version '%s%s' (expected HTTP/1.1)", version,
                      vlen);
    if (version[5] != '1')
        return refuse(e, 505, "HTTP version %s%s not supported (this server speaks HTTP/1.0 "
                      "and HTTP/1.1)", version, vlen);
    const char *query = memchr(target, '?', (size_t)(version - target));
    if (query)
        for (const char *p = query; p < version; p++) *records += p == query || *p == '&';
    return SERVE_HEAD_INCOMPLETE;
}

// One header line: NAME ":" OWS VALUE OWS. Content-Length must be a number that fits 64
// bits, every copy the same; a Transfer-Encoding (chunked bodies) is refused: a body is
// framed by Content-Length alone, so no chunk syntax reaches the HTTP library's HTML errors.
static serve_head check_header(const char *l, size_t n, const char **length, size_t *length_n,
                               int *records, serve_error *e) {
    if (l[0] == ' ' || l[0] == '\t')
        return refuse(e, 400, "a folded header line ('%s%s'): obsolete line folding is not "
                      "accepted", l, n);
    const char *colon = memchr(l, ':', n);
    if (!colon) return refuse(e, 400, "header line '%s%s' has no colon", l, n);
    for (const char *p = l; p < colon; p++)
        if (!token_char((unsigned char)*p))
            return refuse(e, 400, "header name '%s%s' is not a token (no space before the "
                          "colon)", l, (size_t)(colon - l));
    if (colon == l) return refuse(e, 400, "header line '%s%s' has an empty name", l, n);
    const char *v = colon + 1, *end = l + n;
    for (const char *p = v; p < end; p++)
        if (control_char((unsigned char)*p))
            return refuse(e, 400, "header '%s%s' holds a control character", l,
                          (size_t)(colon - l));
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    const char *text_end = end;  // before trailing whitespace is dropped
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t name_n = (size_t)(colon - l), vn = (size_t)(end - v);
    *records += 1;
    if (name_n == 6 && strncasecmp(l, "Cookie", 6) == 0)  // the HTTP library keeps each pair
        for (const char *p = v; p <= end; p++) *records += p == end || *p == ';';
    if (name_n == 17 && strncasecmp(l, "Transfer-Encoding", 17) == 0)
        return refuse(e, 411, "Transfer-Encoding '%s%s' not accepted: send the body with a "
                      "Content-Length", v, vn);
    if (name_n != 14 || strncasecmp(l, "Content-Length", 14) != 0) return SERVE_HEAD_INCOMPLETE;
    if (vn == 0) return refuse(e, 400, "Content-Length '%s%s' is not a number", v, vn);
    // The HTTP library reads the number up to the line's end: trailing blanks are its 400 page.
    if (text_end != end)
        return refuse(e, 400, "Content-Length '%s%s' has blanks after the number", v, vn);
    uint64_t value = 0;
    for (size_t i = 0; i < vn; i++) {
        if (v[i] < '0' || v[i] > '9')
            return refuse(e, 400, "Content-Length '%s%s' is not a number", v, vn);
        unsigned d = (unsigned)(v[i] - '0');
        if (value > (UINT64_MAX - d) / 10)
            return refuse(e, 413, "Content-Length %s%s is past 64 bits", v, vn);
        value = value * 10 + d;
    }
    // Two that disagree frame the body two ways (a request smuggling vector).
    if (*length && (*length_n != vn || memcmp(*length, v, vn) != 0))
        return refuse(e, 400, "Content-Length headers that disagree ('%s%s' and another)", v,
                      vn);
    *length = v;
    *length_n = vn;
    return SERVE_HEAD_INCOMPLETE;
}

serve_head serve_head_check(const char *buf, size_t len, serve_error *e) {
    size_t pos = 0;
    bool request_line = false;
    int records = 0;  // header fields, query arguments and cookies
    const char *length = NULL;
    size_t length_n = 0;
    for (;;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) + 1 : len;
        if (end > SERVE_GATE_MAX_HEAD) {
            *e = (serve_error){.status = request_line ? 431 : 414,
                               .type = "invalid_request_error"};
            snprintf(e->message, sizeof e->message, "the request %s is longer than %d bytes",
                     request_line ? "head" : "line", SERVE_GATE_MAX_HEAD);
            return SERVE_HEAD_REFUSED;
        }
        if (!nl) return SERVE_HEAD_INCOMPLETE;
        const char *line = buf + pos;
        size_t n = end - 1 - pos;
        if (n > 0 && line[n - 1] == '\r') n--;
        pos = end;
        if (!request_line) {
            if (n == 0) continue;  // empty lines before a request are tolerated (RFC 9112 2.2)
            if (check_request_line(line, n, &records, e) == SERVE_HEAD_REFUSED)
                return SERVE_HEAD_REFUSED;
            request_line = true;
        } else if (n == 0) {
            return SERVE_HEAD_GOOD;
        } else if (check_header(line, n, &length, &length_n, &records, e) ==
                   SERVE_HEAD_REFUSED) {
            return SERVE_HEAD_REFUSED;
        }
        if (records > SERVE_GATE_MAX_RECORDS) {
            *e = (serve_error){.status = 431, .type = "invalid_request_error"};
            snprintf(e->message, sizeof e->message, "the request has more than %d header "
                     "fields, query arguments and cookies", SERVE_GATE_MAX_RECORDS);
            return SERVE_HEAD_REFUSED;
        }
    }
}

// --- the gate ------------------------------------------------------------------------------

enum {
    GATE_RECHECK_MS = 20,        // a peek that saw nothing new waits this long to look again
    GATE_DRAIN_MS = 2000,        // a refused connection is read (and dropped) this long at
                                 // most, so its answer arrives before the close
    GATE_ACCEPT_PAUSE_MS = 100,  // out of descriptors: accept pauses, not spins
};

typedef struct {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    size_t seen;                 // bytes the last peek saw
    long long idle_since;        // ms: when more bytes last came
    long long recheck_at;        // ms: not polled until then (0: polled)
    long long close_at;          // ms: refused, answered and draining until then (0: reading)
} pending;

struct serve_gate {
    int listen_fd;
    int wake[2];                 // serve_gate_stop writes a byte: the thread ends
    unsigned port;
    serve_gate_limits limits;
    serve_gate_admit admit;
    void *ctx;
    pthread_t thread;
    pending *conns;
    int n;
    struct pollfd *polls;
    char peek[SERVE_GATE_MAX_HEAD + 1];
};

static long long now_ms(void) { return (long long)(host_seconds() * 1000.0); }

// Poll reports a socket readable only when more than `bytes` are waiting, so a head that is
// still coming wakes the loop once per new piece, not once per loop.
static void set_low_water(int fd, size_t bytes) {
    int v = (int)bytes;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) != 0)
        fprintf(stderr, "invar serve: setsockopt(SO_RCVLOWAT %d) failed: %s\n", v,
                strerror(errno));
}

static void drop(serve_gate *g, int i, bool close_fd) {
    if (close_fd && close(g->conns[i].fd) != 0)
        fprintf(stderr, "invar serve: close of a connection failed: %s\n", strerror(errno));
    g->conns[i] = g->conns[--g->n];
}

static const char *reason(int status) {
    switch (status) {
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Bad Request";
    }
}

// Answers a refused head and starts draining: the bytes already here are read, the answer
// sent, the sending side shut; the close waits for the client's end (or GATE_DRAIN_MS), since
// closing with unread bytes would reset the connection and could lose the answer.
static void answer_refused(serve_gate *g, pending *p, const serve_error *e, size_t seen,
                           long long now) {
    while (seen > 0) {
        ssize_t r = recv(p->fd, g->peek, seen, MSG_DONTWAIT);
        if (r <= 0) break;
        seen -= (size_t)r;
    }
    char *body = NULL;
    size_t body_len = 0;
    FILE *f = open_memstream(&body, &body_len);
    if (!f) invar_die(INVAR_EXIT_SYSTEM, "serve: open_memstream failed: %s", strerror(errno));
    serve_write_error(f, e);
    if (fclose(f) != 0) invar_die(INVAR_EXIT_SYSTEM, "serve: writing an error failed: %s",
                                  strerror(errno));
    char head[256];
    int hn = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", e->status,
                      reason(e->status), body_len);
    // Small enough for an empty socket buffer; a client that reads nothing loses its answer.
    ssize_t sent = send(p->fd, head, (size_t)hn, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent == hn) sent = send(p->fd, body, body_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0)
        fprintf(stderr, "invar serve: sending a %d answer failed: %s\n", e->status,
                strerror(errno));
    else if (sent != (ssize_t)body_len)
        fprintf(stderr, "invar serve: a %d answer was sent in part (the client's buffer was "
                "full)\n", e->status);
    free(body);
    if (shutdown(p->fd, SHUT_WR) != 0 && errno != ENOTCONN)
        fprintf(stderr, "invar serve: shutdown of a refused connection failed: %s\n",
                strerror(errno));
    set_low_water(p->fd, 1);
    p->close_at = now + GATE_DRAIN_MS;
    p->recheck_at = 0;
}

// A pending connection is readable (or hung up: `revents`): more of its head, its end, or
// (draining) bytes to drop. False when it left the list (admitted or closed).
static bool service(serve_gate *g, int i, short revents, long long now) {
    pending *p = &g->conns[i];
    if (p->close_at) {
        ssize_t r = recv(p->fd, g->peek, sizeof g->peek, MSG_DONTWAIT);
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) return true;
        drop(g, i, true);
        return false;
    }
    ssize_t r = recv(p->fd, g->peek, sizeof g->peek, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (r <= 0) {  // the client left before its head was whole, or the connection failed
        drop(g, i, true);
        return false;
    }
    serve_error e;
    switch (serve_head_check(g->peek, (size_t)r, &e)) {
    case SERVE_HEAD_GOOD: {
        pending taken = *p;
        set_low_water(taken.fd, 1);  // the HTTP library reads it from here, byte by byte
        drop(g, i, false);
        (void)g->admit(g->ctx, taken.fd, (const struct sockaddr *)&taken.addr, taken.addr_len);
        return false;
    }
    case SERVE_HEAD_REFUSED:
        answer_refused(g, p, &e, (size_t)r, now);
        return true;
    case SERVE_HEAD_INCOMPLETE:
        // The client shut its side with the head unfinished: no more of it can come (and a
        // hang-up stays readable whatever the low-water mark, so waiting would spin).
        if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            drop(g, i, true);
            return false;
        }
        if ((size_t)r > p->seen) {
            p->seen = (size_t)r;
            p->idle_since = now;
            p->recheck_at = 0;
            set_low_water(p->fd, p->seen + 1);
        } else {
            p->recheck_at = now + GATE_RECHECK_MS;  // woken with nothing new: look later
        }
        return true;
    }
    return true;
}

static long long deadline(const serve_gate *g, const pending *p) {
    return p->close_at ? p->close_at : p->idle_since + 1000LL * g->limits.idle_timeout_s;
}

// Makes room for a new connection: closes the one whose head has been idle longest (one
// answered and draining only when every one is: closing it early may lose its answer). False
// when none is pending.
static bool evict_one(serve_gate *g) {
    int pick = -1;
    for (int i = 0; i < g->n; i++) {
        const pending *a = &g->conns[i], *b = pick < 0 ? NULL : &g->conns[pick];
        if (!b || (a->close_at == 0) > (b->close_at == 0) ||
            ((a->close_at == 0) == (b->close_at == 0) && a->idle_since < b->idle_since))
            pick = i;
    }
    if (pick < 0) return false;
    drop(g, pick, true);
    return true;
}

// Slow clients cannot lock new ones out: past max_pending, or out of descriptors, the pending
// connection idle longest makes room for the new one.
static void accept_new(serve_gate *g, long long now, long long *accept_paused_until,
                       long long *last_complaint) {
    for (int k = 0; k < 64; k++) {
        pending p = {.addr_len = sizeof p.addr, .idle_since = now};
        p.fd = accept4(g->listen_fd, (struct sockaddr *)&p.addr, &p.addr_len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (p.fd < 0) {
            int err = errno;
            if ((err == EMFILE || err == ENFILE) && evict_one(g)) continue;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
                if (now - *last_complaint >= 1000) {  // once a second, not once a retry
                    fprintf(stderr, "invar serve: accept failed: %s (pausing %d ms)\n",
                            strerror(err), GATE_ACCEPT_PAUSE_MS);
                    *last_complaint = now;
                }
                *accept_paused_until = now + GATE_ACCEPT_PAUSE_MS;
            } else if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR &&
                       err != ECONNABORTED) {
                fprintf(stderr, "invar serve: accept failed: %s\n", strerror(err));
            }
            return;
        }
        if (g->n == g->limits.max_pending) evict_one(g);
        g->conns[g->n++] = p;
    }
}

static void *gate_loop(void *arg) {
    serve_gate *g = arg;
    long long accept_paused_until = 0, last_complaint = -1000000;
    for (;;) {
        long long now = now_ms(), wake_at = -1;
        int np = 0;
        g->polls[np++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        bool accepting = now >= accept_paused_until;
        g->polls[np++] = (struct pollfd){.fd = accepting ? g->listen_fd : -1, .events = POLLIN};
        if (!accepting) wake_at = accept_paused_until;
        for (int i = 0; i < g->n; i++) {
            const pending *p = &g->conns[i];
            bool waiting = p->recheck_at > now;
            g->polls[np++] = (struct pollfd){.fd = waiting ? -1 : p->fd,
                                             .events = POLLIN | POLLRDHUP};
            long long t = waiting && p->recheck_at < deadline(g, p) ? p->recheck_at
                                                                     : deadline(g, p);
            if (wake_at < 0 || t < wake_at) wake_at = t;
        }
        int timeout = wake_at < 0 ? -1 : wake_at <= now ? 0 : (int)(wake_at - now);
        int rc = poll(g->polls, (nfds_t)np, timeout);
        if (rc < 0) {
            if (errno == EINTR) continue;
            invar_die(INVAR_EXIT_SYSTEM, "serve: poll of %d connections failed: %s", np,
                      strerror(errno));
        }
        if (g->polls[0].revents) break;
        now = now_ms();
        // Backwards: a connection leaving the list takes the last one's place, already seen.
        for (int i = g->n - 1; i >= 0; i--) {
            if (g->polls[2 + i].revents) {
                if (!service(g, i, g->polls[2 + i].revents, now)) continue;
            }
            if (i < g->n && now >= deadline(g, &g->conns[i])) drop(g, i, true);
        }
        if (g->polls[1].revents) accept_new(g, now, &accept_paused_until, &last_complaint);
    }
    return NULL;
}

serve_gate *serve_gate_start(const struct sockaddr_in *addr, const serve_gate_limits *limits,
                             serve_gate_admit admit, void *ctx, char *err, size_t err_len) {
    serve_gate *g = invar_calloc(1, sizeof *g, "serve gate");
    g->limits = *limits;
    g->admit = admit;
    g->ctx = ctx;
    g->conns = invar_calloc((size_t)limits->max_pending, sizeof *g->conns, "pending connections");
    g->polls = invar_calloc((size_t)limits->max_pending + 2, sizeof *g->polls, "poll set");
    const char *op = "socket";
    int one = 1;
    g->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (g->listen_fd >= 0) {
        op = "setsockopt(SO_REUSEADDR)";
        if (setsockopt(g->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0) {
            op = "bind";
            if (bind(g->listen_fd, (const struct sockaddr *)addr, sizeof *addr) == 0) {
                op = "listen";
                if (listen(g->listen_fd, SOMAXCONN) == 0) op = NULL;
            }
        }
    }
    struct sockaddr_in bound;
    socklen_t bound_len = sizeof bound;
    if (!op && getsockname(g->listen_fd, (struct sockaddr *)&bound, &bound_len) != 0)
        op = "getsockname";
    if (!op && pipe2(g->wake, O_CLOEXEC) != 0) op = "pipe2";
    bool piped = !op;
    int prc = op ? 0 : pthread_create(&g->thread, NULL, gate_loop, g);
    if (prc != 0) {
        errno = prc;
        op = "pthread_create";
    }
    if (op) {
        snprintf(err, err_len, "%s failed: %s", op, strerror(errno));
        if (piped) {
            close(g->wake[0]);
            close(g->wake[1]);
        }
        if (g->listen_fd >= 0) close(g->listen_fd);
        free(g->conns);
        free(g->polls);
        free(g);
        return NULL;
    }
    g->port = ntohs(bound.sin_port);
    return g;
}

unsigned serve_gate_port(const serve_gate *g) { return g->port; }

void serve_gate_stop(serve_gate *g) {
    char byte = 1;
    if (write(g->wake[1], &byte, 1) != 1)
        invar_die(INVAR_EXIT_SYSTEM, "serve: waking the gate failed: %s", strerror(errno));
    int rc = pthread_join(g->thread, NULL);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "serve: joining the gate failed: %s", strerror(rc));
    if (close(g->listen_fd) != 0)
        fprintf(stderr, "invar serve: closing the listening socket: %s\n", strerror(errno));
    for (int i = g->n - 1; i >= 0; i--) drop(g, i, true);
    close(g->wake[0]);
    close(g->wake[1]);
    free(g->conns);
    free(g->polls);
    free(g);
}

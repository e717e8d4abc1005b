// harness/serve/serve_gate.h — the door of `invar serve` (harness/serve/cmd_serve.c): it owns
// the listening socket, reads each new connection's first request head without consuming it
// (MSG_PEEK), answers a head the HTTP layer would refuse (400 malformed, 411 a body not framed
// by Content-Length, 413 a Content-Length past 64 bits, 414/431 too large, 505 not HTTP/1.x)
// with an OpenAI error body in JSON itself, and hands every good connection on (to
// libmicrohttpd, whose own refusals are HTML pages). Heads that come slowly wait in one poll
// loop, not a thread each, so slow clients cost a descriptor, not a thread.
#ifndef INVAR_HARNESS_SERVE_GATE_H
#define INVAR_HARNESS_SERVE_GATE_H

#include <netinet/in.h>          // sockaddr_in
#include <stdbool.h>             // bool
#include <stddef.h>              // size_t
#include <sys/socket.h>          // socklen_t

#include "serve_api.h"           // serve_error

enum {
    SERVE_GATE_MAX_HEAD = 16 << 10,  // a request head (request line and headers) past this is
                                     // refused: 414 while still in the request line, else 431
    SERVE_GATE_MAX_RECORDS = 512,    // header fields + query arguments + cookies past this:
                                     // 431 (the HTTP library keeps a record of each)
};

// What serve_head_check found in the bytes received so far.
typedef enum {
    SERVE_HEAD_INCOMPLETE,       // no error yet and no end of the head: wait for more
    SERVE_HEAD_GOOD,             // a whole head that the HTTP layer will accept
    SERVE_HEAD_REFUSED,          // refused: `e` holds the status and the message
} serve_head;

// Judges the start of a connection's bytes: the first request head (leading empty lines
// skipped, lines ended by CRLF or a bare LF; folded header lines are refused) in buf[0..len).
// Each line is judged as soon as it is whole, so a bad request line is refused before the
// rest of the head comes. Bytes after the head (a body, a pipelined request) are not read.
serve_head serve_head_check(const char *buf, size_t len, serve_error *e);

// Called with each good connection (the descriptor is the callee's from then on, its head
// still unread in the socket); false when it could not take it (it has closed it).
typedef bool (*serve_gate_admit)(void *ctx, int fd, const struct sockaddr *addr,
                                 socklen_t addr_len);

typedef struct {
    int max_pending;             // connections whose head is not yet whole; past it the one
                                 // idle longest is closed to make room
    int idle_timeout_s;          // a connection sending nothing this long is closed
} serve_gate_limits;

typedef struct serve_gate serve_gate;

// Listens on addr (port 0: one the kernel picks) and starts the gate's thread. NULL with
// `err` naming the failed call when the socket cannot be made, bound or listened on.
serve_gate *serve_gate_start(const struct sockaddr_in *addr, const serve_gate_limits *limits,
                             serve_gate_admit admit, void *ctx, char *err, size_t err_len);
unsigned serve_gate_port(const serve_gate *g);
// Closes the listening socket (a new connection is refused from then on) and every connection
// whose head is not whole, and joins the thread; connections already admitted are untouched.
void serve_gate_stop(serve_gate *g);

#endif

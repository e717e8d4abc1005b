// harness/serve/cmd_serve.c — `invar serve --model NAME|DIR --kernel-set SET [--device cpu|cuda]
// [--host 127.0.0.1] [--port P]`: an OpenAI-compatible HTTP server over invar's own engine
// (libmicrohttpd, one thread per connection, behind a gate that judges each first request head,
// harness/serve/serve_gate.h; one engine thread, harness/serve/serve_queue.h):
//   POST /v1/completions  token-id prompts, top-k logprobs with token ids, seeded sampling
//   GET  /v1/models       the served model, its max_model_len and vocab_size
//   GET  /health          200 once serving
//   GET  /metrics         requests, steps, and the batch size of the steps run
// It runs until SIGINT or SIGTERM (harness/commands.h).
#include "../commands.h"

#include <arpa/inet.h>               // inet_pton, htons
#include <errno.h>                   // errno
#include <netinet/in.h>              // sockaddr_in
#include <poll.h>                    // poll, POLLRDHUP
#include <pthread.h>                 // pthread_sigmask
#include <sys/socket.h>              // recv, MSG_PEEK
#include <signal.h>                  // sigset_t, sigwait, SIGINT, SIGTERM, SIGPIPE
#include <stdio.h>                   // FILE, open_memstream, fprintf
#include <stdlib.h>                  // free, realloc
#include <string.h>                  // strcmp, strerror, memcpy
#include <strings.h>                 // strcasecmp
#include <time.h>                    // time, nanosleep

#include <microhttpd.h>              // MHD_start_daemon, MHD_queue_response, ...

#include "../../common/check.h"     // invar_die, invar_calloc, INVAR_EXIT_*
#include "../../engine/attention_backend.h" // attention_backend_by_name
#include "../../engine/engine.h"     // engine_create, engine_limits, engine_sched
#include "../../sets/graph_record.h" // graph_record_on_cpu
#include "../../sets/registry.h"     // kernel_set_find, kernel_set_create
#include "../run/case_file.h"        // case_model_open, case_graph_buckets
#include "../cli_args.h"             // cli_parse, cli_usage_error, CLI_GO_ON
#include "serve_api.h"               // serve_completion_parse, serve_write_*
#include "serve_gate.h"              // serve_gate_start, SERVE_GATE_MAX_HEAD
#include "serve_queue.h"             // serve_queue_*

enum {
    SERVE_MAX_BODY = 16 << 20,   // a request body larger than this is refused (413)
    SERVE_SMALL_BODY = 64 << 10, // bodies up to this are never refused for memory: a small
                                 // request is served however many large uploads stall
    SERVE_CONNECTION_MEMORY = 128 << 10,  // MHD's memory for one connection: half its read
                                          // buffer, half a record per header field, query
                                          // argument and cookie; a head the gate let through
                                          // (SERVE_GATE_MAX_HEAD, SERVE_GATE_MAX_RECORDS) fits
    SERVE_THREAD_STACK = 256 << 10,  // a connection's thread: its handler keeps bodies and
                                     // answers on the heap, so thousands of slow clients
                                     // cost little memory
};

typedef struct {
    serve_bounds bounds;
    serve_queue *queue;
    long created;
    pthread_mutex_t mu;              // guards the three below
    long next_id;                    // response ids
    size_t upload_bytes;             // request bodies held, over every connection
    int posts_open;                  // POSTs between their first call and their end
    size_t max_upload_bytes;
} server;

// The body of one POST, gathered over the handler's calls.
typedef struct {
    char *data;
    size_t len, cap;
    bool too_large;
    bool busy;                       // the server's upload memory was full: 503
    size_t counted;                  // bytes of it in server.upload_bytes
    bool post;                       // counted in server.posts_open
} upload;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        fprintf(stderr, "invar serve: MHD_create_response_from_buffer failed\n");
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    // Busy (429) and out of upload memory (503) pass: a client may try again in a second.
    if (ok == MHD_YES && (status == 429 || status == 503))
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (ok == MHD_YES) ok = MHD_queue_response(c, status, r);
    if (ok != MHD_YES) fprintf(stderr, "invar serve: queueing a %u response failed\n", status);
    MHD_destroy_response(r);
    return ok;
}

// Writes with f (an open_memstream), then replies with what it wrote.
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
} body_writer;

static FILE *body_open(body_writer *w) {
    w->buf = NULL;
    w->len = 0;
    w->f = open_memstream(&w->buf, &w->len);
    if (!w->f) invar_die(INVAR_EXIT_SYSTEM, "serve: open_memstream failed: %s",
                         strerror(errno));
    return w->f;
}

static enum MHD_Result body_send(struct MHD_Connection *c, body_writer *w, unsigned status,
                                 const char *type) {
    if (fclose(w->f) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: writing a response failed: %s",
                  strerror(errno));
    return reply(c, status, type, w->buf, w->len);
}

static enum MHD_Result send_error(struct MHD_Connection *c, const serve_error *e) {
    body_writer w;
    serve_write_error(body_open(&w), e);
    return body_send(c, &w, (unsigned)e->status, "application/json");
}

// Whether the client of a connection went away: its socket hung up, or reads end of file
// (a pipelined next request is data, not a hang-up).
static bool client_gone(void *ctx) {
    struct MHD_Connection *c = ctx;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char byte;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// The 500 of a request the engine could not run, whether answered whole or in a stream.
static serve_error engine_failed(const char *why) {
    serve_error e = {.status = 500, .type = "server_error"};
    snprintf(e.message, sizeof e.message, "the engine could not run the request: %.400s", why);
    return e;
}

// A streamed answer (stream: true): its jobs run in the engine while MHD writes their events,
// each as soon as the step that made its token is over (stream_read); the stream owns the
// request and its jobs until MHD lets it go (stream_free).
typedef struct {
    server *s;
    struct MHD_Connection *c;
    serve_completion req;
    serve_job *jobs;
    int *sent, *ready;               // each job's records written as events, and available
    long *offset;                    // each choice's text length so far (text_offset)
    long id, created;
    bool finished;                   // the last event ([DONE]) is in `events`
    char *events;                    // written, not yet all handed to MHD
    size_t len, pos;
} stream;

// Waits for the jobs' next records and writes them as events (then [DONE] when every job is
// done, or an error event where one failed). False when the client went away.
static bool stream_next(stream *st) {
    int n = st->req.n_prompts;
    bool done = serve_queue_wait_records(st->s->queue, st->jobs, n, st->sent, st->ready,
                                         client_gone, st->c);
    for (int i = 0; i < n; i++)
        if (st->jobs[i].cancelled) return false;  // the client went away while we waited
    free(st->events);
    body_writer w;
    FILE *f = body_open(&w);
    const char *error = NULL;
    for (int i = 0; i < n && !error; i++) {
        for (; st->sent[i] < st->ready[i]; st->sent[i]++) {
            engine_result one = {.steps = st->jobs[i].result.steps + st->sent[i], .n_steps = 1};
            if (!serve_result_finite(&one, st->req.logprobs)) {
                error = "a logprob came out NaN or +Infinity";
                break;
            }
            serve_write_completion_event(f, &st->req, &st->jobs[i].result, i, st->sent[i],
                                         st->s->bounds.model, st->id, st->created,
                                         &st->offset[i]);
        }
        if (!error && st->jobs[i].done && st->jobs[i].error[0]) error = st->jobs[i].error;
    }
    if (error) {
        serve_error e = engine_failed(error);
        serve_write_stream_error(f, &e);
    }
    if (error || done) {
        serve_write_stream_done(f);
        st->finished = true;
    }
    if (fclose(f) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: writing a response failed: %s", strerror(errno));
    st->events = w.buf;
    st->len = w.len;
    st->pos = 0;
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->pos == st->len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_next(st)) return MHD_CONTENT_READER_END_WITH_ERROR;  // closes the connection
    }
    size_t n = st->len - st->pos < max ? st->len - st->pos : max;
    memcpy(buf, st->events + st->pos, n);
    st->pos += n;
    return (ssize_t)n;
}

static void free_jobs(serve_job *jobs, int n) {
    for (int i = 0; i < n; i++) free(jobs[i].result.steps);
    free(jobs);
}

// MHD is done with the stream (sent, or the connection closed): jobs still running are ended
// first, since they write into memory freed here.
static void stream_free(void *cls) {
    stream *st = cls;
    serve_queue_cancel_all(st->s->queue, st->jobs, st->req.n_prompts);
    free_jobs(st->jobs, st->req.n_prompts);
    serve_completion_free(&st->req);
    free(st->sent);
    free(st->ready);
    free(st->offset);
    free(st->events);
    free(st);
}

// Answers 200 with the events of jobs already handed to the queue; takes req and jobs.
static enum MHD_Result stream_begin(server *s, struct MHD_Connection *c, serve_completion *req,
                                   serve_job *jobs) {
    int n = req->n_prompts;
    stream *st = invar_calloc(1, sizeof *st, "stream");
    *st = (stream){.s = s, .c = c, .req = *req, .jobs = jobs, .created = (long)time(NULL),
                   .sent = invar_calloc((size_t)n, sizeof(int), "stream counts"),
                   .ready = invar_calloc((size_t)n, sizeof(int), "stream counts"),
                   .offset = invar_calloc((size_t)n, sizeof(long), "stream offsets")};
    pthread_mutex_lock(&s->mu);
    st->id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        fprintf(stderr, "invar serve: MHD_create_response_from_callback failed\n");
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                                 "text/event-stream");
    if (ok == MHD_YES) ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (ok == MHD_YES) ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    if (ok != MHD_YES) fprintf(stderr, "invar serve: queueing a stream failed\n");
    MHD_destroy_response(r);  // the stream is freed when MHD lets the response go
    return ok;
}

static enum MHD_Result completions(server *s, struct MHD_Connection *c, const upload *u) {
    serve_error e;
    if (u->too_large) {
        e = (serve_error){.status = 413, .type = "invalid_request_error"};
        snprintf(e.message, sizeof e.message, "request body over %d bytes", SERVE_MAX_BODY);
        return send_error(c, &e);
    }
    if (u->busy) {
        e = (serve_error){.status = 503, .type = "server_error"};
        snprintf(e.message, sizeof e.message, "the server holds %zu bytes of request bodies "
                 "already (--max-upload-mb): try again", s->max_upload_bytes);
        return send_error(c, &e);
    }
    serve_completion req;
    if (!serve_completion_parse(u->data ? u->data : "", u->len, &s->bounds, &req, &e))
        return send_error(c, &e);
    int n = req.n_prompts;
    serve_job *jobs = invar_calloc((size_t)n, sizeof *jobs, "jobs");
    for (int i = 0; i < n; i++) {
        jobs[i].req = (engine_request){.prompt = req.prompts[i].tokens,
                                       .prompt_len = req.prompts[i].len,
                                       .max_new_tokens = req.max_tokens,
                                       .temperature = req.temperature, .seed = req.seed};
        jobs[i].result.steps = invar_calloc((size_t)req.max_tokens, sizeof *jobs[i].result.steps,
                                            "response records");
    }
    enum MHD_Result ok;
    // A stream's jobs are handed in and its answer begins at once; others wait for their end.
    bool taken = req.stream ? serve_queue_submit_all(s->queue, jobs, n)
                            : serve_queue_run_all(s->queue, jobs, n, client_gone, c);
    if (taken && req.stream) return stream_begin(s, c, &req, jobs);
    engine_result *results = invar_calloc((size_t)n, sizeof *results, "results");
    const char *error = NULL;
    bool cancelled = false;
    for (int i = 0; i < n; i++) {
        results[i] = jobs[i].result;
        cancelled |= jobs[i].cancelled;
        if (!error && jobs[i].error[0]) error = jobs[i].error;
        if (!error && !serve_result_finite(&jobs[i].result, req.logprobs))
            error = "a logprob came out NaN or +Infinity";
    }
    if (!taken) {
        e = (serve_error){.status = 429, .type = "rate_limit_error"};
        snprintf(e.message, sizeof e.message, "the server holds as many requests as it queues "
                 "(--max-queue): try again");
        ok = send_error(c, &e);
    } else if (cancelled) {  // nobody to answer: close the connection
        ok = MHD_NO;
    } else if (error) {
        e = engine_failed(error);
        ok = send_error(c, &e);
    } else {
        pthread_mutex_lock(&s->mu);
        long id = s->next_id++;
        pthread_mutex_unlock(&s->mu);
        body_writer w;
        serve_write_completion(body_open(&w), &req, results, s->bounds.model, id,
                               (long)time(NULL));
        ok = body_send(c, &w, MHD_HTTP_OK, "application/json");
    }
    free_jobs(jobs, n);
    free(results);
    serve_completion_free(&req);
    return ok;
}

// Content-Length headers of a request: how many, and whether they all agree.
typedef struct {
    int n;
    const char *first;
    bool differ;
} length_headers;

static enum MHD_Result note_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    length_headers *h = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0) return MHD_YES;
    if (h->n++ == 0) h->first = value;
    else if (strcmp(h->first, value ? value : "") != 0) h->differ = true;
    return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_len, void **state) {
    (void)version;
    server *s = cls;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    // First call, headers only: every method answers on a later call, once MHD has read the
    // whole request (an answer queued on the first call makes MHD close the connection, which
    // drops a pipelined next request).
    if (!*state) {
        // Two Content-Length headers that disagree frame the body two ways (a smuggling
        // vector): refused, and the connection closes with the answer.
        length_headers lengths = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, note_length, &lengths);
        if (lengths.differ) {
            serve_error e = {.status = 400, .type = "invalid_request_error"};
            snprintf(e.message, sizeof e.message, "%d Content-Length headers that disagree",
                     lengths.n);
            return send_error(c, &e);
        }
        upload *u = invar_calloc(1, sizeof(upload), "request body");
        u->post = post;
        *state = u;
        if (post) {
            pthread_mutex_lock(&s->mu);
            s->posts_open++;
            pthread_mutex_unlock(&s->mu);
        }
        return MHD_YES;
    }
    if (post && *data_len > 0) {
        upload *u = *state;
        if (u->len + *data_len > SERVE_MAX_BODY) u->too_large = true;
        // Request bodies share one memory bound: a body past it is read and dropped, 503.
        if (!u->too_large && !u->busy) {
            pthread_mutex_lock(&s->mu);
            if (u->len + *data_len > SERVE_SMALL_BODY &&
                s->upload_bytes + *data_len > s->max_upload_bytes)
                u->busy = true;
            else s->upload_bytes += *data_len, u->counted += *data_len;
            pthread_mutex_unlock(&s->mu);
        }
        if (!u->too_large && !u->busy) {
            if (u->len + *data_len + 1 > u->cap) {
                size_t cap = (u->len + *data_len + 1) * 2;
                char *grown = realloc(u->data, cap);
                if (!grown) return MHD_NO;  // drops the connection: out of memory
                u->data = grown;
                u->cap = cap;
            }
            memcpy(u->data + u->len, data, *data_len);
            u->len += *data_len;
            u->data[u->len] = '\0';
        }
        *data_len = 0;
        return MHD_YES;
    }
    body_writer w;
    // Each route answers its one method (HEAD as GET); any other is 405, never served as GET.
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    const char *model_id = strncmp(url, "/v1/models/", 11) == 0 ? url + 11 : NULL;
    if (strcmp(url, "/v1/completions") == 0) {
        if (post) return completions(s, c, *state);
    } else if (strcmp(url, "/v1/models") == 0) {
        if (get) {
            serve_write_models(body_open(&w), &s->bounds, s->created);
            return body_send(c, &w, MHD_HTTP_OK, "application/json");
        }
    } else if (model_id && strcmp(model_id, s->bounds.model) == 0) {
        if (get) {
            serve_write_model(body_open(&w), &s->bounds, s->created);
            return body_send(c, &w, MHD_HTTP_OK, "application/json");
        }
    } else if (strcmp(url, "/health") == 0) {
        if (get) {
            fputs("{\"status\":\"ok\"}\n", body_open(&w));
            return body_send(c, &w, MHD_HTTP_OK, "application/json");
        }
    } else if (strcmp(url, "/metrics") == 0) {
        if (get) {
            serve_queue_write_metrics(s->queue, body_open(&w));
            return body_send(c, &w, MHD_HTTP_OK, "text/plain; version=0.0.4");
        }
    } else if (model_id) {
        serve_error e = {.status = 404, .type = "not_found_error", .param = "model"};
        snprintf(e.message, sizeof e.message, "The model does not exist (this server serves "
                 "`%s`)", s->bounds.model);
        return send_error(c, &e);
    } else {
        serve_error e = {.status = 404, .type = "not_found_error"};
        snprintf(e.message, sizeof e.message, "no route %s %s (invar serve has POST "
                 "/v1/completions, GET /v1/models, /health, /metrics)", method, url);
        return send_error(c, &e);
    }
    serve_error e = {.status = 405, .type = "invalid_request_error"};
    snprintf(e.message, sizeof e.message, "method %s not allowed on %s", method, url);
    return send_error(c, &e);
}

static void request_done(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode why) {
    (void)c, (void)why;
    server *s = cls;
    upload *u = *state;
    if (u) {
        pthread_mutex_lock(&s->mu);
        s->upload_bytes -= u->counted;
        if (u->post) s->posts_open--;
        pthread_mutex_unlock(&s->mu);
        free(u->data);
        free(u);
        *state = NULL;
    }
}

// The gate's hand-off: MHD reads the connection from its first byte (the gate only peeked).
static bool admit(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len) {
    if (MHD_add_connection(ctx, fd, addr, addr_len) == MHD_YES) return true;
    // MHD has closed it: over --max-connections, or out of memory or threads.
    fprintf(stderr, "invar serve: MHD_add_connection failed: %s\n", strerror(errno));
    return false;
}

// The port, for a test to read once the server listens: written under a temporary name and
// renamed, so a reader never sees half of it.
static void write_port_file(const char *path, unsigned port) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        invar_die(INVAR_EXIT_INPUT, "serve: --port-file %s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) invar_die(INVAR_EXIT_SYSTEM, "serve: --port-file: cannot create %s: %s", tmp,
                      strerror(errno));
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: --port-file: writing %s failed: %s", path,
                  strerror(errno));
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *set = NULL, *device = "cpu", *host = "127.0.0.1", *name = NULL,
               *backend_name = "mla-unified", *port_file = NULL;
    int port = 8000, threads = 0, max_num_seqs = 16, budget = 256, max_model_len = 512,
        window_ms = 0, min_batch = 1, max_queue = 256, max_upload_mb = 256,
        max_connections = 4096, connection_timeout = 60, drain_s = 60;
    uint64_t seed = 0;
    bool no_chunked = false, no_prefix = false, cuda_graphs = false;
    const cli_flag flags[] = {
        {.name = "--model", .metavar = "NAME|DIR", .to.string = &model, .required = true,
         .help = "a named config (synthetic weights from --seed) or a checkpoint directory"},
        {.name = "--kernel-set", .metavar = "SET", .to.string = &set, .required = true,
         .help = "invariant, reference, adversarial, ... (sets/registry.h)"},
        {.name = "--device", .to.string = &device, .choices = "cpu|cuda", .show_default = true,
         .help = "where the kernel set runs"},
        {.name = "--host", .metavar = "IPV4", .to.string = &host, .show_default = true,
         .help = "the address to listen on"},
        {.name = "--port", .kind = CLI_INT, .to.integer = &port, .min = 0, .max = 65535,
         .show_default = true, .help = "the TCP port; 0 picks a free one (see --port-file)"},
        {.name = "--port-file", .metavar = "FILE", .to.string = &port_file,
         .help = "write the port listened on to FILE once listening"},
        {.name = "--served-model-name", .metavar = "NAME", .to.string = &name,
         .help = "the name clients give as \"model\" (default: --model)"},
        {.name = "--seed", .kind = CLI_U64, .to.u64 = &seed, .show_default = true,
         .help = "synthetic weights and sampling noise (noise depends on this seed,\n"
                 "the request's seed and the position only)"},
        {.name = "--threads", .kind = CLI_INT, .to.integer = &threads, .min = 0, .max = 1024,
         .help = "CPU worker threads (default 0: one per core)"},
        {.name = "--attention-backend", .metavar = "NAME", .to.string = &backend_name,
         .show_default = true, .help = "an attention backend of engine/attention_backend.h"},
        {.name = "--max-num-seqs", .kind = CLI_INT, .to.integer = &max_num_seqs, .min = 1,
         .max = 4096, .show_default = true, .help = "most requests in one step"},
        {.name = "--max-num-batched-tokens", .kind = CLI_INT, .to.integer = &budget, .min = 1,
         .max = 1 << 20, .show_default = true, .help = "token budget of one step"},
        {.name = "--max-model-len", .kind = CLI_INT, .to.integer = &max_model_len, .min = 2,
         .max = 1 << 20, .show_default = true,
         .help = "longest prompt + max_tokens (at most the model's positions)"},
        {.name = "--no-chunked-prefill", .kind = CLI_SWITCH, .to.on = &no_chunked,
         .help = "prefill a prompt whole, in one step"},
        {.name = "--cuda-graphs", .kind = CLI_SWITCH, .to.on = &cuda_graphs,
         .help = "decode steps padded to the buckets 1, 2, 4, 8, 16, 24, ... 512 (up to\n"
                 "--max-num-seqs) and replayed from a graph captured per bucket, as vLLM\n"
                 "and SGLang serve them (on the CPU: recorded calls; not with mla-flash)"},
        {.name = "--no-prefix-caching", .kind = CLI_SWITCH, .to.on = &no_prefix,
         .help = "never reuse cached prompt blocks across requests"},
        {.name = "--batch-window-ms", .kind = CLI_INT, .to.integer = &window_ms, .min = 0,
         .max = 60000, .show_default = true,
         .help = "an idle engine holds its first request this long for others\n"
                 "to share the first step (tests on loaded machines)"},
        {.name = "--min-batch", .kind = CLI_INT, .to.integer = &min_batch, .min = 1,
         .max = 4096, .show_default = true,
         .help = "with a window: start once this many requests wait"},
        {.name = "--max-queue", .kind = CLI_INT, .to.integer = &max_queue, .min = 1,
         .max = 1 << 20, .show_default = true,
         .help = "most requests waiting or running; more get 429 with Retry-After"},
        {.name = "--max-upload-mb", .kind = CLI_INT, .to.integer = &max_upload_mb, .min = 1,
         .max = 1 << 20, .show_default = true,
         .help = "request bodies held at once, over all connections; past it 503"},
        {.name = "--max-connections", .kind = CLI_INT, .to.integer = &max_connections,
         .min = 1, .max = 1 << 20, .show_default = true, .help = "open connections at once"},
        {.name = "--connection-timeout", .kind = CLI_INT, .to.integer = &connection_timeout,
         .min = 1, .max = 86400, .show_default = true,
         .help = "seconds a connection may stay idle"},
        {.name = "--drain-timeout", .kind = CLI_INT, .to.integer = &drain_s, .min = 0,
         .max = 86400, .show_default = true,
         .help = "on SIGINT/SIGTERM: seconds to finish the requests in flight"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar serve",
        .about = "An OpenAI-compatible server over invar's engine: POST /v1/completions\n"
                 "(prompts as token-id lists; logprobs with \"token_id:N\" names; per-request\n"
                 "seeded sampling), GET /v1/models, /health and /metrics (the batch size of\n"
                 "every step run). Continuous batching, chunked prefill and prefix caching\n"
                 "across requests. Runs until SIGINT or SIGTERM.",
        .flags = flags,
        .epilogue = "Exit: 0 after SIGINT/SIGTERM, 2 bad usage or model, 3 a system call failed.",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    const kernel_set_entry *entry = kernel_set_find(set, device);
    if (!entry) return cli_usage_error(&cmd, "--kernel-set: no kernel set '%s' on %s", set, device);
    const attention_backend *backend = attention_backend_by_name(backend_name);
    if (!backend || !attention_backend_on_device(backend, device))
        return cli_usage_error(&cmd, "--attention-backend: no backend '%s' on %s", backend_name,
                               device);
    if (cuda_graphs && backend->path == ATTENTION_BATCH_SCHEDULED_DECODE)
        return cli_usage_error(&cmd, "--cuda-graphs: backend %s takes its decode split from the "
                               "whole batch, which a graph would freeze", backend->name);
    if (min_batch > max_num_seqs)
        return cli_usage_error(&cmd, "--min-batch %d exceeds --max-num-seqs %d", min_batch,
                               max_num_seqs);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return cli_usage_error(&cmd, "--host: '%s' is not an IPv4 address", host);
    if (strcmp(device, "cuda") == 0) {
        char why[256];
        if (!cuda_device_available(why, sizeof why)) {
            fprintf(stderr, "invar serve: --device cuda: %s\n", why);
            return INVAR_EXIT_INPUT;
        }
    }

    model_config cfg;
    weight_source *w = NULL;
    char err[1400];
    if (!case_model_open(model, seed, &cfg, &w, err, sizeof err)) {
        fprintf(stderr, "invar serve: --model: %s\n", err);
        return INVAR_EXIT_INPUT;
    }
    if (max_model_len > cfg.max_position_embeddings) max_model_len = cfg.max_position_embeddings;
    bool prefix_caching = !no_prefix;
    if (prefix_caching && entry->batch_invariant && !backend->invariant_with_prefix_caching) {
        fprintf(stderr, "invar serve: warning: prefix caching disabled: attention backend %s is "
                "not batch-invariant with it\n", backend->name);
        prefix_caching = false;
    }
    ops_set *ops = kernel_set_create(set, device, threads);
    if (!ops) invar_die(INVAR_EXIT_INPUT, "serve: cannot create kernel set %s on %s", set,
                        device);
    engine_limits limits = {.max_num_seqs = max_num_seqs, .max_num_batched_tokens = budget,
                            .max_model_len = max_model_len,
                            .max_total_tokens = max_num_seqs * max_model_len, .block_size = 64};
    if (cuda_graphs) {
        limits.n_graph_buckets = case_graph_buckets(limits.graph_buckets, ENGINE_MAX_GRAPH_BUCKETS);
        ops = graph_record_on_cpu(ops);
    }
    engine *e = engine_create(&cfg, w, ops, &limits, seed);
    w->destroy(w);
    engine_sched sched = {.max_num_seqs = max_num_seqs, .max_num_batched_tokens = budget,
                          .chunked_prefill = !no_chunked, .top_k = ENGINE_MAX_TOPK,
                          .backend = backend, .prefix_caching = prefix_caching};

    // SIGINT and SIGTERM wait for this thread's sigwait: blocked before any thread starts, so
    // every thread inherits the mask. A client gone mid-reply must not kill the server.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    int src = pthread_sigmask(SIG_BLOCK, &stop, NULL);
    if (src != 0) invar_die(INVAR_EXIT_SYSTEM, "serve: pthread_sigmask failed: %s",
                            strerror(src));
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        invar_die(INVAR_EXIT_SYSTEM, "serve: ignoring SIGPIPE failed: %s", strerror(errno));

    serve_batching batching = {.window_ms = window_ms, .min_batch = min_batch,
                               .max_jobs = max_queue};
    server s = {.bounds = {.model = name ? name : model, .vocab_size = cfg.vocab_size,
                           .max_model_len = max_model_len,
                           .max_prompt_len = no_chunked ? budget : 0},
                .created = (long)time(NULL),
                .max_upload_bytes = (size_t)max_upload_mb << 20};
    if ((src = pthread_mutex_init(&s.mu, NULL)) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: pthread_mutex_init failed: %s", strerror(src));
    s.queue = serve_queue_start(e, &sched, &batching);
    // MHD_USE_NO_LISTEN_SOCKET: the gate (harness/serve/serve_gate.h) listens and hands MHD
    // only connections whose first head it accepted, so the HTTP layer's refusals are JSON.
    // MHD_USE_ITC: MHD's polling thread wakes for each connection handed to it.
    // MHD_USE_POLL: poll, not select, so descriptors past FD_SETSIZE (1024) still work.
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
            MHD_USE_ITC | MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET,
        0, NULL, NULL, handle, &s, MHD_OPTION_NOTIFY_COMPLETED, request_done, &s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)connection_timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVE_CONNECTION_MEMORY,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)SERVE_THREAD_STACK, MHD_OPTION_END);
    if (!d) invar_die(INVAR_EXIT_SYSTEM, "serve: MHD_start_daemon failed: %s", strerror(errno));
    char gate_err[256];
    serve_gate_limits gate_limits = {.max_pending = max_connections,
                                     .idle_timeout_s = connection_timeout};
    serve_gate *gate = serve_gate_start(&addr, &gate_limits, admit, d, gate_err,
                                        sizeof gate_err);
    if (!gate) invar_die(INVAR_EXIT_SYSTEM, "serve: cannot listen on %s:%d (%s)", host, port,
                         gate_err);
    unsigned bound = serve_gate_port(gate);
    if (port_file) write_port_file(port_file, bound);
    printf("invar serve: %s on %s (kernel set %s, backend %s, prefix caching %s, chunked prefill "
           "%s, batch window %d ms) at http://%s:%u/v1\n", s.bounds.model, device, set,
           backend->name, prefix_caching ? "on" : "off", no_chunked ? "off" : "on", window_ms,
           host, bound);
    if (fflush(stdout) != 0) invar_die(INVAR_EXIT_SYSTEM, "writing stdout failed");

    int sig = 0;
    if ((src = sigwait(&stop, &sig)) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: sigwait failed: %s", strerror(src));
    // No new connections; the requests in flight run to their end and get their answers
    // (an empty reply to a request the server accepted would read as a crash).
    printf("invar serve: %s: finishing the requests in flight (at most %d s)\n",
           sig == SIGINT ? "SIGINT" : "SIGTERM", drain_s);
    fflush(stdout);
    serve_gate_stop(gate);
    bool drained = serve_queue_drain(s.queue, drain_s);
    for (double waited = 0; waited < drain_s; waited += 0.01) {  // answers being sent
        pthread_mutex_lock(&s.mu);
        int open = s.posts_open;
        pthread_mutex_unlock(&s.mu);
        if (open == 0) break;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    printf("invar serve: stopping%s\n", drained ? "" : " (requests still running were cut)");
    MHD_stop_daemon(d);
    serve_queue_stop(s.queue);
    pthread_mutex_destroy(&s.mu);
    engine_destroy(e);
    ops->destroy(ops);
    return 0;
}

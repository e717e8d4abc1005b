// kernels/fingerprint.c — the per-call record of reduction orders and paths
// (kernels/fingerprint.h). Small fixed tables: a checked shape notes a handful of ops, shapes
// and paths; past the tables' size a call counts as a mismatch, so nothing is claimed unseen.
#include "fingerprint.h"

#include <pthread.h>  // pthread_mutex_t
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free
#include <string.h>   // strcmp

#include "../common/check.h"  // invar_calloc, invar_die
#include "../common/hash.h"   // invar_mix64

#define ORDER_SLOTS 256
#define PATH_SLOTS 128
#define PATH_NAME 64

typedef struct {
    const char *op;
    uint64_t shape, order;
    int batch;
} order_slot;

struct fingerprint_sink {
    pthread_mutex_t lock;
    int batch;
    int n_orders, n_paths;
    order_slot orders[ORDER_SLOTS];
    char paths[PATH_SLOTS][PATH_NAME];
    bool mismatched;
    fingerprint_mismatch first;
};

uint64_t fingerprint_order(const long *params, int n) {
    uint64_t h = invar_mix64(0x6f72646572ull + (uint64_t)n);
    for (int i = 0; i < n; i++) h = invar_mix64(h ^ invar_mix64((uint64_t)params[i] + (uint64_t)i));
    return h;
}

fingerprint_sink *fingerprint_sink_create(void) {
    fingerprint_sink *s = invar_calloc(1, sizeof *s, "fingerprint sink");
    int rc = pthread_mutex_init(&s->lock, NULL);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "fingerprint sink: pthread_mutex_init failed (%d)", rc);
    return s;
}

void fingerprint_sink_destroy(fingerprint_sink *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void fingerprint_sink_batch(fingerprint_sink *s, int batch) {
    if (s) s->batch = batch;
}

void fingerprint_sink_reset_orders(fingerprint_sink *s) {
    s->n_orders = 0;
    s->mismatched = false;
}

static void note_mismatch(fingerprint_sink *s, const char *op, uint64_t shape, uint64_t a,
                          int batch_a, uint64_t b) {
    if (s->mismatched) return;
    s->mismatched = true;
    s->first = (fingerprint_mismatch){.op = op, .shape = shape, .order_a = a, .order_b = b,
                                      .batch_a = batch_a, .batch_b = s->batch};
}

static void note_order(fingerprint_sink *s, const char *op, uint64_t shape, uint64_t order) {
    for (int i = 0; i < s->n_orders; i++) {
        order_slot *o = &s->orders[i];
        if (strcmp(o->op, op) != 0 || o->shape != shape) continue;
        if (o->order != order) note_mismatch(s, op, shape, o->order, o->batch, order);
        return;
    }
    if (s->n_orders == ORDER_SLOTS) {  // table full: claim nothing we cannot show
        note_mismatch(s, op, shape, 0, s->batch, order);
        return;
    }
    s->orders[s->n_orders++] = (order_slot){.op = op, .shape = shape, .order = order, .batch = s->batch};
}

static void note_path(fingerprint_sink *s, const char *op, const char *path) {
    char name[PATH_NAME];
    int n = snprintf(name, sizeof name, "%s:%s", op, path);
    if (n < 0 || n >= (int)sizeof name)
        invar_die(INVAR_EXIT_SYSTEM, "fingerprint: path name %s:%s longer than %d", op, path, PATH_NAME - 1);
    for (int i = 0; i < s->n_paths; i++)
        if (strcmp(s->paths[i], name) == 0) return;
    if (s->n_paths == PATH_SLOTS)
        invar_die(INVAR_EXIT_SYSTEM, "fingerprint: more than %d paths noted", PATH_SLOTS);
    memcpy(s->paths[s->n_paths++], name, (size_t)n + 1);
}

void fingerprint_note(fingerprint_sink *s, const char *op, uint64_t shape, uint64_t order,
                      const char *path) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    note_order(s, op, shape, order);
    note_path(s, op, path);
    pthread_mutex_unlock(&s->lock);
}

bool fingerprint_sink_mismatch(const fingerprint_sink *s, fingerprint_mismatch *out) {
    if (s->mismatched && out) *out = s->first;
    return s->mismatched;
}

bool fingerprint_sink_reached(const fingerprint_sink *s, const char *op_path) {
    for (int i = 0; i < s->n_paths; i++)
        if (strcmp(s->paths[i], op_path) == 0) return true;
    return false;
}

int fingerprint_sink_paths(const fingerprint_sink *s, const char **names, int max) {
    int n = s->n_paths < max ? s->n_paths : max;
    for (int i = 0; i < n; i++) names[i] = s->paths[i];
    return n;
}

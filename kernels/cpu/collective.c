// kernels/cpu/collective.c — the CPU communicator (kernels/cpu/collective.h).
#include "collective.h"

#include <pthread.h>                   // pthread_mutex_*, pthread_cond_*
#include <stdlib.h>                    // free
#include <string.h>                    // memcpy, strerror

#include "../../common/check.h"        // invar_die, invar_calloc, invar_malloc

#define PT_CHECK(call)                                                                      \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != 0) invar_die(INVAR_EXIT_SYSTEM, "%s failed: %s", #call, strerror(rc_));  \
    } while (0)

struct tp_comm {
    tp_comm_group *group;
    int rank;
    void *device;  // the attached device communicator of this rank (NULL: none)
};

// What a rank publishes for the others to read between two barriers.
typedef struct {
    void *buf;
    long n;                  // all_reduce: message size; all_gather: columns begin, end
    long col_begin, col_end;
    void *scratch;           // all_reduce: this rank's reduced stretch, read by every rank
    size_t scratch_bytes;
} rank_slot;

struct tp_comm_group {
    int size;
    pthread_mutex_t lock;
    pthread_cond_t all_arrived;
    int arrived;
    unsigned long generation;  // bumped each time the last rank arrives
    rank_slot *slots;
    tp_comm *ranks;
    tp_device_comms_close close_device;  // NULL: no device communicator attached
};

tp_comm_group *tp_comm_group_create(int T) {
    if (T < 1) invar_die(INVAR_EXIT_INPUT, "collective: a group needs at least one rank (got %d)", T);
    tp_comm_group *g = invar_calloc(1, sizeof *g, "tensor-parallel group");
    g->size = T;
    PT_CHECK(pthread_mutex_init(&g->lock, NULL));
    PT_CHECK(pthread_cond_init(&g->all_arrived, NULL));
    g->slots = invar_calloc((size_t)T, sizeof *g->slots, "tensor-parallel rank slots");
    g->ranks = invar_calloc((size_t)T, sizeof *g->ranks, "tensor-parallel ranks");
    for (int r = 0; r < T; r++) g->ranks[r] = (tp_comm){.group = g, .rank = r};
    return g;
}

void tp_comm_group_destroy(tp_comm_group *g) {
    if (!g) return;
    if (g->close_device) {
        void *handles[g->size];
        for (int r = 0; r < g->size; r++) handles[r] = g->ranks[r].device;
        g->close_device(handles, g->size);
    }
    for (int r = 0; r < g->size; r++) free(g->slots[r].scratch);
    PT_CHECK(pthread_cond_destroy(&g->all_arrived));
    PT_CHECK(pthread_mutex_destroy(&g->lock));
    free(g->slots);
    free(g->ranks);
    free(g);
}

tp_comm *tp_comm_group_rank(tp_comm_group *g, int rank) {
    if (rank < 0 || rank >= g->size)
        invar_die(INVAR_EXIT_INPUT, "collective: rank %d outside a group of %d", rank, g->size);
    return &g->ranks[rank];
}

int tp_comm_size(const tp_comm *c) { return c->group->size; }
int tp_comm_rank(const tp_comm *c) { return c->rank; }

void tp_comm_group_attach_device(tp_comm_group *g, void *const *handles,
                                 tp_device_comms_close close) {
    if (g->close_device)
        invar_die(INVAR_EXIT_SYSTEM, "collective: a group of %d already has device "
                  "communicators attached", g->size);
    for (int r = 0; r < g->size; r++) g->ranks[r].device = handles[r];
    g->close_device = close;
}

void *tp_comm_device(const tp_comm *c) { return c->device; }

// Blocks until every rank has arrived. The mutex also orders memory: what a rank wrote before
// arriving is visible to every rank after it leaves.
static void barrier(tp_comm_group *g) {
    PT_CHECK(pthread_mutex_lock(&g->lock));
    unsigned long seen = g->generation;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        PT_CHECK(pthread_cond_broadcast(&g->all_arrived));
    } else {
        while (g->generation == seen) PT_CHECK(pthread_cond_wait(&g->all_arrived, &g->lock));
    }
    PT_CHECK(pthread_mutex_unlock(&g->lock));
}

// Rank r's stretch of a message of n elements.
// n * r / T without the product overflowing.
static long stretch_begin(long n, int r, int T) { return n / T * r + n % T * r / T; }

// Publishes this rank's buffer of n elements and waits for every rank's; returns this rank's
// scratch, grown to hold its stretch [begin, end) of `elem`-byte elements.
static void *publish(tp_comm *c, void *buf, long n, size_t elem, long begin, long end) {
    tp_comm_group *g = c->group;
    rank_slot *mine = &g->slots[c->rank];
    size_t bytes = (size_t)(end - begin) * elem;
    if (bytes > mine->scratch_bytes) {
        free(mine->scratch);
        mine->scratch = invar_malloc(bytes, "all_reduce stretch");
        mine->scratch_bytes = bytes;
    }
    mine->buf = buf;
    mine->n = n;
    barrier(g);  // every buffer published
    for (int r = 0; r < g->size; r++)
        if (g->slots[r].n != n)
            invar_die(INVAR_EXIT_SYSTEM, "all_reduce: rank %d sends %ld elements, rank %d %ld",
                      c->rank, n, r, g->slots[r].n);
    return mine->scratch;
}

// After every rank reduced its stretch into its scratch: each rank copies every stretch into
// its own buffer.
static void gather_stretches(tp_comm *c, void *buf, long n, size_t elem) {
    tp_comm_group *g = c->group;
    int T = g->size;
    barrier(g);  // every stretch reduced; no rank reads the inputs any more
    for (int r = 0; r < T; r++) {
        long b = stretch_begin(n, r, T), e = stretch_begin(n, r + 1, T);
        // With fewer elements than ranks a stretch can be empty, its scratch never allocated.
        if (e > b)
            memcpy((char *)buf + (size_t)b * elem, g->slots[r].scratch, (size_t)(e - b) * elem);
    }
    barrier(g);  // every stretch copied: a rank may now reuse its scratch
}

void cpu_comm_all_reduce(tp_comm *c, bf16 *buf, long n, cpu_all_reduce_slice slice,
                         const void *order) {
    tp_comm_group *g = c->group;
    int T = g->size, me = c->rank;
    if (T == 1 || n <= 0) return;
    long begin = stretch_begin(n, me, T), end = stretch_begin(n, me + 1, T);
    bf16 *scratch = publish(c, buf, n, sizeof(bf16), begin, end);
    const bf16 *ins[T];
    for (int r = 0; r < T; r++) ins[r] = g->slots[r].buf;
    slice(order, scratch, ins, T, begin, end, n);
    gather_stretches(c, buf, n, sizeof(bf16));
}

void cpu_comm_all_reduce_f32(tp_comm *c, float *buf, long n, cpu_all_reduce_f32_slice slice,
                             const void *order) {
    tp_comm_group *g = c->group;
    int T = g->size, me = c->rank;
    if (T == 1 || n <= 0) return;
    long begin = stretch_begin(n, me, T), end = stretch_begin(n, me + 1, T);
    float *scratch = publish(c, buf, n, sizeof(float), begin, end);
    const float *ins[T];
    for (int r = 0; r < T; r++) ins[r] = g->slots[r].buf;
    slice(order, scratch, ins, T, begin, end, n);
    gather_stretches(c, buf, n, sizeof(float));
}

void cpu_comm_all_gather_columns(tp_comm *c, float *buf, int rows, long ld, long col_begin,
                                 long col_end) {
    tp_comm_group *g = c->group;
    int T = g->size, me = c->rank;
    if (T == 1) return;
    rank_slot *mine = &g->slots[me];
    mine->buf = buf;
    mine->n = rows;
    mine->col_begin = col_begin;
    mine->col_end = col_end;
    barrier(g);  // every rank's columns written and published
    for (int r = 0; r < T; r++) {
        const rank_slot *s = &g->slots[r];
        if (s->n != rows)
            invar_die(INVAR_EXIT_SYSTEM, "all_gather: rank %d sends %d rows, rank %d %ld", me,
                      rows, r, s->n);
        if (r == me || s->col_end <= s->col_begin) continue;
        const float *src = s->buf;
        for (long row = 0; row < rows; row++)
            memcpy(buf + row * ld + s->col_begin, src + row * ld + s->col_begin,
                   (size_t)(s->col_end - s->col_begin) * sizeof(float));
    }
    barrier(g);  // every copy done: a rank may now overwrite its buffer
}

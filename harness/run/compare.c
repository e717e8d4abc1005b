// harness/run/compare.c — the bitwise comparator (harness/run/compare.h).
#include "compare.h"

#include <math.h>    // fabs
#include <stdio.h>   // snprintf
#include <string.h>  // memcpy

// ---------------------------------------------------------------------------------------------
// Float bits
// ---------------------------------------------------------------------------------------------

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

bool float_bits_equal(float a, float b) { return float_bits(a) == float_bits(b); }

// Positive floats keep their bit pattern; a negative float's magnitude bits are negated, so
// -0 lands on 0 and the smallest negative denormal on -1.
int64_t float_ordered(float f) {
    uint32_t u = float_bits(f);
    int64_t magnitude = (int64_t)(u & 0x7fffffffu);
    return (u & 0x80000000u) ? -magnitude : magnitude;
}

int64_t float_ulp_distance(float a, float b) {
    int64_t d = float_ordered(a) - float_ordered(b);
    return d < 0 ? -d : d;
}

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

static void describe(divergence *d, diff_kind kind, int step, int topk_index, int32_t base_token,
                     int32_t other_token, float base_lp, float other_lp) {
    d->kind = kind;
    d->step = step;
    d->topk_index = topk_index;
    d->base_token = base_token;
    d->other_token = other_token;
    d->base_logprob = base_lp;
    d->other_logprob = other_lp;
    d->abs_delta = fabs((double)other_lp - (double)base_lp);
    d->ulps = float_ulp_distance(base_lp, other_lp);
}

bool compare_step(const engine_result *base, const engine_result *other, int step, int top_k,
                  divergence *d) {
    bool in_base = step < base->n_steps, in_other = step < other->n_steps;
    if (!in_base && !in_other) return false;
    if (!in_base || !in_other) {
        const engine_step_record *r = in_base ? &base->steps[step] : &other->steps[step];
        describe(d, DIFF_LENGTH, step, -1, in_base ? r->token : -1, in_other ? r->token : -1,
                 in_base ? r->logprob : 0.0f, in_other ? r->logprob : 0.0f);
        // A missing step has no logprob to be near: a distance to a stand-in 0 would read as
        // a measured one (a billion ulps).
        d->abs_delta = 0.0;
        d->ulps = 0;
        return true;
    }
    const engine_step_record *a = &base->steps[step], *b = &other->steps[step];
    if (a->token != b->token) {
        describe(d, DIFF_TOKEN, step, -1, a->token, b->token, a->logprob, b->logprob);
        return true;
    }
    if (!float_bits_equal(a->logprob, b->logprob)) {
        describe(d, DIFF_LOGPROB, step, -1, a->token, b->token, a->logprob, b->logprob);
        return true;
    }
    for (int i = 0; i < top_k; i++) {
        if (a->topk_ids[i] != b->topk_ids[i]) {
            describe(d, DIFF_TOPK_ID, step, i, a->topk_ids[i], b->topk_ids[i],
                     a->topk_logprobs[i], b->topk_logprobs[i]);
            return true;
        }
        if (!float_bits_equal(a->topk_logprobs[i], b->topk_logprobs[i])) {
            describe(d, DIFF_TOPK_LOGPROB, step, i, a->topk_ids[i], b->topk_ids[i],
                     a->topk_logprobs[i], b->topk_logprobs[i]);
            return true;
        }
    }
    return false;
}

bool compare_results(const engine_result *base, const engine_result *other, int top_k,
                     divergence *first) {
    int steps = base->n_steps > other->n_steps ? base->n_steps : other->n_steps;
    for (int s = 0; s < steps; s++)
        if (compare_step(base, other, s, top_k, first)) return true;
    return false;
}

comparison compare_request_sets(const engine_result *base, const engine_result *other, int count,
                                int top_k, divergence_sink sink, void *user) {
    comparison c = {.requests = 0};
    for (int i = 0; i < count; i++) {
        int steps = base[i].n_steps > other[i].n_steps ? base[i].n_steps : other[i].n_steps;
        bool differs = false;
        for (int s = 0; s < steps; s++) {
            divergence d;
            c.steps++;
            if (!compare_step(&base[i], &other[i], s, top_k, &d)) continue;
            if (!c.has_first) {
                c.has_first = true;
                c.first_request = i;
                c.first = d;
            }
            differs = true;
            if (sink) sink(user, i, &d);
        }
        c.requests++;
        if (differs) c.differing++;
    }
    return c;
}

const char *diff_kind_name(const divergence *d, char *buf, int len) {
    switch (d->kind) {
    case DIFF_NONE: snprintf(buf, (size_t)len, "none"); break;
    case DIFF_LENGTH: snprintf(buf, (size_t)len, "length"); break;
    case DIFF_TOKEN: snprintf(buf, (size_t)len, "token"); break;
    case DIFF_LOGPROB: snprintf(buf, (size_t)len, "logprob"); break;
    case DIFF_TOPK_ID: snprintf(buf, (size_t)len, "topk_id[%d]", d->topk_index); break;
    case DIFF_TOPK_LOGPROB: snprintf(buf, (size_t)len, "topk_logprob[%d]", d->topk_index); break;
    }
    return buf;
}

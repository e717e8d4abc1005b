// harness/run/verdict.c — a config's verdict (harness/run/verdict.h).
#include "verdict.h"

#include <stdio.h>                  // snprintf
#include <string.h>                 // strcmp, strlen

#include "../../kernels/order_log.h" // order_log_describe

// A realistic set (not batch-invariant, not adversarial) that matched bs=1 everywhere, in a
// case whose adversarial set is the negative control: said as information, with what the set's
// order log saw (the ops that kept one order could not have shown anything here; the ones that
// changed order did so without changing a logprob bit). Never for a control that must be
// caught (resolved_config.must_be_caught): it has no other reduction to be order-free in.
static bool order_free_information(const resolved_config *rc, const ops_set *set,
                                   bool adversarial_control, outcome *out) {
    if (rc->batch_invariant_mode || rc->must_be_caught || set->adversarial ||
        !adversarial_control)
        return false;
    char ops[512] = "no order recorded";
    if (set->orders) order_log_describe(set->orders, ops, sizeof ops);
    snprintf(out->note, sizeof out->note, "information: the %s set was not caught at this "
             "case's shapes (every request matched bs=1 bit for bit); %s; the adversarial set "
             "is this case's negative control", set->name, ops);
    return true;
}

void outcome_judge(const resolved_config *rc, const ops_set *set, bool adversarial_control,
                   outcome *out) {
    if (out->repeat_differs) out->observed = "nondeterministic";
    else if (out->batch_differs) out->observed = "batch-variant";
    else out->observed = "invariant";
    // A control is caught when a run it was compared with differed, as `observed` says: a
    // difference counted but not observed would be a runner bug, never a catch.
    bool holds = rc->expect_invariant ? strcmp(out->observed, "invariant") == 0
                                      : strcmp(out->observed, "invariant") != 0 &&
                                            out->differing > 0;
    if (!holds && !rc->expect_invariant && order_free_information(rc, set, adversarial_control, out)) holds = true;
    else if (!holds && !rc->expect_invariant) {
        snprintf(out->note, sizeof out->note, "negative control not triggered: expected "
                 "batch-variant (%s), yet every request matched bs=1 bit for bit, so this case "
                 "is too weak to show batch variance",
                 !rc->batch_invariant_mode ? "a non-invariant kernel set"
                                           : "prefix caching forced on");
    }
    if (strcmp(out->prefill_vs_decode, "DIFFER") == 0) holds = false;
    // Every CPU set is deterministic by construction (the thread pool splits outputs, never a
    // reduction; an order that changes is a function of the batch): a repeat of the same batch
    // that differs is a race in a kernel or the engine, or a runner comparing the wrong runs,
    // and fails even a negative control, which it would otherwise let pass as "caught".
    if (out->repeat_differs && set->device && strcmp(set->device, "cpu") == 0) {
        holds = false;
        snprintf(out->note, sizeof out->note, "nondeterministic on the CPU: the repeat of the "
                 "largest batch differed from its first run, yet every CPU kernel set is "
                 "deterministic by construction (a race in a kernel or the engine, or the "
                 "runner compared other runs)");
    }
    out->verdict = holds ? "PASS" : "FAIL";
}

// Appends `text` to the note, after what is there.
static void note_append(outcome *out, const char *text) {
    size_t used = strlen(out->note);
    snprintf(out->note + used, sizeof out->note - used, "%s%s", used ? "; " : "", text);
}

void outcome_judge_orders(const resolved_config *rc, const ops_set *set,
                          const fingerprint_sink *orders, outcome *out) {
    if (!rc->expect_invariant || !set->paths || !orders) return;
    char text[384];
    fingerprint_mismatch m;
    const char *noted[1];
    if (fingerprint_sink_mismatch(orders, &m)) {
        // Two orders within one batch size: the order follows the call (its token count),
        // which the batch decides, even where one run holds both.
        if (m.batch_a == m.batch_b)
            snprintf(text, sizeof text, "reduction order followed the call: %s (shape key "
                     "%016llx) ran orders %016llx and %016llx in the runs at bs=%d, with the "
                     "call's tokens", m.op, (unsigned long long)m.shape,
                     (unsigned long long)m.order_a, (unsigned long long)m.order_b, m.batch_a);
        else
            snprintf(text, sizeof text, "reduction order followed the batch: %s (shape key "
                     "%016llx) ran order %016llx at bs=%d and %016llx at bs=%d", m.op,
                     (unsigned long long)m.shape, (unsigned long long)m.order_a, m.batch_a,
                     (unsigned long long)m.order_b, m.batch_b);
    } else if (fingerprint_sink_paths(orders, noted, 1) == 0) {
        snprintf(text, sizeof text, "no kernel of the %s set noted a reduction order in the "
                 "whole run: its invariant path never ran", set->name);
    } else return;
    note_append(out, text);
    out->verdict = "FAIL";
}

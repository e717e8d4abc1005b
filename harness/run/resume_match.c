// harness/run/resume_match.c — matching an interrupted run's rows to the configs
// (harness/run/resume_match.h).
#include "resume_match.h"

#include <stdio.h>                      // snprintf
#include <string.h>                     // strcmp

#include "../../reports/report_schema.h" // summary_header, SUMMARY_*
#include "summary_row.h"                // summary_fields, summary_verdict_literal

// The columns that say what was asked for: a finished row must hold what this run would write
// there, or the case, the command or the machine changed since the run started.
static const summary_column requested_columns[] = {
    SUMMARY_CASE, SUMMARY_CONFIG, SUMMARY_DEVICE, SUMMARY_KERNEL_SET, SUMMARY_MODEL,
    SUMMARY_SEED, SUMMARY_PROMPTS, SUMMARY_REQUESTS, SUMMARY_MIN_LEN, SUMMARY_MAX_LEN,
    SUMMARY_MAX_NEW_TOKENS, SUMMARY_TEMPERATURE, SUMMARY_TOP_K, SUMMARY_SHARED_PREFIX_GROUPS,
    SUMMARY_SHARED_PREFIX_LEN, SUMMARY_WARM_CACHE_REPEATS, SUMMARY_ARRIVALS,
    SUMMARY_MAX_NUM_BATCHED_TOKENS, SUMMARY_CHUNKED_PREFILL, SUMMARY_PREFIX_CACHING,
    SUMMARY_FORCE_PREFIX_CACHING, SUMMARY_BATCH_SIZES, SUMMARY_BACKEND_SELECTED_BY,
    SUMMARY_MERGED_INTO,
};

// False with the reason in err unless t has exactly this invar's summary columns.
static bool same_columns(const csv_table *t, char *err, int err_len) {
    const char *const *header = summary_header();
    if (t->ncols != SUMMARY_NCOLS) {
        snprintf(err, (size_t)err_len, "%s: %d columns where this invar writes %d: written by "
                 "another version of invar; start a new run", t->path, t->ncols, SUMMARY_NCOLS);
        return false;
    }
    for (int i = 0; i < SUMMARY_NCOLS; i++) {
        if (strcmp(t->header[i], header[i]) != 0) {
            snprintf(err, (size_t)err_len, "%s: column %d is '%s' where this invar writes '%s': "
                     "written by another version of invar; start a new run", t->path, i + 1,
                     t->header[i], header[i]);
            return false;
        }
    }
    return true;
}

bool resume_match_done(const case_file *c, const run_config *configs,
                       const resolved_config *rs, int n, const backend_selection *sel,
                       const csv_table *t, int usable_rows, int *done_row, char *err,
                       int err_len) {
    if (!same_columns(t, err, err_len)) return false;
    const char *const *header = summary_header();
    for (int k = 0; k < n; k++) done_row[k] = -1;
    for (int r = 0; r < usable_rows && r < t->nrows; r++) {
        const char *verdict = summary_verdict_literal(csv_at(t, r, SUMMARY_VERDICT));
        if (!verdict) continue;  // never judged: the config runs again
        const char *name = csv_at(t, r, SUMMARY_CONFIG);
        int k = 0;
        while (k < n && strcmp(configs[k].name, name) != 0) k++;
        if (k == n) {
            snprintf(err, (size_t)err_len, "%s:%d: config '%s' is not in the case's matrix: the "
                     "case or the command changed since the run started; start a new run",
                     t->path, r + 2, name);
            return false;
        }
        if (done_row[k] >= 0) {
            snprintf(err, (size_t)err_len, "%s:%d: config '%s' reported twice (first at line "
                     "%d)", t->path, r + 2, name, done_row[k] + 2);
            return false;
        }
        // What this run would write for config k; the outcome columns are not compared.
        outcome blank = {.verdict = verdict, .expected = "", .observed = "",
                         .prefill_vs_decode = ""};
        const run_config *merged_into = rs[k].merged_into >= 0 ? &configs[rs[k].merged_into]
                                                               : NULL;
        summary_text text;
        const char *fields[SUMMARY_NCOLS];
        summary_fields(c, &configs[k], &rs[k], sel, &blank, merged_into, &text, fields);
        for (size_t i = 0; i < sizeof requested_columns / sizeof requested_columns[0]; i++) {
            int col = requested_columns[i];
            const char *was = csv_at(t, r, col), *now = fields[col] ? fields[col] : "";
            if (strcmp(was, now) != 0) {
                snprintf(err, (size_t)err_len, "%s:%d: config '%s': %s was '%s', would now be "
                         "'%s': the case, the command or the machine changed since the run "
                         "started; start a new run", t->path, r + 2, name, header[col], was, now);
                return false;
            }
        }
        done_row[k] = r;
    }
    return true;
}

const char *const *resume_done_cells(const csv_table *done, const int *done_row, int k) {
    if (!done || done_row[k] < 0) return NULL;
    return (const char *const *)done->cells + (size_t)done_row[k] * (size_t)done->ncols;
}

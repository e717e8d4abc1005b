// reports/row_verdict.c — one reading of summary.csv and kernels.csv rows (reports/row_verdict.h).
#include "row_verdict.h"

#include <stdio.h>      // snprintf
#include <string.h>     // strcmp
#include <strings.h>    // strcasecmp

#include "report_schema.h"  // summary_get, kernels_get, SUMMARY_*, KERNELS_*

const char *row_state_name(row_state s) {
    static const char *const names[] = {"PASS", "FAIL", "SKIP", "ERROR"};
    return names[s];
}

static row_state state_of(const char *verdict) {
    if (strcasecmp(verdict, "PASS") == 0 || strcasecmp(verdict, "ok") == 0) return ROW_PASS;
    if (strcasecmp(verdict, "FAIL") == 0) return ROW_FAIL;
    if (strcasecmp(verdict, "SKIP") == 0) return ROW_SKIP;
    return ROW_ERROR;
}

// ---------------------------------------------------------------------------------------------
// summary.csv
// ---------------------------------------------------------------------------------------------

row_state summary_row_state(const csv_table *t, int row) {
    return state_of(summary_get(t, row, SUMMARY_VERDICT));
}

bool summary_first_divergence(const csv_table *t, int row, char *buf, int len) {
    buf[0] = '\0';
    const char *req = summary_get(t, row, SUMMARY_FIRST_REQUEST);
    const char *step = summary_get(t, row, SUMMARY_FIRST_STEP);
    if (!req[0] && !step[0]) return false;
    const char *batch = summary_get(t, row, SUMMARY_FIRST_BATCH_SIZE);
    const char *field = summary_get(t, row, SUMMARY_FIRST_FIELD);
    const char *bt = summary_get(t, row, SUMMARY_FIRST_BASE_TOKEN);
    const char *ot = summary_get(t, row, SUMMARY_FIRST_BATCH_TOKEN);
    const char *blp = summary_get(t, row, SUMMARY_FIRST_BASE_LOGPROB);
    const char *olp = summary_get(t, row, SUMMARY_FIRST_BATCH_LOGPROB);
    const char *delta = summary_get(t, row, SUMMARY_FIRST_ABS_DELTA);
    const char *ulps = summary_get(t, row, SUMMARY_FIRST_ULPS);
    bool repeat = strcmp(batch, "repeat") == 0;
    int n = snprintf(buf, (size_t)len, "request %s %s%s, step %s", req[0] ? req : "?",
                     repeat ? "in the repeated batch" : "at batch size ", repeat ? "" : batch,
                     step[0] ? step : "?");
    if (field[0] && n < len) n += snprintf(buf + n, (size_t)(len - n), ", %s differs", field);
    if (bt[0] && n < len)
        n += snprintf(buf + n, (size_t)(len - n), ": token %s vs %s", bt, ot);
    if (blp[0] && n < len)
        n += snprintf(buf + n, (size_t)(len - n), ", logprob %s vs %s", blp, olp);
    if (delta[0] && n < len)
        n += snprintf(buf + n, (size_t)(len - n), ", |Δ logprob| = %s", delta);
    if (ulps[0] && n < len)
        n += snprintf(buf + n, (size_t)(len - n), " (%s ulp%s)", ulps, strcmp(ulps, "1") ? "s" : "");
    const char *op = summary_get(t, row, SUMMARY_FIRST_OP);  // "": a report without localization
    if (op[0] && n < len) snprintf(buf + n, (size_t)(len - n), "; first differing op: %s", op);
    return true;
}

void summary_reason(const csv_table *t, int row, char *buf, int len) {
    const char *expected = summary_get(t, row, SUMMARY_EXPECTED);
    const char *observed = summary_get(t, row, SUMMARY_OBSERVED);
    const char *note = summary_get(t, row, SUMMARY_NOTE);
    int n = 0;
    buf[0] = '\0';
    if (expected[0] || observed[0])
        n = snprintf(buf, (size_t)len, "expected %s, observed %s", expected[0] ? expected : "-",
                     observed[0] ? observed : "-");
    if (note[0] && n < len) n += snprintf(buf + n, (size_t)(len - n), "%s%s", n ? ": " : "", note);
    // Without a first divergence (prefill vs decode), the first differing op goes here.
    const char *op = summary_get(t, row, SUMMARY_FIRST_OP);
    if (op[0] && !summary_get(t, row, SUMMARY_FIRST_REQUEST)[0] && n < len)
        snprintf(buf + n, (size_t)(len - n), "; first differing op: %s", op);
}

// ---------------------------------------------------------------------------------------------
// kernels.csv
// ---------------------------------------------------------------------------------------------

void kernel_row_name(const csv_table *t, int row, char *buf, int len) {
    snprintf(buf, (size_t)len, "%s/%s/%s/%s", kernels_get(t, row, KERNELS_SET),
             kernels_get(t, row, KERNELS_DEVICE),
             kernels_get(t, row, KERNELS_OP), kernels_get(t, row, KERNELS_SHAPE));
}

static bool row_varied(const csv_table *t, int row) {
    return strcasecmp(kernels_get(t, row, KERNELS_INVARIANT), "no") == 0 ||
           strcasecmp(kernels_get(t, row, KERNELS_STATUS), "VARIES") == 0;
}

row_state kernel_row_state(const csv_table *t, int row, char *why, int len) {
    why[0] = '\0';
    const char *status = kernels_get(t, row, KERNELS_STATUS);
    const char *err = kernels_get(t, row, KERNELS_REL_L2_ERR);
    const char *tol = kernels_get(t, row, KERNELS_TOL);
    const char *written = kernels_get(t, row, KERNELS_WRITTEN);
    bool varied = row_varied(t, row);
    char vary[160] = "";
    if (varied)
        snprintf(vary, sizeof vary, "varied at M=%s (row %s, compared with %s)",
                 kernels_get(t, row, KERNELS_FIRST_VARY_M),
                 kernels_get(t, row, KERNELS_FIRST_VARY_ROW),
                 strcmp(kernels_get(t, row, KERNELS_FIRST_VARY_VS_M), "1") == 0
                     ? "the row alone"
                     : kernels_get(t, row, KERNELS_FIRST_VARY_VS_M));
    if (state_of(status) == ROW_SKIP) {
        snprintf(why, (size_t)len, "skipped");
        return ROW_SKIP;
    }
    // The kernel crashed or raised: nothing was judged at this shape.
    if (strcasecmp(status, "CRASH") == 0 || strcasecmp(status, "ERROR") == 0) {
        snprintf(why, (size_t)len, "%s: %s", status, kernels_get(t, row, KERNELS_NOTE));
        return ROW_ERROR;
    }
    if (strcasecmp(status, "FAIL") == 0) {
        if (strcasecmp(written, "no") == 0)
            snprintf(why, (size_t)len, "an output element was not written (or one outside the "
                     "outputs was); rel-L2 error %s (tol %s)", err, tol);
        else
            snprintf(why, (size_t)len, "inaccurate: rel-L2 error %s > tol %s", err, tol);
        return ROW_FAIL;
    }
    if (varied && strcasecmp(kernels_get(t, row, KERNELS_EXPECT), "stable") == 0) {
        snprintf(why, (size_t)len, "must be batch-invariant but %s", vary);
        return ROW_FAIL;
    }
    return ROW_PASS;
}

static bool same_cell(const csv_table *t, int a, int b, kernels_column c) {
    return strcmp(kernels_get(t, a, c), kernels_get(t, b, c)) == 0;
}

int kernel_controls(const csv_table *t, kernel_control *out, int max) {
    int n = 0;
    for (int r = 0; t && r < t->nrows; r++) {
        if (strcasecmp(kernels_get(t, r, KERNELS_EXPECT), "must vary") != 0) continue;
        int g = 0;
        for (; g < n; g++) {
            int f = out[g].first_row;
            if (same_cell(t, f, r, KERNELS_SET) && same_cell(t, f, r, KERNELS_DEVICE) &&
                same_cell(t, f, r, KERNELS_OP))
                break;
        }
        if (g == n) {
            if (n == max) continue;
            out[n++] = (kernel_control){.first_row = r};
        }
        out[g].shapes++;
        out[g].varied |= row_varied(t, r);
    }
    return n;
}

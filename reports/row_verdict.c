// reports/row_verdict.c — one reading of summary.csv and kernels.csv rows (reports/row_verdict.h).
#include "row_verdict.h"

#include <stdio.h>      // snprintf
#include <string.h>     // strcmp
#include <strings.h>    // strcasecmp

const char *row_state_name(row_state s) {
    static const char *const names[] = {"PASS", "FAIL", "SKIP", "ERROR"};
    return names[s];
}

static row_state state_of(const char *verdict) {
    if (strcasecmp(verdict, "PASS") == 0 || strcasecmp(verdict, "ok") == 0 ||
        strcasecmp(verdict, "yes") == 0)
        return ROW_PASS;
    if (strcasecmp(verdict, "FAIL") == 0 || strcasecmp(verdict, "no") == 0) return ROW_FAIL;
    if (strcasecmp(verdict, "SKIP") == 0 || strcasecmp(verdict, "skipped") == 0)
        return ROW_SKIP;
    return ROW_ERROR;
}

// ---------------------------------------------------------------------------------------------
// summary.csv
// ---------------------------------------------------------------------------------------------

row_state summary_row_state(const csv_table *t, int row) {
    return state_of(csv_get(t, row, "verdict"));
}

bool summary_first_divergence(const csv_table *t, int row, char *buf, int len) {
    buf[0] = '\0';
    const char *req = csv_get(t, row, "first_request");
    const char *step = csv_get(t, row, "first_step");
    if (!req[0] && !step[0]) return false;
    const char *batch = csv_get(t, row, "first_batch_size");
    const char *field = csv_get(t, row, "first_field");
    const char *bt = csv_get(t, row, "first_base_token");
    const char *ot = csv_get(t, row, "first_batch_token");
    const char *blp = csv_get(t, row, "first_base_logprob");
    const char *olp = csv_get(t, row, "first_batch_logprob");
    const char *delta = csv_get(t, row, "first_abs_delta");
    const char *ulps = csv_get(t, row, "first_ulps");
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
        snprintf(buf + n, (size_t)(len - n), " (%s ulp%s)", ulps, strcmp(ulps, "1") ? "s" : "");
    return true;
}

void summary_reason(const csv_table *t, int row, char *buf, int len) {
    const char *expected = csv_get(t, row, "expected");
    const char *observed = csv_get(t, row, "observed");
    const char *note = csv_get(t, row, "note");
    int n = 0;
    buf[0] = '\0';
    if (expected[0] || observed[0])
        n = snprintf(buf, (size_t)len, "expected %s, observed %s", expected[0] ? expected : "-",
                     observed[0] ? observed : "-");
    if (note[0] && n < len) snprintf(buf + n, (size_t)(len - n), "%s%s", n ? ": " : "", note);
}

// ---------------------------------------------------------------------------------------------
// kernels.csv
// ---------------------------------------------------------------------------------------------

void kernel_row_name(const csv_table *t, int row, char *buf, int len) {
    snprintf(buf, (size_t)len, "%s/%s/%s/%s", csv_get(t, row, "set"), csv_get(t, row, "device"),
             csv_get(t, row, "op"), csv_get(t, row, "shape"));
}

static bool row_varied(const csv_table *t, int row) {
    return strcasecmp(csv_get(t, row, "invariant"), "no") == 0 ||
           strcasecmp(csv_get(t, row, "status"), "VARIES") == 0;
}

row_state kernel_row_state(const csv_table *t, int row, char *why, int len) {
    why[0] = '\0';
    static const char *const verdict_cols[] = {"verdict", "pass", NULL};
    int vc = csv_col_any(t, verdict_cols);
    const char *status = csv_get(t, row, "status");
    const char *err = csv_get(t, row, "rel_l2_err"), *tol = csv_get(t, row, "tol");
    const char *written = csv_get(t, row, "written");
    bool varied = row_varied(t, row);
    char vary[160] = "";
    if (varied)
        snprintf(vary, sizeof vary, "varied at M=%s (row %s, compared with %s)",
                 csv_get(t, row, "first_vary_M"), csv_get(t, row, "first_vary_row"),
                 strcmp(csv_get(t, row, "first_vary_vs_M"), "1") == 0
                     ? "the row alone"
                     : csv_get(t, row, "first_vary_vs_M"));
    if (vc >= 0 && csv_at(t, row, vc)[0]) {
        row_state s = state_of(csv_at(t, row, vc));
        if (s != ROW_PASS)
            snprintf(why, (size_t)len, "status %s; %s; rel-L2 error %s (tol %s); written %s",
                     status, varied ? vary : "invariant", err, tol, written);
        return s;
    }
    if (state_of(status) == ROW_SKIP) {
        snprintf(why, (size_t)len, "%s", csv_get(t, row, "note")[0] ? csv_get(t, row, "note")
                                                                     : "skipped");
        return ROW_SKIP;
    }
    if (strcasecmp(status, "FAIL") == 0) {
        if (strcasecmp(written, "no") == 0)
            snprintf(why, (size_t)len, "an output element was not written (or one outside the "
                     "outputs was); rel-L2 error %s (tol %s)", err, tol);
        else
            snprintf(why, (size_t)len, "inaccurate: rel-L2 error %s > tol %s", err, tol);
        return ROW_FAIL;
    }
    if (varied && strcasecmp(csv_get(t, row, "expect"), "stable") == 0) {
        snprintf(why, (size_t)len, "must be batch-invariant but %s", vary);
        return ROW_FAIL;
    }
    return ROW_PASS;
}

int kernel_controls(const csv_table *t, kernel_control *out, int max) {
    int n = 0;
    for (int r = 0; t && r < t->nrows; r++) {
        if (strcasecmp(csv_get(t, r, "expect"), "must vary") != 0) continue;
        int g = 0;
        for (; g < n; g++) {
            int f = out[g].first_row;
            if (strcmp(csv_get(t, f, "set"), csv_get(t, r, "set")) == 0 &&
                strcmp(csv_get(t, f, "device"), csv_get(t, r, "device")) == 0 &&
                strcmp(csv_get(t, f, "op"), csv_get(t, r, "op")) == 0)
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

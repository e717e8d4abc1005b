// harness/run/progress.c — the live progress line (harness/run/progress.h).
#include "progress.h"

#include <stdarg.h>     // va_list, va_start, va_end
#include <stdio.h>      // fprintf, fputs, fflush, snprintf, vsnprintf, fileno
#include <sys/ioctl.h>  // ioctl, TIOCGWINSZ, struct winsize

#include "../host.h"    // host_seconds

static void format_duration(double seconds, char *buf, size_t len) {
    long t = (long)(seconds + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

// A line longer than the terminal wraps, and \r then redraws only its last part.
static int terminal_columns(FILE *f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

void progress_phase(progress *p, const char *fmt, ...) {
    if (!p || !p->on) return;
    char phase[96], elapsed[32], eta[32] = "-", line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(phase, sizeof phase, fmt, ap);
    va_end(ap);
    double now = host_seconds();
    format_duration(now - p->t0, elapsed, sizeof elapsed);
    if (p->ran > 0) {
        double left = p->ran_seconds / p->ran * p->to_run - (now - p->config_t0);
        format_duration(left > 0.0 ? left : 0.0, eta, sizeof eta);
    }
    int n = snprintf(line, sizeof line, "[%d/%d] %s elapsed, ETA %s  %-17s %s", p->index + 1,
                     p->total, elapsed, eta, phase, p->name);
    int width = terminal_columns(p->f) - 1;
    fprintf(p->f, "\r\033[K%.*s", n < width ? n : width, line);
    fflush(p->f);
}

void progress_clear(const progress *p) {
    if (!p->on) return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
}

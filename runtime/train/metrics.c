/* metrics.c — per-step metrics: JSONL lines beside the checkpoints and the human log line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/util.h"
#include "runtime/train/metrics.h"

#include "engine/engine.h"

int metrics_open(Metrics* m, const char* path, int64_t resume_step, char* err, size_t err_len) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", path);
    if (resume_step > 0) {
        /* Rows past the checkpoint (an attempt that went on after it and was lost) stay: the file is only
         * ever appended to. The rows this run writes for those steps follow them; readers take the last
         * row of each step (rrfp-mm report does). */
        size_t n = 0;
        char* old = rr_read_file(path, &n, RR_MAX_JSONL);
        if (!old && errno != ENOENT) {
            char why[160];
            snprintf(err, err_len, "cannot read metrics file '%s' to resume it: %s", path,
                     rr_read_file_why(errno, "a metrics.jsonl file", why, sizeof why));
            return -1;
        }
        int64_t past = 0;
        int lineno = 0;
        size_t whole = n; /* bytes up to the end of the last whole line */
        for (char* line = old; old && line < old + n;) {
            char* nl = memchr(line, '\n', (size_t)(old + n - line));
            size_t len = nl ? (size_t)(nl - line) + 1 : (size_t)(old + n - line);
            long long st = -1;
            lineno++;
            if (!nl) {
                /* what a killed run (or a full disk) leaves: cut off the file (it would run into the first
                 * new row), and said, never dropped without a word */
                whole = (size_t)(line - old);
                snprintf(m->dropped, sizeof m->dropped, "%s:%d: dropped a torn last row without its newline (%zu bytes: "
                         "'%.40s%s')", path, lineno, len, line, len > 40 ? "..." : "");
                for (char* c = m->dropped; *c; c++)
                    if (*c == '\n' || (unsigned char)*c < 32) *c = ' ';
            } else if (sscanf(line, "{\"step\":%lld", &st) == 1 && st > resume_step) {
                past++;
            }
            line += len;
        }
        free(old);
        if (whole < n && truncate(path, (off_t)whole) != 0) {
            snprintf(err, err_len, "cannot cut the torn last row off metrics file '%s': %s", path, strerror(errno));
            return -1;
        }
        if (past)
            fprintf(stderr, "rrfp-mm: %s keeps its %lld row%s past step %lld (written after that checkpoint by an "
                    "attempt that did not finish); this run appends its own rows for those steps after them, and "
                    "readers take the last row of each step\n", path, (long long)past, past == 1 ? "" : "s",
                    (long long)resume_step);
    }
    /* appended to, never truncated (a fresh run's folder holds no metrics: runtime/train/rundir.h) */
    m->f = fopen(path, "a");
    if (!m->f) {
        snprintf(err, err_len, "cannot open metrics file '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int metrics_write(Metrics* m, const StepStats* s, char* err, size_t err_len) {
    if (!m->f) return 0;
    errno = 0;
    int bad = fprintf(m->f,
            "{\"step\":%lld,\"loss\":%.9g,\"loss_hex\":\"%a\",\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
            "\"supervised\":%lld,\"patches\":%lld,\"step_time_s\":%.6f,\"tokens_per_s\":%.2f,\"data_wait_s\":%.6f,"
            "\"peak_mem_mb\":%.1f,\"eta_s\":%.1f",
            (long long)s->step, (double)s->loss, (double)s->loss, s->lr, s->grad_norm, (long long)s->tokens,
            (long long)s->supervised, (long long)s->patches, s->step_time_s, s->tokens_per_s, s->data_wait_s,
            s->peak_mem_mb, s->eta_s) < 0;
    bad |= fprintf(m->f, ",\"samples\":%lld,\"images\":%lld,\"attn_pairs\":%lld,\"vit_attn_pairs\":%lld",
                   (long long)s->samples, (long long)s->images, (long long)s->attn_pairs, (long long)s->vit_attn_pairs) < 0;
    if (s->bubble >= 0) bad |= fprintf(m->f, ",\"bubble\":%.4f", s->bubble) < 0;
    if (s->epoch >= 0) bad |= fprintf(m->f, ",\"epoch\":%.4f", s->epoch) < 0;
    if (s->eval_loss >= 0) bad |= fprintf(m->f, ",\"eval_loss\":%.9g", s->eval_loss) < 0;
    if (s->recomputed_blocks > 0) bad |= fprintf(m->f, ",\"recomputed_blocks\":%lld", (long long)s->recomputed_blocks) < 0;
    if (s->has_device)
    {
        bad |= fprintf(m->f, ",\"device_peak_mb\":%.1f,\"device_used_mb\":%.1f", s->device_peak_mb, s->device_used_mb) < 0;
        bad |= fprintf(m->f, ",\"device_peak_split_mb\":{") < 0; /* what the peak held, by kind (MiB, 3 decimals) */
        for (int k = 0; k < MEM_TAGS; k++)
            bad |= fprintf(m->f, "%s\"%s\":%.3f", k ? "," : "", mem_tag_name(k), s->device_peak_by_mb[k]) < 0;
        bad |= fprintf(m->f, "}") < 0;
    }
    if (s->has_profile) {
        bad |= fprintf(m->f, ",\"profile\":{") < 0;
        for (int k = 0; k < PROF_KINDS; k++)
            bad |= fprintf(m->f, "%s\"%s\":{\"ms\":%.4f,\"launches\":%ld}", k ? "," : "", prof_kind_name(k), s->prof_ms[k],
                           s->prof_launches[k]) < 0;
        bad |= fprintf(m->f, "}") < 0;
    }
    bad |= fprintf(m->f, ",\"skipped\":%lld}\n", (long long)s->skipped) < 0;
    /* every row reaches the file at its step: a full disk is an error now, not a file that silently
     * stops at the stdio buffer's size */
    bad |= fflush(m->f) != 0;
    if (bad || ferror(m->f)) {
        snprintf(err, err_len, "cannot write metrics file '%s' (row of step %lld): %s", m->path, (long long)s->step,
                 strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

/* the rows written so far on the disk: flushed, then fsync'd (a file system without fsync, EINVAL, counts as done) */
static int metrics_fsync(Metrics* m) {
    errno = 0;
    if (fflush(m->f) != 0 || ferror(m->f)) return -1;
    return fsync(fileno(m->f)) != 0 && errno != EINVAL ? -1 : 0;
}

int metrics_sync(Metrics* m, int64_t step, char* err, size_t err_len) {
    if (!m->f || metrics_fsync(m) == 0) return 0;
    snprintf(err, err_len, "cannot fsync metrics file '%s' before the checkpoint of step %lld: %s", m->path,
             (long long)step, strerror(errno ? errno : EIO));
    return -1;
}

int metrics_close(Metrics* m, char* err, size_t err_len) {
    int rc = 0;
    if (m->f) {
        int bad = metrics_fsync(m) != 0;
        int e = errno;
        if (fclose(m->f) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        if (bad) {
            snprintf(err, err_len, "cannot write metrics file '%s': %s", m->path, strerror(e ? e : EIO));
            rc = -1;
        }
    }
    m->f = NULL;
    return rc;
}

static void fmt_eta(char* s, size_t n, double sec) {
    if (sec < 0) sec = 0;
    long t = (long)(sec + 0.5);
    if (t >= 3600) snprintf(s, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(s, n, "%ldm%02lds", t / 60, t % 60);
}

void metrics_log_line(char* out, size_t n, const StepStats* s, int64_t total_steps) {
    char eta[32], bub[32] = "";
    fmt_eta(eta, sizeof eta, s->eta_s);
    if (s->bubble >= 0) snprintf(bub, sizeof bub, " | bubble %4.1f%%", 100 * s->bubble);
    snprintf(out, n,
             "step %5lld/%-5lld | loss %.4f | lr %.3e | grad norm %7.4f | %8.0f tok/s | %7.1f ms%s | peak %6.1f MiB | "
             "ETA %s",
             (long long)s->step, (long long)total_steps, (double)s->loss, s->lr, s->grad_norm, s->tokens_per_s,
             1e3 * s->step_time_s, bub, s->peak_mem_mb, eta);
    if (s->epoch >= 0) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, " | epoch %.2f", s->epoch);
    }
    if (s->eval_loss >= 0) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, " | eval loss %.4f", s->eval_loss);
    }
    if (s->has_device) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, " | device peak %.1f MiB", s->device_peak_mb);
    }
    if (s->skipped) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, " | skipped %lld", (long long)s->skipped);
    }
    if (metrics_data_bound(s)) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, " | data wait %.0f%%", 100 * s->data_wait_s / s->step_time_s);
    }
}

int metrics_data_bound(const StepStats* s) {
    /* the first step warms the loader's window (and every cache): not a verdict on the loader */
    return s->step > 1 && s->step_time_s > 0 && s->data_wait_s > METRICS_DATA_WAIT_SHARE * s->step_time_s;
}

double metrics_peak_rss_mb(void) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kb = atof(line + 6);
            break;
        }
    fclose(f);
    return kb / 1024.0;
}

/* report.h — `rrfp-mm report RUN_DIR`: one self-contained HTML page of a run (docs/training.md "The report").
 *
 * Inline SVG and CSS only (no network, no JavaScript): the loss, learning-rate, grad-norm and tokens/s
 * curves from RUN_DIR/metrics.jsonl; the recipe as trained (RUN_DIR/recipe.ini, written by the
 * trainer at start); for pipelined runs with runtime.trace, the timeline of the last traced step and
 * its bubble (RUN_DIR/trace-rank*.json); for an evaluated run (RUN_DIR/predictions.jsonl from
 * `rrfp-mm eval --predictions`), held-out questions with their image (re-encoded small, as a base64
 * JPEG data URI), the reference answer and the model's greedy answer, right and wrong ones. The
 * questions, references and images come from the held-out shards named by the recipe
 * (data.eval_shards, by each prediction's sample_index) and the token ids are decoded with
 * data.tokenizer, each answer up to the shards' chat template's end of answer. With a zero-shot eval
 * beside it (RUN_DIR/zero-shot.jsonl: `rrfp-mm eval --checkpoint IMPORT --predictions`, the published
 * model before fine-tuning), both accuracies, how many questions each got right that the other did not,
 * and each card's zero-shot answer. The summary names what shaped the training data (the newest
 * checkpoint's record, runtime/train/trained.h: template, image preprocessing, tokenizer and its hash).
 *
 * metrics.jsonl is required. The other parts are optional: a part whose files are absent is left out
 * with a line saying why; a part whose files are damaged is left out too, with a warning naming the
 * file and what is wrong (one damaged file costs only its own part). */
#ifndef RRFP_TRAIN_REPORT_H
#define RRFP_TRAIN_REPORT_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char* run_dir;
    const char* out;         /* NULL: RUN_DIR/report.html */
    const char* predictions; /* NULL: RUN_DIR/predictions.jsonl when present */
    int questions;           /* held-out question cards at most (half right, half wrong when both exist) */
    FILE* warn;              /* warnings (may be NULL) */
} ReportConfig;

/* Write the page atomically (a temporary name, then rename: a reader never sees half a page) to
 * c->out or RUN_DIR/report.html; the path written goes to out_path. Returns 0, or -1 with a message
 * naming the file in err (nothing is written then). */
int report_write(const ReportConfig* c, char* out_path, size_t out_len, char* err, size_t err_len);

/* `s` with & < > " ' replaced by character references (malloc'd). This function can't fail. */
char* report_html_escape(const char* s);

/* Standard base64 (RFC 4648, with padding) of n bytes (malloc'd, NUL-terminated). This function can't fail. */
char* report_base64(const unsigned char* data, size_t n);

#endif

/* manifest.h — LLaVA manifests (docs/data.md "Pack") and the prompt template.
 *
 * A manifest is a JSON array of records or JSONL (one record per line); the first non-blank byte
 * decides ('[' = array); a leading UTF-8 byte-order mark is skipped. Each record: {"id": ..., "image": "a.jpg" | ["a.jpg", ...] (optional),
 * "conversations": [{"from": "human", "value": "<image>\nWhat is shown?"}, {"from": "gpt", ...}]}.
 * "from" is "human" (or "user") for prompt turns and "gpt" (or "assistant") for answers.
 *
 * Prompt template. A sample's text is the concatenation of one segment per turn:
 *     human turn:  "USER: " + value + " ASSISTANT:"        (preceded by "\n" unless it is the first turn)
 *     gpt turn:    " " + value + "<|endoftext|>"
 * e.g.  "USER: <image>\nWhat colour is the square? ASSISTANT: red<|endoftext|>\nUSER: How many
 *        circles are there? ASSISTANT: two<|endoftext|>".
 * Each segment is tokenized on its own (so turn boundaries are token boundaries) and the ids are
 * concatenated; the label mask is 1 on every token of a gpt segment (answer and <|endoftext|>), 0
 * elsewhere. The loader's target of position t is token t+1 when its mask is 1 (docs/model.md "Sequence assembly and the loss"),
 * so the loss is taken on gpt turns only. Every "<image>" in a human turn is the tokenizer's
 * <image> token, one per image of the record, in the order of the "image" list. */
#ifndef RRFP_DATA_MANIFEST_H
#define RRFP_DATA_MANIFEST_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* Why a record is rejected (pack's closing summary counts each). */
typedef enum {
    REJECT_NONE = 0,
    REJECT_BAD_JSON,           /* JSONL line that is not valid JSON */
    REJECT_NOT_OBJECT,         /* record is not a JSON object */
    REJECT_NO_CONVERSATIONS,   /* "conversations" missing or not an array */
    REJECT_EMPTY_CONVERSATION, /* "conversations" is [] */
    REJECT_BAD_TURN,           /* a turn without a known "from" or a string "value" */
    REJECT_NO_ANSWER,          /* no gpt turn: nothing to learn */
    REJECT_BAD_IMAGE_FIELD,    /* "image" neither a string nor an array of strings, or too many */
    REJECT_IMAGE_TOKENS,       /* <image> tokens in the text != images in the record (or in a gpt turn) */
    REJECT_MISSING_IMAGE,      /* image file cannot be read */
    REJECT_BAD_IMAGE,          /* not a JPEG, PNG or GIF, corrupt, truncated, extreme aspect ratio */
    REJECT_TOO_LONG,           /* more tokens than a shard entry holds */
    REJECT_OUTSIDE_IMAGES,     /* image path absolute or leading outside the images folder (pack) */
    REJECT_N
} RejectReason;

const char* reject_reason_name(RejectReason r); /* short name for summaries: "bad_json", ... */

#define MANIFEST_MAX_IMAGES 16

typedef struct {
    int line;        /* 1-based line of the record's first byte in the manifest */
    cJSON* rec;      /* NULL when the line was not valid JSON */
    char* json_err;  /* JSONL: why the line did not parse (malloc'd) */
} ManifestRecord;

typedef struct {
    char path[1024];
    int n;
    ManifestRecord* recs;
    cJSON* root; /* JSON array form: the parsed array (records point into it) */
} Manifest;

/* Parse a manifest held in memory (`name` is used in messages). A JSON array that does not parse is
 * an error ("NAME:LINE:COL: invalid JSON ..."); a JSONL line that does not parse becomes a record
 * with rec == NULL and json_err set, so the caller can reject it and go on. Returns 0, or -1 with
 * the message in err (nothing to free then). */
int manifest_parse(const char* text, size_t len, const char* name, Manifest* m, char* err, size_t err_len);
/* The most lines a manifest may hold (an editor's count: the last line need not end in a newline). Line numbers and
 * record counts are ints; a larger file is refused before it is parsed ("NAME: more than N lines ..."). */
#define MANIFEST_MAX_LINES ((int64_t)INT_MAX - 1)
/* manifest_parse under another line cap (max_lines <= MANIFEST_MAX_LINES; the tests' small ones). */
int manifest_parse_capped(const char* text, size_t len, const char* name, int64_t max_lines, Manifest* m, char* err,
                          size_t err_len);
int manifest_load(const char* path, Manifest* m, char* err, size_t err_len);
void manifest_free(Manifest* m);

/* One record, checked and tokenized with the prompt template. */
typedef struct {
    char id[128];
    int n_images;
    const char* images[MANIFEST_MAX_IMAGES]; /* point into the cJSON record */
    int n_tokens;
    int32_t* ids;  /* (n_tokens) malloc'd */
    uint8_t* mask; /* (n_tokens) 1 = belongs to a gpt turn */
    int n_supervised; /* positions t with mask[t+1] = 1: the targets this sample contributes */
} ManifestSample;

/* Check the record's fields and tokenize it. Returns REJECT_NONE, or a reason with a sentence in why
 * ("turn 2: \"from\" is \"system\", expected \"human\" or \"gpt\""). image_id / eot_id: the
 * tokenizer's <image> and <|endoftext|> ids. On rejection nothing is left allocated. */
RejectReason manifest_sample_build(const cJSON* rec, int line, const Tokenizer* tok, int image_id, int eot_id,
                                   ManifestSample* s, char* why, size_t why_len);
/* The same under chat template `tmpl` (data/template.h; TEMPLATE_RRFP: manifest_sample_build). The label
 * mask is 1 on the template's supervised text (the answers and their end token). eot_id is used by
 * TEMPLATE_RRFP only. */
RejectReason manifest_sample_build_template(const cJSON* rec, int line, const Tokenizer* tok, int tmpl, int image_id,
                                            int eot_id, ManifestSample* s, char* why, size_t why_len);
void manifest_sample_free(ManifestSample* s);

#endif

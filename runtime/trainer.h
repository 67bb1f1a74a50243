/* trainer.h — single-process training: the step (plan from the loader, forward + backward of every
 * microbatch through the Stage API, global grad norm, clipping, AdamW, LR schedule), checkpoints,
 * dumps and metrics. The CLI (cmd_train.c) only parses arguments and calls these; the pipeline
 * runtime reuses the step pieces. */
#ifndef RRFP_TRAINER_H
#define RRFP_TRAINER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/recipe.h"

/* Parameter counts of a recipe's model by component (doubles: a 7B count overflows nothing). */
typedef struct {
    double vision_embed, vision_block, vision_final, vision;
    double projector;
    double text_embed, text_block, text_final, head, text;
    double total;
} RecipeParamCounts;
void recipe_param_counts(const Recipe* r, int vocab, RecipeParamCounts* c);
/* Print parameters per component and memory per pipeline rank for the recipe's layout, without
 * allocating anything. Returns 0, or -1 (message on stderr) when the layout is invalid. */
int recipe_dry_run(const Recipe* r, int vocab, FILE* out);

#endif

/* Vocabulary size of data.tokenizer (largest id + 1 over the model vocabulary and the added
 * tokens of the tokenizer.json), without building the tokenizer. Returns it, or -1 with a message. */
int trainer_tokenizer_vocab(const Recipe* r, char* err, size_t err_len);

/* Train the recipe in this process. Returns the exit status (0 ok, 1 runtime error). */
int trainer_run(const Recipe* r, FILE* log);

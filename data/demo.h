/* demo.h — the demo data set: a small visual world that a tiny LLaVA can learn on a CPU.
 *
 * Each image shows 1-4 coloured shapes (circle, square, triangle in six colours, small or large) in
 * distinct cells of a 3x3 layout, on a noisy grey background, drawn by a small rasteriser and
 * encoded with TurboJPEG (some progressive, quality 75-95). Image sizes run from 64x48 to 320x240
 * in several aspect ratios, so patch counts vary several-fold. Conversations ask questions whose
 * answers need the image ("What colour is the square?" -> "red", "How many circles are there?" ->
 * "two", "Where is the blue triangle?" -> "top left"), captions describe every shape, some samples
 * have two images ("Which image has more shapes?") and some are text only.
 *
 * Output folder:
 *   train.json     LLaVA manifest (JSON array, one record per line)
 *   heldout.json   held-out split: single image, one question each (JSON array)
 *   eval.jsonl     the held-out records as JSONL, each with "answer", "choices" (every answer
 *                  possible for that kind of question, so chance = 1/len(choices)) and "type"
 *   images/        train_NNNNN.jpg (train_NNNNN_b.jpg for a second image), heldout_NNNNN.jpg
 * Everything is a function of (samples, heldout, seed): the same arguments give the same bytes. */
#ifndef RRFP_DATA_DEMO_H
#define RRFP_DATA_DEMO_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char* out_dir;
    int samples;   /* training records */
    int heldout;   /* held-out records */
    uint64_t seed;
    int square;    /* 1: square scenes of 48..144 px, so every image resizes to the same patch grid (with
                    * patch = side / 3 each layout cell is one patch); 16 in 20 records ask 3-5 questions
                    * about one image (1 in 20 each: caption, caption + questions, two images, text only);
                    * captions name the shapes in reading order. No "where" questions and no places in
                    * captions: the model has no absolute position (2-D RoPE in the ViT and 1-D RoPE in
                    * the LM are relative), so it cannot learn them (README "Demo") */
    unsigned types; /* question types asked, a mask of 1 << type in the order colour, count, position, shape,
                     * count_all, size (demo-data --types); 0 = every type, without position when square */
    int questions;  /* most questions about one image in a training record (demo-data --questions); 0 = no limit */
} DemoConfig;

/* The question type named `name` (its bit in DemoConfig.types), or -1; demo_question_types() lists them. */
int demo_question_type(const char* name);
const char* demo_question_types(void);

/* Write the demo data set. Returns 0, or -1 with a message naming the file in err. */
int demo_data_write(const DemoConfig* cfg, char* err, size_t err_len);

#endif

/* template.h — the chat templates of LLaVA's repositories, as `rrfp-mm pack --template NAME` applies them.
 *
 * A record's turns (human / gpt, alternating; a leading gpt turn is skipped, as LLaVA does) become the
 * text LLaVA's training code builds, cut into segments that are supervised (the assistant's answers and
 * their end marker) or not (everything else):
 *   rrfp       this engine's own: "USER: q ASSISTANT:" / " a<|endoftext|>" per turn (manifest.h)
 *   vicuna_v1  LLaVA-1.5 (llava/conversation.py conv_vicuna_v1, SeparatorStyle.TWO, preprocess_v1):
 *              <s> + SYSTEM + " " + "USER: " q " ASSISTANT:" [" " a "</s>"] ...
 *   llama_3    LLaVA-NeXT's Llama-3 (conv_llava_llama_3 / preprocess_llama3: Llama-3-Instruct's chat
 *              template, contents trimmed): "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
 *              SYSTEM "<|eot_id|>" + "<|start_header_id|>user<|end_header_id|>\n\n" q "<|eot_id|>" +
 *              "<|start_header_id|>assistant<|end_header_id|>\n\n" [a "<|eot_id|>"] ...
 *   chatml     LLaVA-NeXT's Qwen (conv_qwen, SeparatorStyle.CHATML / preprocess_qwen):
 *              "<|im_start|>system\n" SYSTEM "<|im_end|>\n" + "<|im_start|>user\n" q "<|im_end|>\n" +
 *              "<|im_start|>assistant\n" [a "<|im_end|>"] "\n" ...
 *   plain      LLaVA's pretraining (preprocess_plain): <s> + "<image>" [caption "\n"]; one human turn (its
 *              text replaced by the image) and one gpt turn.
 * [...] marks the supervised text. As LLaVA's preprocess_multimodal, a human turn with one <image> has
 * it moved to the front ("<image>\n" + the rest, stripped). LLaVA-NeXT's llama_3 and qwen code also
 * supervises the assistant headers and every header / end token of the user turns; here only the
 * answers and their end token are (the headers are prompt). <s> / <|begin_of_text|> start vicuna_v1 and
 * plain when the tokenizer has one (LLaVA's tokenizer adds it). */
#ifndef RRFP_DATA_TEMPLATE_H
#define RRFP_DATA_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "data/manifest.h"
#include "text/tokenizer.h"

typedef enum { TEMPLATE_RRFP = 0, TEMPLATE_VICUNA_V1, TEMPLATE_LLAMA_3, TEMPLATE_CHATML, TEMPLATE_PLAIN, TEMPLATE_N } TemplateKind;

/* "rrfp" | "vicuna_v1" | "llama_3" | "chatml" | "plain" -> k; 0, or -1 for another name. */
int template_parse(const char* name, TemplateKind* k);
const char* template_name(TemplateKind k);
/* 0 when the tokenizer has the special tokens template k needs, else -1 with a message naming one. */
int template_check_tokenizer(TemplateKind k, const Tokenizer* tok, char* err, size_t err_len);
/* The id that starts a sample under template k (vicuna_v1 and plain: the tokenizer's <s> or
 * <|begin_of_text|>), or -1. */
int template_bos_id(TemplateKind k, const Tokenizer* tok);

/* The token that ends an answer under template k, where generation stops: rrfp <|endoftext|>, vicuna_v1
 * </s>, llama_3 <|eot_id|>, chatml <|im_end|>, plain the newline (when the tokenizer makes "\n" one
 * token); -1 when the tokenizer has none (template_check_tokenizer names what is missing). */
int template_stop_id(TemplateKind k, const Tokenizer* tok);

typedef struct {
    char* text;
    size_t len;
    int supervised;
} TemplateSeg;
typedef struct {
    TemplateSeg* seg;
    int n;
} TemplateSegs;

/* The segments of conversation `conv` (an array of checked {"from", "value"} turns with at least one gpt
 * turn, as manifest_sample_build checks them) under template k (not TEMPLATE_RRFP); adjacent segments
 * differ in supervision. Returns REJECT_NONE, or a reason with a sentence in why (turns that do not
 * alternate; plain: not exactly one human and one gpt turn). */
RejectReason template_render(const cJSON* conv, TemplateKind k, TemplateSegs* segs, char* why, size_t why_len);
void template_segs_free(TemplateSegs* s);

#endif

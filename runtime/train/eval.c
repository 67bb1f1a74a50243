/* eval.c — held-out evaluation of a trainer's current parameters (see trainer.h, trainer_eval). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/util.h"
#include "data/template.h"
#include "runtime/train/generate.h"
#include "runtime/train/trained.h"
#include "runtime/train/trainer.h"
#include "text/tokenizer.h"

/* Token ids as text (shards: the tokenizer's decode, made valid UTF-8), appended to o as `key`. */
static void eval_add_text(cJSON* o, const char* key, const Tokenizer* tok, const int32_t* ids, int n) {
    size_t len = 0;
    char* t = tokenizer_decode(tok, ids, n, &len);
    char* c = generate_utf8_clean(t ? t : "", t ? len : 0);
    cJSON_AddStringToObject(o, key, c);
    free(c);
    free(t);
}

/* An any-resolution sample's images as the forward laid them out (positions [a, b) of the microbatch): its
 * tower images (their LM start in the sample, the stage's host copy), and its positions taking a tower feature
 * or image_newline (the stage's gather indices, stage_anyres_index). Its images: the layout's starts. */
static void eval_count_anyres(const StageActs* acts, const Microbatch* mb, int a, int b, EvalResult* res) {
    for (int i = 0; i < acts->I; i++) res->ar_tower_images += acts->h_img_lm_start[i] >= a && acts->h_img_lm_start[i] < b;
    for (int u = a; u < b; u++) {
        res->ar_features += acts->h_ar_idx[u] >= 0;
        res->ar_newlines += acts->h_ar_nl[u] >= 0;
    }
    for (int j = 0; j < mb->J; j++) res->ar_images += mb->ar_lm_start[j] >= a && mb->ar_lm_start[j] < b;
}

typedef struct {
    uint64_t question, answer;
} EvalKey;

static int eval_key_cmp(const void* a, const void* b) {
    const EvalKey *x = a, *y = b;
    if (x->question != y->question) return x->question < y->question ? -1 : 1;
    if (x->answer != y->answer) return x->answer < y->answer ? -1 : 1;
    return 0;
}

int trainer_eval(Trainer* t, int64_t max_samples, FILE* predictions, EvalResult* res, char* err, size_t err_len) {
    const Recipe* r = t->r;
    memset(res, 0, sizeof *res);
    BatchSource src;
    int synthetic = !strcmp(r->source, "synthetic");
    if (synthetic) {
        if (trainer_source_synthetic(&src, r, t->mc.V, 1, 0, 1, err, err_len) != 0) return -1;
    } else {
        if (!r->eval_shards[0]) {
            snprintf(err, err_len, "%s: data.eval_shards is not set: no held-out data to evaluate on",
                     recipe_origin(r, "data", "eval_shards"));
            return -1;
        }
        if (trainer_source_shards(&src, r, r->eval_shards, t->tok_hash, 1, 1, 0, 1, err, err_len) != 0) return -1;
        /* each held-out sample once: the stream runs on into the next epoch */
        if (src.dataset_samples < max_samples) max_samples = src.dataset_samples;
    }
    Tokenizer* tok = NULL; /* on shards: the model's record checked; predictions: the answers as text too */
    int eot = -1;          /* the held-out shards' end of answer (their chat template's) */
    TemplateKind tmpl = TEMPLATE_RRFP;
    if (!synthetic) {
        /* the held-out shards as the model's data was made (trained.h): a checkpoint's record names the
         * template, the preprocessing and the tokenizer its training data had */
        TrainedData sd, md;
        trained_data_none(&md);
        int rc = trained_data_of_shards(r->eval_shards, &sd, err, err_len);
        if (rc == 0 && r->resume[0] && strcmp(r->resume, "latest") && strcmp(r->resume, "auto"))
            rc = trained_data_of_checkpoint(r->resume, &md, err, err_len);
        if (rc == 0) rc = trained_check_shards(&md, &sd, "eval_shards", err, err_len);
        if (rc == 0 && !(tok = tokenizer_load(r->tokenizer, err, err_len))) rc = -1;
        if (rc == 0) rc = trained_check_tokenizer(&md, r->tokenizer, tok, err, err_len);
        if (rc != 0) {
            if (tok) tokenizer_free(tok);
            src.free(&src);
            return -1;
        }
        tmpl = (TemplateKind)sd.chat_template;
        eot = template_stop_id(tmpl, tok);
    }
    int32_t *pred_ids = NULL, *ref_ids = NULL;
    Stage* st = t->ex->stages[0];
    StageActs* acts = step_exec_single_acts(t->ex);
    int V = t->mc.V;
    float* hl = NULL;
    size_t hl_n = 0;
    int on_host = st->be->dev->host_addressable;
    EvalKey* keys = NULL;
    int64_t nkeys = 0, capkeys = 0;
    double loss_sum = 0;
    int rc = 0;
    /* shards: each held-out sample counts once. With samples skipped (damaged), one epoch holds fewer
     * than max_samples, and the stream runs on into the next: its first repeat ends the evaluation. */
    int64_t N = synthetic ? 0 : src.dataset_samples, distinct = 0;
    uint8_t* seen = N > 0 ? callocCheck((size_t)N, 1) : NULL;
    int wrapped = 0;
    while (res->samples < max_samples && rc == 0 && !wrapped) {
        StepPlan plan;
        if (src.next(&src, &plan, err, err_len) != 0) {
            rc = -1;
            break;
        }
        if (plan.M == 0) break; /* the held-out shards are exhausted */
        for (int m = 0; m < plan.M && res->samples < max_samples && rc == 0; m++) {
            Microbatch* mb = &plan.mbs[m];
            float ls = 0;
            /* exactly max_samples samples with an answer: those past it (the stream runs on into the next
             * epoch) lose their targets, so the loss is theirs alone, as train.eval_every's is */
            int64_t left = max_samples - res->samples;
            for (int s = 0, counted = 0; s < mb->S; s++) {
                int a = mb->cu_seqlens[s], b = mb->cu_seqlens[s + 1], sup = 0;
                int64_t idx = mb->sample_index[s];
                int repeat = seen && idx >= 0 && idx < N && seen[idx];
                if (seen && idx >= 0 && idx < N && !seen[idx]) seen[idx] = 1, distinct++;
                if (repeat) wrapped = 1; /* the next epoch: a sample seen already */
                for (int u = a; u < b; u++) sup |= mb->targets[u] != -100;
                if (!sup) continue;
                if (!repeat && counted < left) {
                    counted++;
                    continue;
                }
                for (int u = a; u < b; u++)
                    if (mb->targets[u] != -100) mb->targets[u] = -100, mb->n_supervised--;
            }
            if (stage_check_microbatch(st, acts, mb, err, err_len) != 0) {
                rc = -1;
                break;
            }
            stage_forward(st, acts, mb, NULL, NULL, &ls);
            acts->state = ACTS_EMPTY; /* forward only: no backward will consume these activations */
            loss_sum += ls;
            res->supervised += mb->n_supervised;
            const float* logits = on_host ? buf_f32p(acts->logits) : NULL; /* the CPU tables store f32 words */
            if (!on_host) {
                size_t need = (size_t)mb->T * (size_t)V;
                if (need > hl_n) hl = reallocCheck(hl, need * sizeof(float)), hl_n = need;
                stage_logits_d2h(st, acts, hl, need);
                logits = hl;
            }
            for (int s = 0; s < mb->S && res->samples < max_samples; s++) {
                int a = mb->cu_seqlens[s], b = mb->cu_seqlens[s + 1];
                int first_sup = -1, all_ok = 1;
                uint64_t ans = RR_FNV1A64_INIT;
                for (int u = a; u < b; u++) {
                    int tg = mb->targets[u];
                    if (tg == -100) continue;
                    if (first_sup < 0) first_sup = u;
                    const float* row = logits + (size_t)u * V;
                    int best = 0;
                    for (int v = 1; v < V; v++)
                        if (row[v] > row[best]) best = v;
                    if (best != tg) all_ok = 0;
                    ans = rr_fnv1a64_word(ans, (uint64_t)tg);
                }
                if (first_sup < 0) continue; /* nothing to answer */
                res->samples++;
                res->greedy_correct += all_ok;
                if (st->cfg.anyres) eval_count_anyres(acts, mb, a, b, res);
                if (predictions) {
                    /* the predicted answer tokens (argmax at each answer position), and on shards the record
                     * id and both answers as text (the end of turn left out) */
                    pred_ids = reallocCheck(pred_ids, sizeof(int32_t) * (size_t)(b - a));
                    ref_ids = reallocCheck(ref_ids, sizeof(int32_t) * (size_t)(b - a));
                    int np = 0;
                    for (int u = a; u < b; u++) {
                        if (mb->targets[u] == -100) continue;
                        const float* row = logits + (size_t)u * V;
                        int best = 0;
                        for (int v = 1; v < V; v++)
                            if (row[v] > row[best]) best = v;
                        ref_ids[np] = mb->targets[u];
                        pred_ids[np++] = best;
                    }
                    cJSON* o = cJSON_CreateObject();
                    cJSON_AddNumberToObject(o, "sample_index", (double)mb->sample_index[s]);
                    cJSON_AddBoolToObject(o, "correct", all_ok);
                    cJSON* pa = cJSON_AddArrayToObject(o, "predicted");
                    for (int k = 0; k < np; k++) cJSON_AddItemToArray(pa, cJSON_CreateNumber(pred_ids[k]));
                    if (tok) {
                        if (src.sample_id) cJSON_AddStringToObject(o, "id", src.sample_id(&src, mb->sample_index[s]));
                        int npt = np, nrt = np;
                        for (int k = 0; k < np; k++)
                            if (pred_ids[k] == eot) {
                                npt = k;
                                break;
                            }
                        if (nrt > 0 && ref_ids[nrt - 1] == eot) nrt--;
                        /* the rrfp and vicuna_v1 templates' answer segment is " " + answer: the text as written */
                        eval_add_text(o, "predicted_text", tok, pred_ids, npt);
                        eval_add_text(o, "reference_text", tok, ref_ids, nrt);
                        for (const char* key[] = {"predicted_text", "reference_text", NULL}, **k = key; *k; k++) {
                            cJSON* it = cJSON_GetObjectItemCaseSensitive(o, *k);
                            if (it->valuestring[0] == ' ' && (tmpl == TEMPLATE_RRFP || tmpl == TEMPLATE_VICUNA_V1))
                                memmove(it->valuestring, it->valuestring + 1, strlen(it->valuestring));
                        }
                    }
                    char* js = cJSON_PrintUnformatted(o);
                    fprintf(predictions, "%s\n", js);
                    free(js);
                    cJSON_Delete(o);
                }
                if (synthetic) {
                    /* the 8 colour answers as candidates, scored by their logit at the answer position */
                    const float* row = logits + (size_t)first_sup * V;
                    int best = SYNTH_TOK_ANSWER0;
                    for (int k = 1; k < SYNTH_COLOURS; k++)
                        if (row[SYNTH_TOK_ANSWER0 + k] > row[best]) best = SYNTH_TOK_ANSWER0 + k;
                    res->candidate_correct += best == mb->targets[first_sup];
                } else {
                    /* question = the tokens after the sample's last image position up to the answer */
                    int q0 = a;
                    for (int u = a; u < first_sup; u++)
                        if (mb->ids[u] < 0) q0 = u + 1;
                    uint64_t q = RR_FNV1A64_INIT;
                    for (int u = q0; u <= first_sup; u++) q = rr_fnv1a64_word(q, (uint64_t)(uint32_t)mb->ids[u]);
                    if (nkeys == capkeys) {
                        capkeys = capkeys ? 2 * capkeys : 256;
                        keys = reallocCheck(keys, (size_t)capkeys * sizeof(EvalKey));
                    }
                    keys[nkeys].question = q;
                    keys[nkeys].answer = ans;
                    nkeys++;
                }
            }
        }
    }
    /* damaged samples skipped: those of the one epoch read whole, else the loader's count so far */
    res->skipped = wrapped ? N - distinct : src.skipped ? src.skipped(&src) : 0;
    free(seen);
    src.free(&src);
    free(hl);
    free(pred_ids);
    free(ref_ids);
    if (tok) tokenizer_free(tok);
    if (rc != 0) {
        free(keys);
        return -1;
    }
    if (res->samples == 0) {
        free(keys);
        snprintf(err, err_len, "no held-out sample with an answer to evaluate");
        return -1;
    }
    res->loss = res->supervised ? loss_sum / (double)res->supervised : 0;
    if (synthetic) {
        res->candidates = SYNTH_COLOURS;
        res->chance = 1.0 / SYNTH_COLOURS;
    } else {
        /* chance = mean over samples of 1 / (distinct answers to the same question) */
        qsort(keys, (size_t)nkeys, sizeof(EvalKey), eval_key_cmp);
        double ch = 0;
        for (int64_t i = 0; i < nkeys;) {
            int64_t j = i, distinct = 0;
            while (j < nkeys && keys[j].question == keys[i].question) {
                if (j == i || keys[j].answer != keys[j - 1].answer) distinct++;
                j++;
            }
            ch += (double)(j - i) / (double)distinct;
            i = j;
        }
        res->chance = ch / (double)nkeys;
    }
    free(keys);
    return 0;
}

/* DeepSeek-V4's DSpark draft head through the internal API (model.h's
 * model_dspark_*), the operations one block-speculative step runs, each timed
 * alone at a context of P tokens. bench/dspark_bench.py runs this beside
 * llama.cpp's dflash draft on the same GGUF pair and prints the ratios.
 *
 *     dspark_bench MODEL [--dspark DRAFT.gguf] [--threads T (2)] [--prompt P (512)]
 *                  [--reps R (10)] [--seqs N (8)] [--n-batch B (512)] [--ops a,b,...]
 *
 * MODEL is a release folder with the head (mtp.*), or the target GGUF with
 * llama.cpp's DSpark GGUF attached (--dspark: model_attach_dspark). The
 * target prefills P random tokens (one sequence, chunks of n_batch through
 * model_forward_batch), each chunk's features injected into a DSpark sequence
 * as the drafter does (and into N - 1 more sequences, for the batched draft).
 * Then, best of R after one untimed run (each op undone before the next run:
 * model_seq_truncate / model_dspark_seq_truncate back to P):
 *   decode      the target's step of 1 token at position P;
 *   verify      the target's step of 1 + block tokens (the anchor and a block
 *               of drafts, every row's logits: what the engine verifies);
 *   inject      model_dspark_inject of the verify step's 1 + block feature rows;
 *   draft1      model_dspark_draft of one sequence's block (anchor + noise);
 *   draftN      the same for N sequences in one call (reported as draftN).
 * Prints "RESULT <op> <best ms> <median ms>" lines (the runner reads them).
 * --ops: only those (e.g. draft1, under perf record). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "model/model.h"

static unsigned rng = 12345u;
static int32_t rnd_token(int32_t n_vocab)
{
    rng = rng * 1103515245u + 12345u;
    return 2 + (int32_t)((rng >> 8) % (unsigned)(n_vocab - 2));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, di_error *err)
{
    fprintf(stderr, "dspark_bench: %s: %s\n", what, err ? di_error_message(err) : "failed");
    exit(1);
}

typedef struct ctx {
    model *m;
    model_seq *seq; /* the target's sequence, P tokens */
    model_seq **ds; /* DSpark sequences, P tokens each */
    int n_seqs;
    int64_t P;
    int block;
    int32_t *tokens;  /* [1 + block] */
    int32_t *anchors; /* [n_seqs] */
    float *logits;    /* [(1 + block) x n_seqs, n_vocab] at least */
    float *conf;
    int32_t *drafts;
    float *feat; /* [1 + block, width]: the verify step's features */
} ctx;

static void op_decode(ctx *c, int64_t n)
{
    di_error *err = NULL;
    model_batch_item it = {
        .seq = c->seq, .tokens = c->tokens, .n_tokens = n, .want_logits = (int)n};
    if (model_forward_batch(c->m, &it, 1, c->logits, &err) != DI_OK)
        die("model_forward_batch", err);
}

/* back to P tokens, with room for the next step (truncation gives the blocks
 * past P back) */
static void undo_decode(ctx *c)
{
    model_seq_truncate(c->m, c->seq, c->P);
    if (model_seq_reserve(c->m, c->seq, c->P + 1 + c->block) != DI_OK)
        die("model_seq_reserve", NULL);
}

enum { OP_DECODE, OP_VERIFY, OP_INJECT, OP_DRAFT1, OP_DRAFTN, N_OPS };
static const char *op_names[N_OPS] = {"decode", "verify", "inject", "draft1", "draftN"};

static void run_op(ctx *c, int op)
{
    di_error *err = NULL;
    switch (op) {
    case OP_DECODE: op_decode(c, 1); break;
    case OP_VERIFY: op_decode(c, 1 + c->block); break;
    case OP_INJECT:
        if (model_dspark_inject(c->m, c->ds[0], c->feat, 1 + c->block, &err) != DI_OK)
            die("model_dspark_inject", err);
        break;
    case OP_DRAFT1:
    case OP_DRAFTN: {
        const int n = op == OP_DRAFT1 ? 1 : c->n_seqs;
        if (model_dspark_draft(c->m, c->ds, c->anchors, n, c->logits, c->conf, c->drafts, &err) !=
            DI_OK)
            die("model_dspark_draft", err);
        break;
    }
    default: break;
    }
}

static void undo_op(ctx *c, int op)
{
    if (op == OP_DECODE || op == OP_VERIFY) undo_decode(c);
    if (op == OP_INJECT) {
        di_error *err = NULL;
        model_dspark_seq_truncate(c->m, c->ds[0], c->P);
        if (model_dspark_reserve(c->m, c->ds[0], &err) != DI_OK) die("model_dspark_reserve", err);
    }
}

int main(int argc, char **argv)
{
    const char *path = NULL, *dspark = NULL, *ops = NULL;
    int threads = 2, reps = 10, n_seqs = 8;
    int64_t P = 512, n_batch = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dspark") && v)
            dspark = argv[++i];
        else if (!strcmp(a, "--threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--prompt") && v)
            P = atoll(argv[++i]);
        else if (!strcmp(a, "--reps") && v)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--seqs") && v)
            n_seqs = atoi(argv[++i]);
        else if (!strcmp(a, "--n-batch") && v)
            n_batch = atoll(argv[++i]);
        else if (!strcmp(a, "--ops") && v)
            ops = argv[++i];
        else if (a[0] != '-' && !path)
            path = a;
        else {
            path = NULL;
            break;
        }
    }
    if (!path || threads < 1 || reps < 1 || n_seqs < 1 || P < 1 || n_batch < 32) {
        fprintf(stderr, "usage: dspark_bench MODEL [--dspark DRAFT.gguf] [--threads T] "
                        "[--prompt P] [--reps R] [--seqs N] [--n-batch B] [--ops a,b]\n");
        return 2;
    }
    model_options opt = {.n_threads = threads,
                         .n_ctx = P + 256,
                         .n_batch = n_batch,
                         .kv_dtype = MODEL_DTYPE_F16,
                         .kv_n_ctx_multiple = n_seqs + 2};
    ctx c = {.P = P, .n_seqs = n_seqs};
    di_error *err = NULL;
    double t0 = now();
    if (model_load(path, &opt, &c.m, &err) != DI_OK) die(path, err);
    if (dspark && model_attach_dspark(c.m, dspark, &err) != DI_OK) die(dspark, err);
    c.block = model_dspark_block(c.m);
    if (c.block < 1) die("the model has no DSpark head", NULL);
    const model_config *cfg = model_get_config(c.m);
    const int32_t V = (int32_t)cfg->n_vocab;
    const int64_t W = model_dspark_feature_width(c.m);
    const int64_t rows = (int64_t)(1 + c.block) * (n_seqs > 1 ? n_seqs : 1);
    c.tokens = malloc((size_t)(1 + c.block) * sizeof *c.tokens);
    c.anchors = malloc((size_t)n_seqs * sizeof *c.anchors);
    c.logits = malloc((size_t)(rows > n_batch ? rows : n_batch) * (size_t)V * sizeof *c.logits);
    c.conf = malloc((size_t)rows * sizeof *c.conf);
    c.drafts = malloc((size_t)rows * sizeof *c.drafts);
    c.feat = malloc((size_t)(1 + c.block) * (size_t)W * sizeof *c.feat);
    c.ds = calloc((size_t)n_seqs, sizeof *c.ds);
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    if (!c.tokens || !c.anchors || !c.logits || !c.conf || !c.drafts || !c.feat || !c.ds || !prompt)
        die("out of memory", NULL);
    for (int64_t i = 0; i < P; i++) prompt[i] = rnd_token(V);
    for (int i = 0; i <= c.block; i++) c.tokens[i] = rnd_token(V);
    for (int k = 0; k < n_seqs; k++) c.anchors[k] = rnd_token(V);

    if (model_seq_create(c.m, &c.seq) != DI_OK) die("model_seq_create", NULL);
    for (int k = 0; k < n_seqs; k++)
        if (model_dspark_seq_create(c.m, &c.ds[k]) != DI_OK) die("model_dspark_seq_create", NULL);
    if (model_seq_reserve(c.m, c.seq, P + 1 + c.block) != DI_OK) die("model_seq_reserve", NULL);
    double t1 = now();
    /* the prefill, chunk by chunk, each chunk's features into every DSpark
     * sequence (what the drafter's observe does for a prompt) */
    const int64_t chunk = model_n_batch(c.m);
    for (int64_t done = 0; done < P; done += chunk) {
        const int64_t n = P - done < chunk ? P - done : chunk;
        model_batch_item it = {
            .seq = c.seq, .tokens = prompt + done, .n_tokens = n, .want_logits = 1};
        if (model_forward_batch(c.m, &it, 1, c.logits, &err) != DI_OK) die("prefill", err);
        int64_t fr = 0;
        const float *f = model_dspark_features(c.m, &fr);
        if (!f || fr != n) die("model_dspark_features: not the chunk's rows", NULL);
        for (int k = 0; k < n_seqs; k++)
            if (model_dspark_inject(c.m, c.ds[k], f, n, &err) != DI_OK)
                die("inject (prefill)", err);
    }
    double t2 = now();
    for (int k = 0; k < n_seqs; k++)
        if (model_dspark_reserve(c.m, c.ds[k], &err) != DI_OK) die("model_dspark_reserve", err);
    /* the verify step's features, the rows inject is timed on */
    op_decode(&c, 1 + c.block);
    int64_t fr = 0;
    const float *f = model_dspark_features(c.m, &fr);
    if (!f || fr != 1 + c.block) die("model_dspark_features after the verify step", NULL);
    memcpy(c.feat, f, (size_t)(1 + c.block) * (size_t)W * sizeof *c.feat);
    undo_decode(&c);

    printf("model %s%s%s: vocab %d, hidden %lld, %u layers, DSpark block %d, feature width %lld; "
           "%d threads, prompt %lld, n_batch %lld, %d DSpark sequences; load %.2f s, prefill + "
           "injections %.2f s\n",
           path, dspark ? " + " : "", dspark ? dspark : "", V, (long long)cfg->n_embd,
           (unsigned)cfg->n_layer, c.block, (long long)W, threads, (long long)P, (long long)chunk,
           n_seqs, t1 - t0, t2 - t1);
    double *times = malloc((size_t)reps * sizeof *times);
    if (!times) die("out of memory", NULL);
    for (int op = 0; op < N_OPS; op++) {
        if (ops && !strstr(ops, op_names[op])) continue;
        run_op(&c, op); /* warm */
        undo_op(&c, op);
        for (int r = 0; r < reps; r++) {
            double a = now();
            run_op(&c, op);
            times[r] = now() - a;
            undo_op(&c, op);
        }
        qsort(times, (size_t)reps, sizeof *times, cmp_double);
        printf("RESULT %s %.4f %.4f\n", op_names[op], times[0] * 1e3, times[reps / 2] * 1e3);
        fflush(stdout);
    }
    free(times);
    for (int k = 0; k < n_seqs; k++) model_dspark_seq_free(c.m, c.ds[k]);
    model_seq_free(c.m, c.seq);
    model_free(c.m);
    free(prompt);
    free(c.tokens);
    free(c.anchors);
    free(c.logits);
    free(c.conf);
    free(c.drafts);
    free(c.feat);
    free(c.ds);
    return 0;
}

/* A draw's cost: sampler_sample (internal API) against llama.cpp's sampler
 * chain (libllama's llama_sampler_*: temp, top_k, top_p, dist, in our order;
 * greedy)
 * on the same rows, interleaved, best of `reps` each; microseconds a draw
 * and the ratio (llama.cpp / deepinfer: above 1, deepinfer is faster) last.
 *
 *     sampler_bench [libllama.so path (- or none: deepinfer alone)] [reps (40)]
 *
 * libllama.so: llama-cpp-python's, e.g. .venv-bench/lib/python3.11/site-packages/
 * llama_cpp/lib/libllama.so (bench/README.md). Rows: SmolLM2's vocabulary
 * (49,152) and DeepSeek's (129,280), each flat (logits uniform over 20) and
 * peaked (a Gaussian of sd 2.5 with three tokens 11-14 above it: one token
 * takes most of the mass, as a model's rows mostly do). Both sides copy the
 * row in before each draw (ours the logits, llama.cpp's its token array);
 * the copies, timed alone, are taken off each. Draws are not compared (the
 * two samplers' random streams differ); tests/unit/test_sampler.c checks
 * ours. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "sampler/sampler.h"

/* llama.h's sampler API (the parts used), as llama-cpp-python 0.3.36 binds it */
typedef struct llama_token_data {
    int32_t id;
    float logit, p;
} llama_token_data;
typedef struct llama_token_data_array {
    llama_token_data *data;
    size_t size;
    int64_t selected;
    bool sorted;
} llama_token_data_array;
typedef struct llama_sampler_chain_params {
    bool no_perf;
} llama_sampler_chain_params;
typedef struct llama_api {
    void *(*chain_init)(llama_sampler_chain_params);
    void (*chain_add)(void *, void *);
    void *(*init_temp)(float);
    void *(*init_top_k)(int32_t);
    void *(*init_top_p)(float, size_t);
    void *(*init_dist)(uint32_t);
    void *(*init_greedy)(void);
    void (*apply)(void *, llama_token_data_array *);
    void (*sampler_free)(void *);
} llama_api;

static int load_llama(const char *path, llama_api *a)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return fprintf(stderr, "sampler_bench: %s\n", dlerror()), -1;
    struct {
        void **fn;
        const char *name;
    } sym[] = {
        {(void **)&a->chain_init, "llama_sampler_chain_init"},
        {(void **)&a->chain_add, "llama_sampler_chain_add"},
        {(void **)&a->init_temp, "llama_sampler_init_temp"},
        {(void **)&a->init_top_k, "llama_sampler_init_top_k"},
        {(void **)&a->init_top_p, "llama_sampler_init_top_p"},
        {(void **)&a->init_dist, "llama_sampler_init_dist"},
        {(void **)&a->init_greedy, "llama_sampler_init_greedy"},
        {(void **)&a->apply, "llama_sampler_apply"},
        {(void **)&a->sampler_free, "llama_sampler_free"},
    };
    for (size_t i = 0; i < sizeof sym / sizeof *sym; i++)
        if (!(*sym[i].fn = dlsym(h, sym[i].name)))
            return fprintf(stderr, "sampler_bench: %s: no %s\n", path, sym[i].name), -1;
    return 0;
}

static unsigned lcg(unsigned *x)
{
    return *x = *x * 1103515245u + 12345u;
}

static void fill_row(float *row, int32_t V, int peaked)
{
    unsigned x = 12345u;
    for (int32_t i = 0; i < V; i++) {
        if (!peaked) {
            row[i] = (float)((lcg(&x) >> 8) % 2000) / 100.0f - 10.0f;
            continue;
        }
        const double u1 = ((lcg(&x) >> 8) + 1) / 16777217.0, u2 = (lcg(&x) >> 8) / 16777216.0;
        row[i] = (float)(2.5 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    if (peaked) row[1234] += 14.0f, row[99] += 12.5f, row[V - 100] += 11.0f;
}

typedef struct config {
    const char *name;
    float temperature;
    int32_t top_k;
    float top_p;
} config;

int main(int argc, char **argv)
{
    llama_api la;
    const int want_llama = argc > 1 && strcmp(argv[1], "-") != 0;
    const int have_llama = want_llama && load_llama(argv[1], &la) == 0;
    if (want_llama && !have_llama) return 1;
    const int reps = argc > 2 ? atoi(argv[2]) : 40;
    const int32_t vocabs[2] = {49152, 129280};
    enum { N_CFG = 5 };
    const config cfg[N_CFG] = {
        {"greedy", 0.0f, 0, 1.0f},
        {"temperature 0.8", 0.8f, 0, 1.0f},
        {"top_p 0.95", 0.8f, 0, 0.95f},
        {"top_k 40", 0.8f, 40, 1.0f},
        {"top_k 40, top_p 0.9", 0.8f, 40, 0.9f},
    };
    printf("one draw, microseconds (best of %d, row copies taken off)\n", reps);
    printf("| vocabulary | row | sampling | deepinfer | llama.cpp | llama.cpp / deepinfer |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int vi = 0; vi < 2; vi++) {
        const int32_t V = vocabs[vi];
        float *row = malloc((size_t)V * sizeof *row), *buf = malloc((size_t)V * sizeof *buf);
        sampler_candidate *scratch = malloc(sampler_scratch_count(V) * sizeof *scratch);
        llama_token_data *src = malloc((size_t)V * sizeof *src),
                         *dst = malloc((size_t)V * sizeof *dst);
        if (!row || !buf || !scratch || !src || !dst) return fprintf(stderr, "no memory\n"), 1;
        for (int peaked = 0; peaked < 2; peaked++) {
            fill_row(row, V, peaked);
            for (int32_t i = 0; i < V; i++) src[i] = (llama_token_data){i, row[i], 0.0f};
            double copy_ours = 1e9, copy_llama = 1e9;
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                memcpy(buf, row, (size_t)V * sizeof *buf);
                double t1 = now();
                memcpy(dst, src, (size_t)V * sizeof *dst);
                double t2 = now();
                copy_ours = t1 - t0 < copy_ours ? t1 - t0 : copy_ours;
                copy_llama = t2 - t1 < copy_llama ? t2 - t1 : copy_llama;
            }
            for (int ci = 0; ci < N_CFG; ci++) {
                sampler_params p = {0};
                p.temperature = cfg[ci].temperature, p.top_k = cfg[ci].top_k;
                p.top_p = cfg[ci].top_p;
                p.repetition_penalty = 1.0f, p.seed = 1;
                sampler *s = NULL;
                char msg[128];
                if (sampler_create(&p, V, &s, msg, sizeof msg) != DI_OK)
                    return fprintf(stderr, "sampler_create: %s\n", msg), 1;
                void *chain = NULL;
                if (have_llama) {
                    chain = la.chain_init((llama_sampler_chain_params){true});
                    if (cfg[ci].temperature == 0.0f) {
                        la.chain_add(chain, la.init_greedy());
                    } else {
                        la.chain_add(chain, la.init_temp(cfg[ci].temperature));
                        if (cfg[ci].top_k) la.chain_add(chain, la.init_top_k(cfg[ci].top_k));
                        if (cfg[ci].top_p < 1.0f)
                            la.chain_add(chain, la.init_top_p(cfg[ci].top_p, 1));
                        la.chain_add(chain, la.init_dist(1));
                    }
                }
                double ours = 1e9, theirs = 1e9;
                long sink = 0;
                for (int r = 0; r < reps; r++) { /* interleaved */
                    double t0 = now();
                    memcpy(buf, row, (size_t)V * sizeof *buf);
                    sink += sampler_sample(s, buf, scratch);
                    double t = now() - t0;
                    ours = t < ours ? t : ours;
                    if (!have_llama) continue;
                    t0 = now();
                    memcpy(dst, src, (size_t)V * sizeof *dst);
                    llama_token_data_array a = {dst, (size_t)V, -1, false};
                    la.apply(chain, &a);
                    sink += a.selected;
                    t = now() - t0;
                    theirs = t < theirs ? t : theirs;
                }
                ours -= copy_ours, theirs -= copy_llama;
                if (have_llama)
                    printf("| %d | %s | %s | %.1f | %.1f | %.2f |\n", V, peaked ? "peaked" : "flat",
                           cfg[ci].name, ours * 1e6, theirs * 1e6, theirs / ours);
                else
                    printf("| %d | %s | %s | %.1f | - | - |\n", V, peaked ? "peaked" : "flat",
                           cfg[ci].name, ours * 1e6);
                if (sink == 42) printf(" "); /* (keeps the draws) */
                sampler_free(s);
                if (chain) la.sampler_free(chain);
            }
        }
        free(row), free(buf), free(scratch), free(src), free(dst);
    }
    return 0;
}

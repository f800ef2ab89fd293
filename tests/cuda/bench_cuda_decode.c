/* Batch-1 decode speed of a dense model against the device's copy bandwidth
 * (docs/cuda.md; the roofline goal: >= 80 % of the measured copy):
 *   bench_cuda_decode MODEL.gguf [cuda|cpu] [STEPS]
 * First (cuda) the device-to-device copy bandwidth of cudaMemcpy over 1 GiB,
 * counting read and write bytes; then the model's weight bytes one decode step
 * streams (every matrix of every layer and the output, as stored; one
 * embedding row aside), and STEPS (default 64) greedy-free decode steps after
 * a 16-token prompt: bytes/s = weight bytes x steps / seconds, and its
 * fraction of the copy bandwidth. Also a 64-token prefill (one step): tokens/s
 * and TFLOP/s counting 2 FLOPs per weight and token (attention aside). One line of key=value per
 * measurement, so scripts/device-check.sh can collect them. cpu runs the same on the CPU backend
 * (tests this program on hosts without a GPU). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deepinfer/deepinfer.h"
#include "model/model.h"
#include "model/weights.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int copy_bandwidth(double *gbs)
{
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMemset(a, 1, bytes) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        return 0;
    if (cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess) return 0; /* warm */
    const int reps = 10;
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    if (cudaEventSynchronize(e1) != cudaSuccess) return 0;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    *gbs = 2.0 * (double)bytes * reps / ((double)ms * 1e-3) / 1e9;
    cudaFree(a);
    cudaFree(b);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda_decode MODEL.gguf [cuda|cpu] [STEPS]\n");
        return 2;
    }
    const int cuda = argc < 3 || strcmp(argv[2], "cpu") != 0;
    const int steps = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 64;
    double copy = 0;
    if (cuda) {
        if (!copy_bandwidth(&copy)) {
            fprintf(stderr, "cannot measure the copy bandwidth (no usable GPU)\n");
            return 1;
        }
        printf("copy_bandwidth_gbs=%.1f\n", copy);
    }
    model_options o = {0};
    o.n_threads = 2;
    o.n_ctx = 512;
    o.n_batch = 64;
    o.kv_dtype = MODEL_DTYPE_F16;
    o.device = cuda ? DI_DEVICE_CUDA : DI_DEVICE_CPU;
    model *m = NULL;
    di_error *err = NULL;
    double t0 = now();
    if (model_load(argv[1], &o, &m, &err) != DI_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], err ? di_error_message(err) : "");
        return 1;
    }
    printf("load_s=%.2f\n", now() - t0);
    const model_config *c = model_get_config(m);
    const model_weights *w = model_get_weights(m);
    static const char *kinds[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                  "ffn_gate", "ffn_up", "ffn_down"};
    double weight_bytes = 0, weight_params = 0;
    char name[96];
    for (uint32_t l = 0; l < c->n_layer; l++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, kinds[k]);
            const model_tensor *t = model_weights_get(w, name);
            if (t) {
                weight_bytes += (double)t->n_bytes;
                weight_params += (double)t->ne[0] * (double)t->ne[1];
            }
        }
    const model_tensor *out = model_weights_get(w, "output.weight");
    if (!out) out = model_weights_get(w, "token_embd.weight");
    weight_bytes += (double)out->n_bytes;
    weight_params += (double)out->ne[0] * (double)out->ne[1];
    printf("weight_bytes_per_token=%.0f\n", weight_bytes);
    const int64_t V = c->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    if (!logits || model_forward(m, prompt, 64, logits, 0, &err) != DI_OK) return 1; /* warm */
    model_reset(m);
    t0 = now();
    if (model_forward(m, prompt, 64, logits, 0, &err) != DI_OK) return 1;
    const double tp = now() - t0;
    printf("prefill_64_tokens_per_s=%.1f\nprefill_tflops=%.2f\n", 64 / tp,
           2.0 * weight_params * 64 / tp / 1e12);
    model_reset(m);
    if (model_forward(m, prompt, 16, logits, 0, &err) != DI_OK) return 1;
    int32_t tok = 1;
    for (int i = 0; i < 4; i++) /* warm-up */
        if (model_forward(m, &tok, 1, logits, 0, &err) != DI_OK) return 1;
    t0 = now();
    for (int i = 0; i < steps; i++) {
        tok = (int32_t)((i * 31 + 7) % V);
        if (model_forward(m, &tok, 1, logits, 0, &err) != DI_OK) return 1;
    }
    const double dt = now() - t0; /* each step ends with its logits on the host */
    const double bps = weight_bytes * steps / dt;
    printf("decode_tokens_per_s=%.1f\ndecode_bytes_per_s_gbs=%.1f\n", steps / dt, bps / 1e9);
    if (cuda) printf("fraction_of_copy_bandwidth=%.3f\n", bps / 1e9 / copy);
    free(logits);
    model_free(m);
    return 0;
}

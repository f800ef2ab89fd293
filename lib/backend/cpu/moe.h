/* DeepSeekMoE on the CPU: routing (one token's router logits into its top-k
 * experts and their weights) and the batched expert product.
 *
 * Routing follows transformers' DeepseekV3TopkRouter / DeepseekV2TopkRouter,
 * router logits in f32. V3 (NOAUX_TC): s = sigmoid(logits), choice = s +
 * e_score_correction_bias, groups ranked by the sum of their two best choices,
 * the topk_group best kept, top-k of choice among them, weights s[top-k]
 * (divided by their sum + 1e-20 when norm_topk_prob) times
 * routed_scaling_factor. V2: s = softmax(logits), top-k of s (GREEDY) or of s
 * within the topk_group groups with the largest max (GROUP_LIMITED), weights
 * s[top-k] * routed_scaling_factor. V4 (DeepSeek-V4's routers): s =
 * sqrt(softplus(logits)) or sigmoid, top-k of s + bias in one group (NOAUX_TC)
 * or the experts given by the hash table (HASH), weights s[sel] / (sum +
 * 1e-20) * routed_scaling_factor. Ties go to the lowest index, as
 * torch.topk on these inputs. Roofline per token: O(n_expert * k) compares, no
 * weight reads.
 *
 * The expert product (cpu_moe_experts) groups a step's tokens by routed
 * expert: each active expert's three matrices are read once per step, over the
 * gathered rows of the tokens that chose it (cpu_matmul_multi, through the
 * matrices' interleaved copies where their formats have one, as the dense
 * products: matmul_packed.h), and its outputs are added back weighted, experts
 * in index order (so a token's sum is the same whatever else is in the batch).
 * Thread-safe on distinct scratch. */
#ifndef DI_BACKEND_CPU_MOE_H
#define DI_BACKEND_CPU_MOE_H

#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "backend/types.h"

enum { CPU_MOE_MAX_EXPERTS = 4096 };

/* The router's per-token work arrays. */
typedef struct cpu_route_scratch {
    float scores[CPU_MOE_MAX_EXPERTS], choice[CPU_MOE_MAX_EXPERTS], group[CPU_MOE_MAX_EXPERTS],
        second[CPU_MOE_MAX_EXPERTS];
    unsigned char taken[CPU_MOE_MAX_EXPERTS], gkeep[CPU_MOE_MAX_EXPERTS];
} cpu_route_scratch;

/* Route one token: logits [n_expert] -> sel[k], w[k]. Does nothing for
 * parameters out of range (n_expert over CPU_MOE_MAX_EXPERTS, k over n_expert,
 * groups that do not divide the experts: the loader rejects them). */
void cpu_moe_route(const backend_route_params *p, const float *bias, const float *logits,
                   int32_t *sel, float *w, cpu_route_scratch *rs);

/* One expert matrix: the tensor, and its interleaved copy (cpu_pack) or NULL
 * where its format has none; the products read the copy when there is one. */
typedef struct cpu_expert_matrix {
    const model_tensor *t;
    const void *packed;
} cpu_expert_matrix;

/* The scratch of cpu_moe_experts: xe, ye [max_rows, n_embd], gate, up
 * [max_rows, n_ff], and the quantized activations of cpu_matmul. */
typedef struct cpu_moe_scratch {
    float *xe, *ye, *gate, *up;
    void *act;
} cpu_moe_scratch;

/* out[t] (+)= sum_i weight[t * k + i] * Expert_{sel[t * k + i]}(x[t]) for n
 * rows of n_embd (backend.h, moe_experts). gate, up, down: [n_expert]; limit
 * as cpu_mlp's. */
void cpu_moe_experts(cpu_threadpool *pool, int32_t n_expert, const cpu_expert_matrix *gate,
                     const cpu_expert_matrix *up, const cpu_expert_matrix *down, const float *x,
                     int64_t n, const int32_t *sel, const float *weight, int32_t k, float *out,
                     int accumulate, const cpu_moe_scratch *s, int use_ref, float limit);

/* y = (SiLU(x Wg) * (x Wu)) Wd over n rows, through gate/up [n, n_ff] scratch;
 * Wg and Wu share one quantization of x when their formats allow. limit > 0
 * clips the SwiGLU as cpu_silu_mul_clamp (DeepSeek-V4's swiglu_limit). */
void cpu_mlp(cpu_threadpool *pool, const cpu_expert_matrix *wg, const cpu_expert_matrix *wu,
             const cpu_expert_matrix *wd, const float *x, int64_t n, float *y, float *gate,
             float *up, void *act, int use_ref, float limit);

#endif

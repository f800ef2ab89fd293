/* DeepSeekMoE on the CPU (moe.h): routing and the batched expert product. */
#include "backend/cpu/moe.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

/* Index of the largest of v[0, n) not yet taken (ties: the lowest index). */
static int32_t argmax_free(const float *v, const unsigned char *taken, int32_t n)
{
    int32_t b = -1;
    for (int32_t i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b])) b = i;
    return b;
}

void cpu_moe_route(const backend_route_params *c, const float *bias, const float *logits,
                   int32_t *sel, float *w, cpu_route_scratch *rs)
{
    const int32_t n = c->n_expert, k = c->n_expert_used, ng = c->n_group, per = ng > 0 ? n / ng : 0;
    float *scores = rs->scores, *choice = rs->choice, *group = rs->group, *second = rs->second;
    unsigned char *taken = rs->taken, *gkeep = rs->gkeep;
    if (n <= 0 || n > 4096 || ng <= 0 || per <= 0 || k <= 0 || k > n) return; /* checked at load */
    if (c->gating == MODEL_EXPERT_GATING_SIGMOID) {
        for (int32_t e = 0; e < n; e++) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else if (c->gating == MODEL_EXPERT_GATING_SQRTSOFTPLUS) {
        /* torch's softplus: x itself above its threshold of 20 */
        for (int32_t e = 0; e < n; e++)
            scores[e] = sqrtf(logits[e] > 20.0f ? logits[e] : log1pf(expf(logits[e])));
    } else {
        memcpy(scores, logits, (size_t)n * sizeof *scores);
        cpu_softmax(scores, n);
    }
    if (c->topk_method == MODEL_TOPK_HASH) { /* the experts are given: weigh them */
        double total = 0.0;
        for (int32_t i = 0; i < k; i++) total += scores[sel[i] >= 0 && sel[i] < n ? sel[i] : 0];
        for (int32_t i = 0; i < k; i++) {
            float s = scores[sel[i] >= 0 && sel[i] < n ? sel[i] : 0];
            w[i] = (float)(s / (total + 1e-20)) * c->routed_scaling_factor;
        }
        return;
    }
    for (int32_t e = 0; e < n; e++)
        choice[e] = scores[e] + (c->topk_method == MODEL_TOPK_NOAUX_TC && bias ? bias[e] : 0.0f);
    memset(gkeep, 1, (size_t)ng);
    if (c->topk_method != MODEL_TOPK_GREEDY && ng > 1) {
        /* V3: the sum of each group's two best choices; V2: its best. */
        for (int32_t g = 0; g < ng; g++) group[g] = second[g] = -INFINITY;
        for (int32_t e = 0; e < n; e++) {
            int32_t g = e / per;
            if (choice[e] > group[g]) {
                second[g] = group[g];
                group[g] = choice[e];
            } else if (choice[e] > second[g]) {
                second[g] = choice[e];
            }
        }
        if (c->topk_method == MODEL_TOPK_NOAUX_TC)
            for (int32_t g = 0; g < ng; g++) group[g] += second[g];
        memset(taken, 0, (size_t)ng);
        for (int32_t i = 0; i < c->topk_group; i++) {
            int32_t g = argmax_free(group, taken, ng);
            if (g >= 0) taken[g] = 1;
        }
        memcpy(gkeep, taken, (size_t)ng);
    }
    /* Experts of dropped groups: -inf for V3 (never chosen), 0 for V2 (as
     * transformers' masked_fill). */
    for (int32_t e = 0; e < n; e++)
        if (!gkeep[e / per]) choice[e] = c->topk_method == MODEL_TOPK_NOAUX_TC ? -INFINITY : 0.0f;
    memset(taken, 0, (size_t)n);
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        int32_t e = argmax_free(choice, taken, n);
        if (e < 0) e = 0; /* unreachable: k <= n */
        taken[e] = 1;
        sel[i] = e;
        w[i] = c->topk_method == MODEL_TOPK_NOAUX_TC ? scores[e] : choice[e];
        sum += w[i];
    }
    for (int32_t i = 0; i < k; i++) {
        if (c->norm_topk_prob) w[i] = (float)(w[i] / (sum + 1e-20));
        w[i] *= c->routed_scaling_factor;
    }
}

void cpu_mlp(cpu_threadpool *pool, const cpu_expert_matrix *wg, const cpu_expert_matrix *wu,
             const cpu_expert_matrix *wd, const float *x, int64_t n, float *y, float *gate,
             float *up, void *act, int use_ref, float limit)
{
    if (cpu_matmul_can_share(wg->t, wu->t)) {
        const model_tensor *w[2] = {wg->t, wu->t};
        const void *packed[2] = {wg->packed, wu->packed};
        float *out[2] = {gate, up};
        cpu_matmul_multi(pool, 2, w, packed, NULL, x, n, out, act, use_ref);
    } else {
        cpu_matmul_multi(pool, 1, &wg->t, &wg->packed, NULL, x, n, &gate, act, use_ref);
        cpu_matmul_multi(pool, 1, &wu->t, &wu->packed, NULL, x, n, &up, act, use_ref);
    }
    if (limit > 0.0f)
        cpu_silu_mul_clamp(gate, up, n * wg->t->ne[1], limit);
    else
        cpu_silu_mul(gate, up, n * wg->t->ne[1]);
    cpu_matmul_multi(pool, 1, &wd->t, &wd->packed, NULL, gate, n, &y, act, use_ref);
}

void cpu_moe_experts(cpu_threadpool *pool, int32_t n_expert, const cpu_expert_matrix *gate,
                     const cpu_expert_matrix *up, const cpu_expert_matrix *down, const float *x,
                     int64_t n, const int32_t *sel, const float *weight, int32_t k, float *out,
                     int accumulate, const cpu_moe_scratch *s, int use_ref, float limit)
{
    const int64_t E = gate[0].t->ne[0];
    if (!accumulate) memset(out, 0, (size_t)(n * E) * sizeof *out);
    /* Each expert once, over the tokens that chose it (gathered rows). */
    for (int32_t e = 0; e < n_expert; e++) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++)
                if (sel[t * k + i] == e) memcpy(s->xe + m++ * E, x + t * E, (size_t)E * sizeof *x);
        if (m == 0) continue;
        cpu_mlp(pool, &gate[e], &up[e], &down[e], s->xe, m, s->ye, s->gate, s->up, s->act, use_ref,
                limit);
        m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++)
                if (sel[t * k + i] == e) {
                    const float wt = weight[t * k + i], *y = s->ye + m++ * E;
                    float *o = out + t * E;
                    for (int64_t j = 0; j < E; j++) o[j] += wt * y[j];
                }
    }
}

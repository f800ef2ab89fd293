/* model_weights_open on small GGUF files and Hugging Face directories built here
 * (written to a temporary directory): the configuration and tensors a good file
 * gives, and the status and message of every kind of bad file. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/safetensors.h"
#include "model/weights.h"

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/di_weights_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- a growing byte buffer ---------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v)
{
    put(b, &v, 4);
}
static void put_u64(buf *b, uint64_t v)
{
    put(b, &v, 8);
}
static void put_str(buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* ---- GGUF ------------------------------------------------------------------ */

/* The tiny model: vocab 8, hidden 4, 2 heads of 2, 1 KV head, FFN 8, 1 layer. */
enum { V = 8, E = 4, H = 2, HKV = 1, HD = 2, FF = 8 };

typedef struct gguf_spec {
    const char *arch;        /* general.architecture */
    const char *skip_key;    /* a metadata key to leave out */
    const char *skip_tensor; /* a tensor to leave out */
    const char *odd_tensor;  /* a tensor given the wrong shape */
    uint32_t odd_type;       /* a ggml type for blk.0.ffn_up.weight (0: F32) */
    int bias, untied;
    const char *rope_type; /* rope.scaling.type, or NULL */
} gguf_spec;

typedef struct tinfo {
    uint64_t ne[2];
    uint32_t n_dims, type;
    char name[48];
} tinfo;

static size_t gguf_tensors(const gguf_spec *s, tinfo *t)
{
    size_t n = 0;
#define T(nm, d, a, b)                                                                             \
    do {                                                                                           \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                           \
        t[n].n_dims = d;                                                                           \
        t[n].ne[0] = a;                                                                            \
        t[n].ne[1] = b;                                                                            \
        t[n].type = 0;                                                                             \
        n++;                                                                                       \
    } while (0)
    T("token_embd.weight", 2, E, V);
    T("output_norm.weight", 1, E, 1);
    if (s->untied) T("output.weight", 2, E, V);
    T("blk.0.attn_norm.weight", 1, E, 1);
    T("blk.0.attn_q.weight", 2, E, H * HD);
    T("blk.0.attn_k.weight", 2, E, HKV * HD);
    T("blk.0.attn_v.weight", 2, E, HKV * HD);
    T("blk.0.attn_output.weight", 2, H * HD, E);
    T("blk.0.ffn_norm.weight", 1, E, 1);
    T("blk.0.ffn_gate.weight", 2, E, FF);
    T("blk.0.ffn_up.weight", 2, E, FF);
    T("blk.0.ffn_down.weight", 2, FF, E);
    if (s->bias) {
        T("blk.0.attn_q.bias", 1, H * HD, 1);
        T("blk.0.attn_k.bias", 1, HKV * HD, 1);
        T("blk.0.attn_v.bias", 1, HKV * HD, 1);
    }
#undef T
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->skip_tensor && strcmp(t[i].name, s->skip_tensor) == 0) continue;
        t[m] = t[i];
        if (s->odd_tensor && strcmp(t[m].name, s->odd_tensor) == 0) t[m].ne[0] += 1;
        if (s->odd_type && strcmp(t[m].name, "blk.0.ffn_up.weight") == 0) {
            t[m].type = s->odd_type;
            t[m].ne[0] = 32; /* a whole block of the quantized types */
        }
        m++;
    }
    return m;
}

static size_t tensor_bytes(const tinfo *t)
{
    size_t elements = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1);
    switch (t->type) {
    case 0: return elements * 4;
    case 6: return elements / 32 * 22; /* Q5_0 */
    case 3: return elements / 32 * 20; /* Q4_1 */
    default: return elements * 4;
    }
}

/* Write a GGUF of the tiny model; the value of tensor element i is i * 0.5 + k
 * for the k-th tensor. Returns the file's size. */
static size_t write_gguf(const char *path, const gguf_spec *s, size_t truncate_to)
{
    tinfo t[32];
    size_t nt = gguf_tensors(s, t);
    const char *arch = s->arch ? s->arch : "llama";
    struct {
        const char *key;
        uint32_t v;
    } u32s[] = {{"context_length", 128},     {"embedding_length", E},
                {"block_count", 1},          {"feed_forward_length", FF},
                {"attention.head_count", H}, {"attention.head_count_kv", HKV}};
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, nt);
    buf kv = {0};
    uint64_t nkv = 0;
    char key[96];
    put_str(&kv, "general.architecture");
    put_u32(&kv, 8);
    put_str(&kv, arch);
    nkv++;
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, u32s[i].key);
        if (s->skip_key && strcmp(key, s->skip_key) == 0) continue;
        put_str(&kv, key);
        put_u32(&kv, 4);
        put_u32(&kv, u32s[i].v);
        nkv++;
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (!s->skip_key || strcmp(key, s->skip_key) != 0) {
        put_str(&kv, key);
        put_u32(&kv, 6);
        float eps = 1e-6f;
        put(&kv, &eps, 4);
        nkv++;
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    put_str(&kv, key);
    put_u32(&kv, 6);
    float theta = 500000.0f;
    put(&kv, &theta, 4);
    nkv++;
    if (s->rope_type) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        put_str(&kv, key);
        put_u32(&kv, 8);
        put_str(&kv, s->rope_type);
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        put_str(&kv, key);
        put_u32(&kv, 6);
        float factor = 4.0f;
        put(&kv, &factor, 4);
        nkv += 2;
    }
    put_str(&kv, "tokenizer.ggml.bos_token_id");
    put_u32(&kv, 4);
    put_u32(&kv, 1);
    put_str(&kv, "tokenizer.ggml.eos_token_id");
    put_u32(&kv, 4);
    put_u32(&kv, 2);
    nkv += 2;
    put_u64(&b, nkv);
    put(&b, kv.p, kv.n);
    free(kv.p);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        put_str(&b, t[i].name);
        put_u32(&b, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++) put_u64(&b, t[i].ne[d]);
        put_u32(&b, t[i].type);
        put_u64(&b, off);
        off += (tensor_bytes(&t[i]) + 31) / 32 * 32;
    }
    while (b.n % 32) put(&b, "", 1);
    size_t data_start = b.n;
    for (size_t i = 0; i < nt; i++) {
        size_t nb = tensor_bytes(&t[i]);
        for (size_t j = 0; j < nb / 4; j++) {
            float v = (float)j * 0.5f + (float)i;
            put(&b, &v, 4);
        }
        while ((b.n - data_start) % 32) put(&b, "", 1);
    }
    size_t size = truncate_to && truncate_to < b.n ? truncate_to : b.n;
    write_file(path, b.p, size);
    free(b.p);
    return size;
}

/* Open `path` and expect `status` with every needle (up to 3) in the message. */
static void expect_open_error(const char *path, di_status status, const char *n1, const char *n2,
                              const char *n3)
{
    model_weights *w = (model_weights *)1;
    di_error *err = NULL;
    di_status st = model_weights_open(path, &w, &err);
    const char *m = di_error_message(err);
    if (st != status || (n1 && !strstr(m, n1)) || (n2 && !strstr(m, n2)) ||
        (n3 && !strstr(m, n3))) {
        print_error("open %s: status %d \"%s\", want %d with \"%s\" \"%s\" \"%s\"\n", path, (int)st,
                    m, (int)status, n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "");
        fail();
    }
    assert_null(w);
    di_error_free(err);
}

static void test_gguf_llama_config_and_tensors(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/llama.gguf", tmpdir);
    gguf_spec s = {0};
    write_gguf(path, &s, 0);
    model_weights *w = NULL;
    di_error *err = NULL;
    assert_int_equal(model_weights_open(path, &w, &err), DI_OK);
    const model_config *c = model_weights_config(w);
    assert_int_equal(c->arch, MODEL_ARCH_LLAMA);
    assert_int_equal(c->rope_style, MODEL_ROPE_NORM);
    assert_int_equal(c->n_vocab, V);
    assert_int_equal(c->n_embd, E);
    assert_int_equal(c->n_layer, 1);
    assert_int_equal(c->n_head, H);
    assert_int_equal(c->n_head_kv, HKV);
    assert_int_equal(c->head_dim, HD);
    assert_int_equal(c->n_ff, FF);
    assert_int_equal(c->n_ctx_train, 128);
    assert_true(c->rms_norm_eps == 1e-6f);
    assert_true(c->rope_theta == 500000.0f);
    assert_int_equal(c->rope_scaling, MODEL_ROPE_SCALING_NONE);
    assert_true(c->rope_factor == 1.0f);
    assert_int_equal(c->tie_embeddings, 1);
    assert_int_equal(c->attn_qkv_bias, 0);
    assert_int_equal(c->bos_token_id, 1);
    assert_int_equal(c->eos_token_id, 2);
    const model_tensor *t = model_weights_get(w, "blk.0.ffn_down.weight");
    assert_non_null(t);
    assert_string_equal(t->name, "blk.0.ffn_down.weight");
    assert_int_equal(t->dtype, MODEL_DTYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], FF);
    assert_int_equal(t->ne[1], E);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->n_bytes, FF * E * 4);
    const float *f = t->data;
    assert_true(f[3] == 1.5f + 10.0f); /* the 11th tensor written, element 3 */
    assert_null(model_weights_get(w, "output.weight"));
    assert_null(model_weights_get(w, "blk.1.ffn_down.weight"));
    const int64_t want[2] = {FF, E}, wrong[2] = {E, FF};
    assert_int_equal(model_weights_require(w, "blk.0.ffn_down.weight", 2, want, &t, NULL), DI_OK);
    assert_non_null(t);
    assert_int_equal(model_weights_require(w, "blk.0.ffn_down.weight", 2, wrong, &t, &err),
                     DI_ERR_MODEL_FORMAT);
    assert_null(t);
    assert_non_null(strstr(di_error_message(err), "blk.0.ffn_down.weight"));
    assert_non_null(strstr(di_error_message(err), "shape {8, 4}, expected {4, 8}"));
    di_error_free(err);
    assert_int_equal(model_weights_require(w, "nope.weight", 1, want, &t, &err),
                     DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err), "'nope.weight' is missing"));
    di_error_free(err);
    model_weights_close(w);
}

static void test_gguf_qwen2_bias_untied_yarn(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/qwen2.gguf", tmpdir);
    gguf_spec s = {.arch = "qwen2", .bias = 1, .untied = 1, .rope_type = "yarn"};
    write_gguf(path, &s, 0);
    model_weights *w = NULL;
    assert_int_equal(model_weights_open(path, &w, NULL), DI_OK);
    const model_config *c = model_weights_config(w);
    assert_int_equal(c->arch, MODEL_ARCH_QWEN2);
    assert_int_equal(c->rope_style, MODEL_ROPE_NEOX);
    assert_int_equal(c->attn_qkv_bias, 1);
    assert_int_equal(c->tie_embeddings, 0);
    assert_int_equal(c->rope_scaling, MODEL_ROPE_SCALING_YARN);
    assert_true(c->rope_factor == 4.0f);
    assert_non_null(model_weights_get(w, "blk.0.attn_k.bias"));
    model_weights_close(w);
}

static void test_gguf_errors_name_the_file_and_field(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    gguf_spec s = {.arch = "gemma"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_UNSUPPORTED, path, "general.architecture 'gemma'", NULL);

    s = (gguf_spec){.skip_key = "llama.embedding_length"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, path, "llama.embedding_length is missing", NULL);

    s = (gguf_spec){.skip_key = "llama.attention.layer_norm_rms_epsilon"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, "llama.attention.layer_norm_rms_epsilon",
                      "missing", NULL);

    s = (gguf_spec){.odd_type = 6}; /* Q5_0 */
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_UNSUPPORTED, path, "'blk.0.ffn_up.weight'", "Q5_0");

    s = (gguf_spec){.skip_tensor = "blk.0.attn_v.weight"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, path, "'blk.0.attn_v.weight' is missing", NULL);

    s = (gguf_spec){.odd_tensor = "blk.0.attn_k.weight"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, "'blk.0.attn_k.weight' has shape {5, 2}",
                      "expected {4, 2}", NULL);

    s = (gguf_spec){.arch = "qwen2", .bias = 1, .skip_tensor = "blk.0.attn_v.bias"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, "'blk.0.attn_v.bias' is missing", NULL, NULL);

    s = (gguf_spec){.rope_type = "longrope"};
    write_gguf(path, &s, 0);
    expect_open_error(path, DI_ERR_UNSUPPORTED, "llama.rope.scaling.type 'longrope'", NULL, NULL);

    s = (gguf_spec){0};
    size_t full = write_gguf(path, &s, 0);
    write_gguf(path, &s, full - 40);
    expect_open_error(path, DI_ERR_MODEL_FORMAT, path, "truncated", "byte offset");

    snprintf(path, sizeof path, "%s/missing.gguf", tmpdir);
    expect_open_error(path, DI_ERR_IO, path, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_llama_config_and_tensors),
        cmocka_unit_test(test_gguf_qwen2_bias_untied_yarn),
        cmocka_unit_test(test_gguf_errors_name_the_file_and_field),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

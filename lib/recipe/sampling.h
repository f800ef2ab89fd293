/* What a request body asks of generation beyond its prompt (sampling.c): the
 * sampling fields each protocol defines, which of them the body decided, and
 * the first field it sets that the engine cannot honour.
 *
 * The V4 encodings resolve temperature, top_p, max_tokens and stop sequences
 * as deepseek-recipe does (codec.c's take_facts); every encoding gets the rest
 * here, with OpenAI's and Anthropic's ranges: the chat templates (DeepSeek-V3,
 * R1 distills, ChatML), which the reference does not cover, get all of them. */
#ifndef DI_RECIPE_SAMPLING_H
#define DI_RECIPE_SAMPLING_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "recipe/request_common.h"

/* Bits of rc_sampling.set: the fields the body decided — its own value, or a
 * rule of its model that fixes one (thinking mode's temperature 1.0). */
enum {
    RC_SET_TEMPERATURE = 1u << 0,
    RC_SET_TOP_P = 1u << 1,
    RC_SET_TOP_K = 1u << 2,
    RC_SET_SEED = 1u << 3,
    RC_SET_PRESENCE_PENALTY = 1u << 4,
    RC_SET_FREQUENCY_PENALTY = 1u << 5,
    RC_SET_MAX_TOKENS = 1u << 6,
    RC_SET_MIN_P = 1u << 7,
    RC_SET_REPETITION_PENALTY = 1u << 8,
};

typedef struct rc_sampling {
    unsigned set;
    float temperature, top_p, presence_penalty, frequency_penalty, min_p, repetition_penalty;
    int32_t top_k;
    uint64_t seed;
    uint32_t max_tokens;
    /* Chat's logit_bias: token ids and biases (malloc'd, [n_bias]) */
    int32_t *bias_ids;
    float *bias_values;
    size_t n_bias;
    /* The first field the body sets that the engine cannot honour yet
     * ("n", "logprobs", "response_format.json_schema", …), and why; "" when
     * none. The codec still renders such a body (deepseek-recipe accepts it);
     * di_submit refuses it with DI_ERR_UNSUPPORTED. */
    char unsupported[200];
    /* The first field of those the engine judges that has the wrong type
     * (Responses' store: "true"), which deepseek-recipe does not check; "" when
     * none. di_submit refuses it with DI_ERR_INVALID_REQUEST, before any
     * unsupported field. */
    char invalid[120];
    /* The output constraint the body asks for: Chat's response_format
     * (json_schema, regex, json_object) or Responses' text.format (json_schema,
     * json_object), as JSON Schema text (json_object: {"type":"object"}) or a
     * regular expression (malloc'd; NULL when none or out of memory, then
     * constraint_oom is set). constraint_field names the body field, for the
     * errors of compiling it. */
    enum { RC_CONSTRAINT_NONE, RC_CONSTRAINT_JSON_SCHEMA, RC_CONSTRAINT_REGEX } constraint;
    char *constraint_text;
    const char *constraint_field; /* static: "response_format.json_schema.schema", … */
    int constraint_oom;
    /* The body's function tools, for constraining their calls (di_submit
     * builds the grammar of the calls in the encoding's call syntax): each
     * tool's name, its parameters' JSON Schema as compact JSON (NULL: the tool
     * is not strict, its arguments are any JSON object), and the schema's field
     * for errors ("tools[2].function.parameters"). call_strict: some tool is
     * strict (Chat `function.strict`, Responses and Messages `strict`);
     * call_forced: tool_choice requires a call (Chat/Responses "required",
     * Messages "any", or a named tool: then call_named is its index, else -1).
     * call_oom: out of memory taking them. Empty when tool_choice is "none".
     * call_single: at most one call (Chat and Responses `parallel_tool_calls:
     * false`, Messages `tool_choice.disable_parallel_tool_use: true`), which
     * the grammar of the calls enforces. */
    struct rc_call_tool {
        char *name;
        char *schema;
        char field[64];
    } * call_tools;
    size_t n_call_tools;
    int call_strict, call_forced, call_named, call_oom, call_single;
    /* Log probabilities the body asks for: Chat logprobs (top_logprobs, 0-20,
     * the alternatives), Responses top_logprobs > 0 or include
     * "message.output_text.logprobs" */
    int logprobs;
    int32_t top_logprobs;
    /* Chat `n`: the choices to generate (1..RC_MAX_N; 1 when absent) */
    uint32_t n;
} rc_sampling;

/* The most choices a Chat request may ask for (`n`), OpenAI's bound. */
#define RC_MAX_N 128u

/* The largest max_tokens a body may ask for (deepseek-recipe's bound). */
#define RC_MAX_TOKENS_LIMIT 393216u

/* A Chat Completions body rendered with a chat template: max_completion_tokens
 * (or max_tokens), temperature [0, 2], top_p [0, 1] (0 keeps only the most
 * likely token), seed, presence/frequency_penalty [-2, 2], logit_bias, and its
 * stop sequences (a string or up to 16 strings) appended to conv. 0, or -1 with
 * the error naming the field. */
int rc_sampling_template(rc_err *e, json_t *root, rc_sampling *s, rc_conversation *conv);

/* A body the V4 encodings resolve: the fields deepseek-recipe checks but does
 * not resolve — Chat's seed, penalties and logit_bias, Messages' top_k. 0, or -1
 * with the error. */
int rc_sampling_extra(rc_err *e, json_t *root, di_protocol protocol, rc_sampling *s);

/* Fill s->unsupported with the first field of `root` (a `protocol` body) the
 * engine does not honour, for an encoding that has a reasoning block
 * (`reasoning`: 0 for ChatML, which drops it), and s->constraint with its
 * output format's constraint (di_submit compiles it into the sampler's
 * grammar). */
void rc_sampling_check_supported(json_t *root, di_protocol protocol, int reasoning, rc_sampling *s);

void rc_sampling_free(rc_sampling *s);

/* The sampling facts of a rendered prompt (owned by it; codec.c). */
const rc_sampling *rc_prompt_sampling(const di_prompt *p);

/* The name the replies of encodings that do not need the body's model name
 * (the chat templates, ChatML) give as `model`: copied; NULL: the body's, or
 * the template family's name. Not thread-safe: set it before rendering. 0, or
 * -1 when out of memory (the codec keeps its previous name). */
int rc_codec_set_served_name(di_codec *codec, const char *name);

/* di_codec_render for the engine: as di_codec_render, except that a Chat
 * body's `n` may be any integer of its type for every encoding (the engine
 * serves n choices, rc_sampling.n; its range is judged there), where
 * deepseek-recipe's V4 conversion requires 1. */
di_status rc_codec_render_engine(const di_codec *codec, di_protocol protocol, const char *json,
                                 size_t len, di_prompt **out, di_error **err);

#endif

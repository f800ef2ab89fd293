/* The grammar of a protocol request's tool calls (tool_constraint.c): strict
 * tools' arguments constrained to their schemas and tool_choice's forced call,
 * in the call syntax of the request's encoding — Hermes <tool_call> blocks
 * (ChatML), the V3 / R1 tool-call tokens and DeepSeek V4's DSML — so that the
 * stream parser reads the calls back unchanged. docs/grammar.md, "Strict
 * tools". */
#ifndef DI_API_TOOL_CONSTRAINT_H
#define DI_API_TOOL_CONSTRAINT_H

#include "deepinfer/deepinfer.h"
#include "recipe/sampling.h"
#include "recipe/stream.h"
#include "sampler/grammar.h"
#include "util/error.h"

/* The grammar of the reply's output when its tool calls are constrained:
 * some tool is strict, tool_choice forces a call, the body allows one call
 * only (Chat and Responses `parallel_tool_calls: false`, Messages
 * `disable_parallel_tool_use`: the grammar then ends after the first call), or
 * the body has an output format (the reply is then the format's answer or
 * calls). *out gets the
 * compiled grammar (the caller owns it), or NULL when no call constraint
 * applies (no tools parsed, tool_choice "none", or nothing to constrain) —
 * the caller then applies the body's format alone, if any. dsml_v41: the
 * DSML tag words are V4.1's (" calls", " invoke", " parameter").
 * Errors: DI_ERR_INVALID_REQUEST naming the schema's field
 * (`tools[2].function.parameters.properties.x: format: …`) or the format's;
 * DI_ERR_OUT_OF_MEMORY. Thread-safe. */
di_status tool_call_grammar(const rc_reply *rp, const rc_sampling *body, int dsml_v41,
                            grammar **out, di_error **err);

#endif

/* Tool calls as grammar tags (tool_constraint.h): each syntax's call written
 * as the stream parser reads it (lib/recipe/stream_parser_*.c) and as the
 * encodings write a call in the conversation history. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/tool_constraint.h"

/* s as a GBNF string literal: ASCII other than letters and digits as \xHH,
 * other UTF-8 bytes as they are. */
static void gbnf_literal(rc_buf *b, const char *s, size_t n)
{
    rc_buf_adds(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char x[8];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80)
            rc_buf_add(b, (const char *)&s[i], 1);
        else {
            snprintf(x, sizeof x, "\\x%02X", c);
            rc_buf_adds(b, x);
        }
    }
    rc_buf_adds(b, "\"");
}

/* The begin sequence of tool `name`'s call, in the reply's syntax:
 *   Hermes: <tool_call> ws {"name": NAME, "arguments": ARGS} ws </tool_call>
 *   V3/R1:  <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
 *   DSML:   <｜DSML｜invoke name="NAME">\n PARAMETERS </｜DSML｜invoke>\n
 *           (V4.1: " invoke"), as encoding_dsv4.c writes a call */
static char *call_begin(int format, const char *invoke, const char *name)
{
    rc_buf b = {0};
    if (format == RC_TOOLS_HERMES) {
        rc_buf q = {0};
        rc_json_string(&q, name, strlen(name));
        rc_buf_adds(&b, "tc-blank \"{\" ws \"\\\"name\\\"\" ws \":\" ws ");
        if (q.s) gbnf_literal(&b, q.s, q.len);
        b.oom |= q.oom;
        free(q.s);
        rc_buf_adds(&b, " ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws");
    } else if (format == RC_TOOLS_V3) {
        gbnf_literal(&b, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                     strlen("<｜tool▁call▁begin｜>function<｜tool▁sep｜>"));
        rc_buf_adds(&b, " ");
        gbnf_literal(&b, name, strlen(name));
        rc_buf_adds(&b, " \"\\n```json\\n\"");
    } else {
        rc_buf_adds(&b, "\"<｜DSML｜\" ");
        gbnf_literal(&b, invoke, strlen(invoke));
        rc_buf_adds(&b, " \" name=\\\"\" ");
        gbnf_literal(&b, name, strlen(name));
        rc_buf_adds(&b, " \"\\\">\\n\"");
    }
    return rc_buf_take(&b);
}

di_status tool_call_grammar(const rc_reply *rp, const rc_sampling *body, int dsml_v41,
                            grammar **out, di_error **err)
{
    *out = NULL;
    if (body->call_oom) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    if (!rp->parse_tool_calls || !body->n_call_tools) return DI_OK;
    if (!body->call_strict && !body->call_forced && !body->call_single &&
        body->constraint == RC_CONSTRAINT_NONE)
        return DI_OK;
    int format = (int)rp->tool_format;
    /* the DSML tag words: V4's, or V4.1's with a leading space */
    const char *calls_word = dsml_v41 ? " calls" : "tool_calls";
    const char *invoke = dsml_v41 ? " invoke" : "invoke";
    grammar_tags spec = {0};
    char open[32], close[64], end_dsml[64];
    const char *end;
    if (format == RC_TOOLS_HERMES) {
        spec.trigger = "<tool_call>";
        spec.separator = "tc-blank \"<tool_call>\"";
        spec.close = "";
        spec.forbid = "</tool_call>";
        end = "ws \"}\" tc-blank \"</tool_call>\"";
    } else if (format == RC_TOOLS_V3) {
        spec.trigger = "<｜tool▁calls▁begin｜>";
        spec.separator = "\"\\n\"?";
        spec.close = "\"<｜tool▁calls▁end｜>\"";
        /* (the fenced arguments also end at "\n```", which no JSON string holds) */
        spec.forbid = "<｜tool▁call▁end｜>";
        end = "\"\\n```<｜tool▁call▁end｜>\"";
    } else {
        spec.trigger = "<｜DSML｜";
        snprintf(open, sizeof open, "\"%s>\\n\"", calls_word);
        snprintf(close, sizeof close, "\"</｜DSML｜%s>\"", calls_word);
        snprintf(end_dsml, sizeof end_dsml, "\"</｜DSML｜%s>\\n\"", invoke);
        spec.open = open;
        spec.separator = "\"\"";
        spec.close = close;
        spec.dsml = dsml_v41 ? " parameter" : "parameter";
        spec.forbid = "</｜DSML｜"; /* a value ends there */
        end = end_dsml;
    }
    size_t first = 0, n = body->n_call_tools;
    if (body->call_forced && body->call_named >= 0) { /* one call, of that tool */
        first = (size_t)body->call_named, n = 1;
        spec.separator = NULL;
    }
    if (body->call_single) spec.separator = NULL; /* at most one call */
    if (!body->call_forced) {
        spec.start = GRAMMAR_TAGS_TEXT_OR_CALLS;
        if (body->constraint != RC_CONSTRAINT_NONE) {
            spec.answer = body->constraint_text;
            spec.answer_len = strlen(body->constraint_text);
            spec.answer_is_regex = body->constraint == RC_CONSTRAINT_REGEX;
            spec.answer_field = body->constraint_field;
        }
    } else if (rp->starts_in_tool_calls) /* the prompt opened the block (Hermes, DSML) */
        spec.start = rp->call_prefix ? GRAMMAR_TAGS_IN_ARGS : GRAMMAR_TAGS_AFTER_TRIGGER;
    else
        spec.start = GRAMMAR_TAGS_CALLS;
    grammar_tag *tags = calloc(n, sizeof *tags);
    char **begins = calloc(n, sizeof *begins);
    di_status st = DI_OK;
    if (!tags || !begins) {
        free(tags);
        free(begins);
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n && st == DI_OK; i++) {
        const struct rc_call_tool *ct = &body->call_tools[first + i];
        tags[i].begin = begins[i] = call_begin(format, invoke, ct->name);
        tags[i].end = end;
        tags[i].schema = ct->schema;
        tags[i].schema_len = ct->schema ? strlen(ct->schema) : 0;
        tags[i].field = ct->field;
        if (!tags[i].begin) st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    }
    spec.tags = tags;
    spec.n_tags = n;
    if (st == DI_OK) {
        char msg[512];
        st = grammar_compile_tags(&spec, out, msg, sizeof msg);
        if (st != DI_OK) st = di_error_set(err, st, msg);
    }
    for (size_t i = 0; i < n; i++) free(begins[i]);
    free(begins);
    free(tags);
    return st;
}

/* What the stream parser's files share (not for the rest of the library, which
 * reads the parser through recipe/stream.h): the parser object, the literals it
 * matches, and the helpers one syntax's file calls in another's.
 *
 *   stream_parser.c         the entry points, held text, pieces
 *   stream_parser_text.c    reasoning and answer text: </think>, the tool-call
 *                           opener, stop sequences, leading newlines
 *   stream_parser_json.c    JSON output mode (docs/stream-spec.md §7)
 *   stream_parser_dsml.c    V4's DSML tool calls (§5)
 *   stream_parser_v3.c      the V3 / V3.1 / R1 tool-call tokens
 *   stream_parser_hermes.c  ChatML's Hermes-style tool calls
 *
 * None of it is thread-safe: a parser belongs to one stream. */
#ifndef DI_RECIPE_STREAM_PARSER_IMPL_H
#define DI_RECIPE_STREAM_PARSER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "recipe/stream.h"

typedef enum pstate { P_REASONING, P_CONTENT, P_TOOLS, P_DONE } pstate;

/* Positions inside the DSML tool-call region (docs/stream-spec.md §5.2). */
typedef enum tstate {
    T_SKIP,        /* the rest of a tag, up to '>' (not checked); then `after` */
    T_REGION,      /* between invokes: junk until a tag */
    T_NAME_QUOTE,  /* invoke name= : the opening quote */
    T_NAME,        /* inside invoke name="… */
    T_INVOKE,      /* inside an invoke: junk until a tag */
    T_KEY,         /* the key, copied raw from its opening quote up to a space */
    T_STRING_ATTR, /* spaces, then string="true|false"> */
    T_VALUE,       /* the value, up to "</｜DSML｜" */
} tstate;

/* JSON output mode phases (§7). */
typedef enum jphase { J_PREFIX, J_PAYLOAD, J_SUFFIX } jphase;

#define DSML      "｜DSML｜"
#define OPENER    "<" DSML
#define CLOSER    "</" DSML
#define THINK_END "</think>"
/* the V3 / V3.1 / R1 tool-call tokens (their chat templates) */
#define V3_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define V3_CALLS_END   "<｜tool▁calls▁end｜>"
#define V3_CALL_BEGIN  "<｜tool▁call▁begin｜>"
#define V3_CALL_END    "<｜tool▁call▁end｜>"
#define V3_SEP         "<｜tool▁sep｜>"
#define EOS            "<｜end▁of▁sentence｜>"
/* ChatML's Hermes-style tool calls */
#define H_CALL_BEGIN "<tool_call>"
#define H_CALL_END   "</tool_call>"

/* Positions in a V3 tool-call block. */
typedef enum vstate {
    V_REGION,     /* between calls */
    V_HEAD,       /* after <｜tool▁call▁begin｜>: "function" (V3, R1) or the name (V3.1) */
    V_NAME,       /* V3: the name, up to the newline */
    V_FENCE,      /* V3: ```json\n */
    V_ARGS,       /* the arguments JSON, up to the terminator */
    V_AFTER_ARGS, /* V3: after the closing fence, up to <｜tool▁call▁end｜> */
} vstate;

/* An empty push held among the undecided text: its offset into the held bytes
 * and its push number. */
struct empty_push {
    size_t at;
    uint32_t push;
};

struct rc_parser {
    const rc_reply *reply;
    pstate state;
    int strip_newlines; /* drop leading '\n' of the next channel text */
    int strip_consume;  /* after </think>: leading '\n's are dropped before any matching */
    int started;        /* a non-empty piece was emitted */
    int barrier;        /* the next piece must not merge with the previous one */
    /* the undecided input */
    rc_buf buf;
    uint32_t *push_of; /* push number of each byte of buf */
    size_t push_cap;
    uint32_t push;
    /* tool calls */
    tstate t, after; /* after: where T_SKIP goes */
    int n_calls;
    int n_params;      /* of the current call */
    int string_value;  /* the current value is a JSON string */
    int quote_pending; /* its opening '"' waits: the value so far may be a closing tag */
    int reasoning_emitted;
    int first_tag;      /* the region's opening tag is next */
    uint32_t atomic[8]; /* recent pushes that are an added token's text */
    size_t n_atomic;
    vstate v;          /* V3 tool-call tokens */
    int v_fenced;      /* the V3 form: arguments end at "\n```" */
    int leading_think; /* R1: a leading "<think>" is still possible */
    int h_body;        /* Hermes: inside a call's JSON, up to </tool_call> (else between calls) */
    int h_prompt_open; /* Hermes: the prompt wrote the open block's <tool_call> */
    size_t h_scanned;  /* Hermes: bytes of the open block searched for </tool_call> already */
    int h_done;        /* Hermes: text that is no call followed the calls: the output is over */
    /* JSON output mode */
    jphase jphase;
    int jhad_text;               /* a push of this phase had prefix/suffix text */
    uint32_t jspace_push;        /* the push that got this phase's last " " */
    int jbracket;                /* a bare payload's bracket is still jbuf[0] */
    int jpay_text;               /* payload text (not a bare bracket) has been emitted */
    struct empty_push *jempties; /* empty pushes among the JSON stage's held text */
    size_t n_jempties, cap_jempties;
    rc_buf jbuf; /* the JSON stage's undecided answer text */
    uint32_t *jpush;
    size_t jcap;
    struct empty_push *empties; /* empty pushes not yet emitted */
    size_t n_empties, cap_empties;
    int stripped_nl; /* a leading '\n' was stripped: held empty pushes are dropped */
    const char *stop;
    /* the end of the text released since the last marker: the matchers go on
     * from it (a '\n' that breaks a partial match begun there starts no run) */
    char ctx[16];
    size_t ctx_len;
};

/* ---- held text and pieces (stream_parser.c) ---- */

/* Append text of class cls from push `push` (call: the tool call's index, or -1),
 * merging with the last piece when it has the same class, push and call and no
 * barrier lies between them. Returns the piece, or NULL (out->oom set) when
 * memory runs out. */
rc_piece *sp_add_piece(rc_parser *p, rc_pieces *out, rc_piece_class cls, uint32_t push, int call,
                       const char *s, size_t n);

/* Both stages (the parser's buffer and the JSON stage's) hold undecided text the
 * same way: the bytes (text), the push number of each byte (pushes, capacity
 * *cap) and the empty pushes among them (their offsets into text). */

/* Append s[0, n) from push `push`; -1 when memory runs out. */
int sp_held_add(rc_buf *text, uint32_t **pushes, size_t *cap, uint32_t push, const char *s,
                size_t n);
/* Drop the first n held bytes; the empty pushes' offsets move with the text. */
void sp_held_consume(rc_buf *text, uint32_t *pushes, struct empty_push *empties, size_t n_empties,
                     size_t n);
/* Room for one more empty push; -1 when memory runs out. */
int sp_held_reserve_empty(struct empty_push **empties, size_t n_empties, size_t *cap);
/* Drop the first n bytes of the parser's buffer. */
void sp_consume(rc_parser *p, size_t n);
/* The parser's output is over: the rest of the input is dropped. */
void sp_stop_parsing(rc_parser *p);
/* The offset of the first byte c in the buffer; (size_t)-1 when there is none. */
size_t sp_span(const rc_parser *p, char c);

/* The first occurrence of lit in s[0, n); NULL when there is none. */
const char *sp_find(const char *s, size_t n, const char *lit);
/* Does s[0, n) end with a non-empty proper prefix of lit? */
int sp_ends_with_prefix_of(const char *s, size_t n, const char *lit);

/* ---- reasoning and answer text (stream_parser_text.c) ---- */

/* Split the buffer's reasoning or answer text at the markers that end it, until
 * the state changes or the text left is undecided (final: nothing is). */
void sp_text_process(rc_parser *p, rc_pieces *out, int final);
/* Held empty pushes at buffer offsets <= at become empty pieces of class cls,
 * once the leading newlines are behind. */
void sp_emit_empties(rc_parser *p, rc_pieces *out, rc_piece_class cls, size_t at, int text_follows);

/* ---- JSON output mode (stream_parser_json.c) ---- */

/* JSON output mode: where the buffer's answer text falls in the JSON stage's
 * phases (the JSON stage's own held text comes first). [0, b0) is prefix text,
 * [b0, p0) the fence or the bare bracket, [p0, e1) payload text with its
 * terminating "\n```" (when found), [e1, n) suffix text; offsets are n when the
 * boundary is not in the buffer. Without JSON mode everything is "prefix". */
typedef struct jregions {
    size_t b0, p0, e1;
    int payload_end_seen; /* e1 is a real boundary (the terminator is complete) */
} jregions;

jregions sp_json_regions(const rc_parser *p);
/* Answer text of one push, into the JSON stage. */
void sp_json_feed(rc_parser *p, rc_pieces *out, uint32_t push, const char *s, size_t n);
/* Decide what the JSON stage holds (final: all of it). */
void sp_json_run(rc_parser *p, rc_pieces *out, int final);
/* Decide the JSON stage's held possible fence or terminator once the text the
 * parser holds after it shows it is none. */
void sp_json_settle_fence(rc_parser *p, rc_pieces *out);

/* ---- the tool-call regions: one syntax each ---- */

/* Read the buffer's tool-call text while the parser is in P_TOOLS. */
void sp_dsml_process(rc_parser *p, rc_pieces *out);   /* stream_parser_dsml.c */
void sp_v3_process(rc_parser *p, rc_pieces *out);     /* stream_parser_v3.c */
void sp_hermes_process(rc_parser *p, rc_pieces *out); /* stream_parser_hermes.c */
/* At the finish: a DSML value the output ended inside is value text; a Hermes
 * block the output ended inside is a call (cut short) when it names one. */
void sp_dsml_finish(rc_parser *p, rc_pieces *out);
void sp_hermes_finish(rc_parser *p, rc_pieces *out);

#endif

/* The protocol writers' shared helpers (writer.c) and their entry points
 * (writer_chat.c, writer_messages.c, writer_responses.c). */
#ifndef DI_RECIPE_WRITER_H
#define DI_RECIPE_WRITER_H

#include "recipe/stream.h"

/* A JSON string, or null for NULL. */
void rc_json_str0(rc_buf *b, const char *s);
void rc_json_u64(rc_buf *b, uint64_t v);
void rc_json_i64(rc_buf *b, int64_t v);
/* Append a chunk, taking json's string (NULL json: the SSE "data: [DONE]"). */
void rc_emit(rc_chunks *out, const char *event, rc_buf *json);
int64_t rc_now(void);
void rc_seed(rc_writer *w, uint64_t seed);
/* A tool-call id as the reference forms them: "call_" + 2-digit index + "_" + random. */
void rc_call_id(rc_writer *w, int index, char *dst, size_t cap);
/* `prefix` followed by 24 random lowercase letters and digits. */
void rc_random_id(rc_writer *w, const char *prefix, char *dst, size_t cap);

int rc_chat_start(rc_writer *w, rc_chunks *out);
int rc_chat_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out);
int rc_chat_finish(rc_writer *w, rc_finish reason, rc_chunks *out);
int rc_messages_start(rc_writer *w, rc_chunks *out);
int rc_messages_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out);
int rc_messages_finish(rc_writer *w, rc_finish reason, rc_chunks *out);
int rc_responses_start(rc_writer *w, rc_chunks *out);
int rc_responses_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out);
int rc_responses_finish(rc_writer *w, rc_finish reason, rc_chunks *out);

#endif

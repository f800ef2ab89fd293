/* The conversation's memory and the small string builder: see conversation.h. */
#include "recipe/conversation.h"

#include <stdlib.h>
#include <string.h>

void rc_buf_add(rc_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    if (!b->s) return;
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void rc_buf_adds(rc_buf *b, const char *s)
{
    rc_buf_add(b, s, strlen(s));
}

char *rc_buf_take(rc_buf *b)
{
    if (b->oom) {
        free(b->s);
        b->s = NULL;
        return NULL;
    }
    if (!b->s) rc_buf_add(b, "", 0);
    char *s = b->s;
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void rc_tool_clear(rc_tool *t)
{
    free(t->name);
    free(t->description);
    json_decref(t->parameters);
    memset(t, 0, sizeof *t);
}

static void message_clear(rc_message *m)
{
    free(m->content);
    free(m->reasoning);
    for (size_t i = 0; i < m->n_calls; i++) {
        free(m->calls[i].id);
        free(m->calls[i].name);
        free(m->calls[i].arguments);
    }
    free(m->calls);
    free(m->tool_call_id);
    for (size_t i = 0; i < m->n_updated; i++) rc_tool_clear(&m->updated_tools[i]);
    free(m->updated_tools);
}

void rc_conversation_free(rc_conversation *c)
{
    for (size_t i = 0; i < c->n_messages; i++) message_clear(&c->messages[i]);
    free(c->messages);
    for (size_t i = 0; i < c->n_tools; i++) rc_tool_clear(&c->tools[i]);
    free(c->tools);
    json_decref(c->schema);
    for (size_t i = 0; i < c->n_stops; i++) free(c->stops[i]);
    free(c->stops);
    for (size_t i = 0; i < c->n_images; i++) free(c->images[i]);
    free(c->images);
    memset(c, 0, sizeof *c);
}

static int add_string(char ***list, size_t *n, const char *s)
{
    char **grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (!grown) return -1;
    *list = grown;
    size_t len = strlen(s) + 1;
    char *copy = malloc(len);
    if (!copy) return -1;
    memcpy(copy, s, len);
    grown[(*n)++] = copy;
    return 0;
}

int rc_add_stop(rc_conversation *c, const char *s)
{
    return add_string(&c->stops, &c->n_stops, s);
}

int rc_add_image(rc_conversation *c, const char *url)
{
    return add_string(&c->images, &c->n_images, url);
}

rc_message *rc_add_message(rc_conversation *c, rc_role role)
{
    if (c->n_messages == c->cap_messages) {
        size_t cap = c->cap_messages ? c->cap_messages * 2 : 8;
        rc_message *m = realloc(c->messages, cap * sizeof *m);
        if (!m) return NULL;
        c->messages = m;
        c->cap_messages = cap;
    }
    rc_message *m = &c->messages[c->n_messages++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

/* json_dupkey.c - see json_dupkey.h. An iterative JSON reader that keeps, for each object open,
 * the decoded names of its members in a hash set; a frame stack stands in for recursion. */
#include "json_dupkey.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct keyref {
    size_t off, len; /* in the arena */
    uint32_t hash;
} keyref;

typedef struct frame {
    bool object;
    size_t index;      /* array: the element being read */
    size_t arena_mark; /* object: the arena's length before its names */
    keyref *keys;
    size_t nkeys, capkeys;
    uint32_t *slots; /* 1 + index into keys; 0 empty */
    size_t nslots;
    keyref current; /* object: the member whose value is being read */
} frame;

typedef struct reader {
    const char *text;
    size_t len, pos;
    char *arena;
    size_t arena_len, arena_cap;
    frame *frames;
    size_t depth, cap_frames;
} reader;

enum { DUP_NONE = 0, DUP_FOUND = 1, DUP_BAD = -1, DUP_NOMEM = -2 };

static void skip_ws(reader *r)
{
    while (r->pos < r->len) {
        char c = r->text[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        r->pos++;
    }
}

static int arena_put(reader *r, const char *bytes, size_t n)
{
    if (!r->arena || r->arena_len + n > r->arena_cap) { /* (an empty first name too) */
        size_t cap = r->arena_cap ? r->arena_cap : 256;
        while (cap < r->arena_len + n)
            cap *= 2;
        char *a = realloc(r->arena, cap);
        if (!a)
            return DUP_NOMEM;
        r->arena = a;
        r->arena_cap = cap;
    }
    memcpy(r->arena + r->arena_len, bytes, n);
    r->arena_len += n;
    return DUP_NONE;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return DUP_BAD;
    }
    *out = v;
    return DUP_NONE;
}

static int put_utf8(reader *r, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return arena_put(r, b, n);
}

/* A string at r->pos (its opening quote); decoded into the arena when `keep`. */
static int read_string(reader *r, bool keep)
{
    r->pos++; /* the quote */
    for (;;) {
        size_t run = r->pos;
        while (r->pos < r->len && r->text[r->pos] != '"' && r->text[r->pos] != '\\') {
            if ((unsigned char)r->text[r->pos] < 0x20)
                return DUP_BAD;
            r->pos++;
        }
        if (r->pos >= r->len)
            return DUP_BAD;
        if (keep && r->pos > run) {
            int rc = arena_put(r, r->text + run, r->pos - run);
            if (rc)
                return rc;
        }
        if (r->text[r->pos] == '"') {
            r->pos++;
            return DUP_NONE;
        }
        /* An escape. */
        if (r->pos + 1 >= r->len)
            return DUP_BAD;
        char e = r->text[r->pos + 1];
        r->pos += 2;
        if (e == 'u') {
            unsigned cp;
            if (r->pos + 4 > r->len || hex4(r->text + r->pos, &cp))
                return DUP_BAD;
            r->pos += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return DUP_BAD; /* a low surrogate alone */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (r->pos + 6 > r->len || r->text[r->pos] != '\\' || r->text[r->pos + 1] != 'u' ||
                    hex4(r->text + r->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return DUP_BAD;
                r->pos += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (keep) {
                int rc = put_utf8(r, cp);
                if (rc)
                    return rc;
            }
            continue;
        }
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *hit = memchr(from, e, sizeof from - 1);
        if (!hit)
            return DUP_BAD;
        if (keep) {
            int rc = arena_put(r, &to[hit - from], 1);
            if (rc)
                return rc;
        }
    }
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int read_number(reader *r)
{
    const char *t = r->text;
    if (r->pos < r->len && t[r->pos] == '-')
        r->pos++;
    if (r->pos >= r->len || !is_digit(t[r->pos]))
        return DUP_BAD;
    if (t[r->pos] == '0')
        r->pos++;
    else
        while (r->pos < r->len && is_digit(t[r->pos]))
            r->pos++;
    if (r->pos < r->len && t[r->pos] == '.') {
        r->pos++;
        if (r->pos >= r->len || !is_digit(t[r->pos]))
            return DUP_BAD;
        while (r->pos < r->len && is_digit(t[r->pos]))
            r->pos++;
    }
    if (r->pos < r->len && (t[r->pos] == 'e' || t[r->pos] == 'E')) {
        r->pos++;
        if (r->pos < r->len && (t[r->pos] == '+' || t[r->pos] == '-'))
            r->pos++;
        if (r->pos >= r->len || !is_digit(t[r->pos]))
            return DUP_BAD;
        while (r->pos < r->len && is_digit(t[r->pos]))
            r->pos++;
    }
    return DUP_NONE;
}

static int read_literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if (r->len - r->pos < n || memcmp(r->text + r->pos, word, n) != 0)
        return DUP_BAD;
    r->pos += n;
    return DUP_NONE;
}

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static void frame_free(frame *f)
{
    free(f->keys);
    free(f->slots);
    *f = (frame){0};
}

static int push(reader *r, bool object)
{
    if (r->depth == r->cap_frames) {
        size_t cap = r->cap_frames ? r->cap_frames * 2 : 16;
        frame *f = realloc(r->frames, cap * sizeof *f);
        if (!f)
            return DUP_NOMEM;
        r->frames = f;
        r->cap_frames = cap;
    }
    r->frames[r->depth++] = (frame){.object = object, .arena_mark = r->arena_len};
    return DUP_NONE;
}

static void pop(reader *r)
{
    frame *f = &r->frames[--r->depth];
    r->arena_len = f->arena_mark;
    frame_free(f);
}

/* Adds the name just decoded (arena[off, arena_len)) to the object's set; DUP_FOUND when it is
 * there already. */
static int add_name(frame *f, const char *arena, size_t off, size_t len)
{
    uint32_t h = hash_bytes(arena + off, len);
    if (2 * (f->nkeys + 1) > f->nslots) {
        size_t n = f->nslots ? f->nslots * 2 : 16;
        uint32_t *s = calloc(n, sizeof *s);
        if (!s)
            return DUP_NOMEM;
        for (size_t i = 0; i < f->nkeys; i++) {
            size_t j = f->keys[i].hash & (n - 1);
            while (s[j])
                j = (j + 1) & (n - 1);
            s[j] = (uint32_t)(i + 1);
        }
        free(f->slots);
        f->slots = s;
        f->nslots = n;
    }
    size_t j = h & (f->nslots - 1);
    while (f->slots[j]) {
        const keyref *k = &f->keys[f->slots[j] - 1];
        if (k->hash == h && k->len == len && memcmp(arena + k->off, arena + off, len) == 0)
            return DUP_FOUND;
        j = (j + 1) & (f->nslots - 1);
    }
    if (f->nkeys == f->capkeys) {
        size_t cap = f->capkeys ? f->capkeys * 2 : 8;
        keyref *k = realloc(f->keys, cap * sizeof *k);
        if (!k)
            return DUP_NOMEM;
        f->keys = k;
        f->capkeys = cap;
    }
    f->keys[f->nkeys] = (keyref){off, len, h};
    f->slots[j] = (uint32_t)(++f->nkeys);
    return DUP_NONE;
}

/* ---- the path of a repeated name ------------------------------------------------------------ */

typedef struct out {
    char *buf;
    size_t cap, n;
} out;

static void out_put(out *o, const char *s, size_t n)
{
    if (o->cap == 0)
        return;
    size_t room = o->cap - 1 - o->n;
    if (n > room)
        n = room;
    memcpy(o->buf + o->n, s, n);
    o->n += n;
    o->buf[o->n] = '\0';
}

static void out_name(out *o, const char *s, size_t n, bool first)
{
    bool plain = n > 0;
    for (size_t i = 0; i < n && plain; i++)
        plain = s[i] != '.' && s[i] != '[' && s[i] != ']' && s[i] != '"' && s[i] != '\\' &&
                (unsigned char)s[i] >= 0x20;
    if (plain) {
        if (!first)
            out_put(o, ".", 1);
        out_put(o, s, n);
        return;
    }
    out_put(o, "[\"", 2);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            out_put(o, esc, 2);
        } else if (c < 0x20) {
            static const char hexd[] = "0123456789abcdef";
            char esc[6] = {'\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15]};
            out_put(o, esc, 6);
        } else {
            out_put(o, (const char *)&s[i], 1);
        }
    }
    out_put(o, "\"]", 2);
}

static void write_path(const reader *r, size_t name_off, size_t name_len, char *where, size_t cap)
{
    out o = {where, cap, 0};
    if (cap)
        where[0] = '\0';
    bool first = true;
    /* Every frame but the innermost (the object that repeats the name) led into the next one. */
    for (size_t i = 0; i + 1 < r->depth; i++) {
        const frame *f = &r->frames[i];
        if (f->object) {
            out_name(&o, r->arena + f->current.off, f->current.len, first);
        } else {
            char idx[32];
            size_t n = 0;
            size_t v = f->index;
            char rev[24];
            do {
                rev[n++] = (char)('0' + v % 10);
                v /= 10;
            } while (v && n < sizeof rev);
            idx[0] = '[';
            for (size_t k = 0; k < n; k++)
                idx[1 + k] = rev[n - 1 - k];
            idx[1 + n] = ']';
            out_put(&o, idx, n + 2);
        }
        first = false;
    }
    out_name(&o, r->arena + name_off, name_len, first);
}

/* ---- the reader ----------------------------------------------------------------------------- */

/* A member name at r->pos, into the innermost object's set; then its ':'. */
static int read_member_name(reader *r, char *where, size_t cap)
{
    if (r->pos >= r->len || r->text[r->pos] != '"')
        return DUP_BAD;
    size_t off = r->arena_len;
    int rc = arena_put(r, "", 0); /* the arena exists, even for an empty name */
    if (rc)
        return rc;
    rc = read_string(r, true);
    if (rc)
        return rc;
    frame *f = &r->frames[r->depth - 1];
    size_t len = r->arena_len - off;
    rc = add_name(f, r->arena, off, len);
    if (rc == DUP_FOUND) {
        write_path(r, off, len, where, cap);
        return rc;
    }
    if (rc)
        return rc;
    f->current = f->keys[f->nkeys - 1];
    skip_ws(r);
    if (r->pos >= r->len || r->text[r->pos] != ':')
        return DUP_BAD;
    r->pos++;
    return DUP_NONE;
}

static int run(reader *r, char *where, size_t cap)
{
    int rc;
    for (;;) {
        /* A value. */
        skip_ws(r);
        if (r->pos >= r->len)
            return DUP_BAD;
        char c = r->text[r->pos];
        if (c == '{' || c == '[') {
            r->pos++;
            if ((rc = push(r, c == '{')))
                return rc;
            skip_ws(r);
            char close = c == '{' ? '}' : ']';
            if (r->pos < r->len && r->text[r->pos] == close) {
                r->pos++;
                pop(r);
            } else {
                if (c == '{' && (rc = read_member_name(r, where, cap)))
                    return rc;
                continue; /* its first value */
            }
        } else if (c == '"') {
            if ((rc = read_string(r, false)))
                return rc;
        } else if (c == 't' || c == 'f' || c == 'n') {
            if ((rc = read_literal(r, c == 't' ? "true" : c == 'f' ? "false" : "null")))
                return rc;
        } else if ((rc = read_number(r))) {
            return rc;
        }
        /* After a value: the next one of the innermost container, or its end. */
        for (;;) {
            skip_ws(r);
            if (r->depth == 0)
                return r->pos == r->len ? DUP_NONE : DUP_BAD;
            if (r->pos >= r->len)
                return DUP_BAD;
            frame *f = &r->frames[r->depth - 1];
            char d = r->text[r->pos++];
            if (d == ',') {
                if (f->object) {
                    skip_ws(r);
                    if ((rc = read_member_name(r, where, cap)))
                        return rc;
                } else {
                    f->index++;
                }
                break; /* the next value */
            }
            if (d != (f->object ? '}' : ']'))
                return DUP_BAD;
            pop(r);
        }
    }
}

int json_dupkey(const char *text, size_t len, char *where, size_t cap)
{
    if (cap)
        where[0] = '\0';
    reader r = {.text = text, .len = len};
    int rc = run(&r, where, cap);
    while (r.depth)
        frame_free(&r.frames[--r.depth]);
    free(r.frames);
    free(r.arena);
    if (rc != DUP_FOUND && cap)
        where[0] = '\0';
    return rc;
}

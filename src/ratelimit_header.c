/* ratelimit_header.c - RateLimit / X-RateLimit-* answer headers (see the header's contract).
 *
 * A small Structured Fields reader (RFC 8941: Lists and Dictionaries of bare items with
 * parameters; inner lists are not used by any form here and are refused) and the forms on top.
 * The X-RateLimit-* values are read with it too: their plain numbers are SF numbers, and it
 * gives the joined repeated fields ("50, 50") their list meaning for free.
 */
#include "ratelimit_header.h"

#include <math.h>
#include <string.h>

static const char R_MALFORMED[] = "malformed";
static const char R_CONTRADICTORY[] = "contradictory";
static const char R_ABSURD[] = "absurd";

/* ---- Structured Fields ---------------------------------------------------------------------- */

typedef enum sf_type { SF_INT, SF_DEC, SF_STR, SF_TOK, SF_BYTES, SF_BOOL } sf_type;

typedef struct sf_item {
    sf_type t;
    int64_t i;     /* SF_INT, SF_BOOL */
    double d;      /* SF_INT and SF_DEC: the number */
    const char *s; /* SF_STR (between the quotes, escapes kept), SF_TOK, SF_BYTES */
    size_t n;
} sf_item;

/* Parameters kept per member at most: more (distinct keys) is refused, so that nothing about
 * a hostile header grows without bound. No form here uses more than four. */
#define SF_PARAMS_MAX 8

typedef struct sf_param {
    const char *k;
    size_t kn;
    sf_item v;
} sf_param;

typedef struct sf_member {
    const char *key; /* Dictionary members: the key */
    size_t keyn;
    bool has_value; /* Dictionary members: "key=value" rather than a bare "key" (true) */
    sf_item item;
    size_t np;
    sf_param p[SF_PARAMS_MAX];
} sf_member;

typedef struct sf_cur {
    const char *p;
    bool done;
} sf_cur;

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool is_alpha(char c)
{
    return is_lcalpha(c) || (c >= 'A' && c <= 'Z');
}

static bool is_tchar(char c)
{
    return is_alpha(c) || is_digit(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void skip_ows(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* sf-integer / sf-decimal: at most 15 digits, or 12 before and 1-3 after the point. */
static bool sf_number(const char **pp, sf_item *it)
{
    const char *p = *pp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    if (!is_digit(*p))
        return false;
    int64_t v = 0;
    int digits = 0;
    while (is_digit(*p)) {
        if (++digits > 15)
            return false;
        v = v * 10 + (*p++ - '0');
    }
    if (*p == '.') {
        if (digits > 12)
            return false;
        p++;
        int64_t frac = 0, scale = 1;
        int fd = 0;
        while (is_digit(*p)) {
            if (++fd > 3)
                return false;
            frac = frac * 10 + (*p++ - '0');
            scale *= 10;
        }
        if (fd == 0)
            return false;
        it->t = SF_DEC;
        it->d = ((double)v + (double)frac / (double)scale) * (neg ? -1 : 1);
    } else {
        it->t = SF_INT;
        it->i = neg ? -v : v;
        it->d = (double)it->i;
    }
    *pp = p;
    return true;
}

static bool sf_bare_item(const char **pp, sf_item *it)
{
    const char *p = *pp;
    memset(it, 0, sizeof *it);
    if (*p == '-' || is_digit(*p))
        return sf_number(pp, it);
    if (*p == '"') {
        it->t = SF_STR;
        it->s = ++p;
        for (;;) {
            char c = *p;
            if (c == '"')
                break;
            if (c == '\\') {
                if (p[1] != '"' && p[1] != '\\')
                    return false;
                p += 2;
                continue;
            }
            if (c < 0x20 || c > 0x7e) /* NUL (the end) included */
                return false;
            p++;
        }
        it->n = (size_t)(p - it->s);
        *pp = p + 1;
        return true;
    }
    if (is_alpha(*p) || *p == '*') {
        it->t = SF_TOK;
        it->s = p;
        while (is_tchar(*p) || *p == ':' || *p == '/')
            p++;
        it->n = (size_t)(p - it->s);
        *pp = p;
        return true;
    }
    if (*p == ':') {
        it->t = SF_BYTES;
        it->s = ++p;
        while (is_alpha(*p) || is_digit(*p) || *p == '+' || *p == '/' || *p == '=')
            p++;
        if (*p != ':')
            return false;
        it->n = (size_t)(p - it->s);
        *pp = p + 1;
        return true;
    }
    if (*p == '?' && (p[1] == '0' || p[1] == '1')) {
        it->t = SF_BOOL;
        it->i = p[1] == '1';
        *pp = p + 2;
        return true;
    }
    return false;
}

static bool sf_key(const char **pp, const char **k, size_t *kn)
{
    const char *p = *pp;
    if (!is_lcalpha(*p) && *p != '*')
        return false;
    *k = p++;
    while (is_lcalpha(*p) || is_digit(*p) || *p == '_' || *p == '-' || *p == '.' || *p == '*')
        p++;
    *kn = (size_t)(p - *k);
    *pp = p;
    return true;
}

static bool key_is(const char *k, size_t kn, const char *want)
{
    return strlen(want) == kn && memcmp(k, want, kn) == 0;
}

static bool sf_params(const char **pp, sf_member *m)
{
    const char *p = *pp;
    while (*p == ';') {
        p++;
        while (*p == ' ')
            p++;
        sf_param np = {0};
        if (!sf_key(&p, &np.k, &np.kn))
            return false;
        if (*p == '=') {
            p++;
            if (!sf_bare_item(&p, &np.v))
                return false;
        } else {
            np.v.t = SF_BOOL;
            np.v.i = 1;
        }
        /* A repeated key: the last one wins (RFC 8941 §4.2.3.2). */
        size_t j = 0;
        while (j < m->np && !(m->p[j].kn == np.kn && memcmp(m->p[j].k, np.k, np.kn) == 0))
            j++;
        if (j == m->np) {
            if (m->np == SF_PARAMS_MAX)
                return false;
            m->np++;
        }
        m->p[j] = np;
    }
    *pp = p;
    return true;
}

/* Starts reading a List or Dictionary field value; an empty value is malformed (the fields
 * here are never empty when sent). */
static bool sf_begin(sf_cur *c, const char *v)
{
    c->p = v;
    c->done = false;
    skip_ows(&c->p);
    return *c->p != '\0';
}

/* Reads the next member into *m: 1, 0 at the end, -1 malformed. */
static int sf_next(sf_cur *c, bool dict, sf_member *m)
{
    if (c->done)
        return 0;
    memset(m, 0, sizeof *m);
    const char *p = c->p;
    if (dict) {
        if (!sf_key(&p, &m->key, &m->keyn))
            return -1;
        if (*p == '=') {
            p++;
            m->has_value = true;
            if (!sf_bare_item(&p, &m->item)) /* inner lists included: refused */
                return -1;
        } else {
            m->item.t = SF_BOOL;
            m->item.i = 1;
        }
    } else if (!sf_bare_item(&p, &m->item)) {
        return -1;
    }
    if (!sf_params(&p, m))
        return -1;
    skip_ows(&p);
    if (*p == '\0') {
        c->done = true;
    } else {
        if (*p != ',')
            return -1;
        p++;
        skip_ows(&p);
        if (*p == '\0') /* a trailing comma */
            return -1;
    }
    c->p = p;
    return 1;
}

static const sf_item *param(const sf_member *m, const char *key)
{
    for (size_t i = 0; i < m->np; i++)
        if (key_is(m->p[i].k, m->p[i].kn, key))
            return &m->p[i].v;
    return NULL;
}

/* Next character of a string or token item's content (escapes undone); false at its end. */
static bool name_char(const sf_item *it, size_t *i, char *c)
{
    if (*i >= it->n)
        return false;
    if (it->t == SF_STR && it->s[*i] == '\\')
        (*i)++;
    *c = it->s[(*i)++];
    return true;
}

/* Policy names compare by content: "default" and default are the same policy. */
static bool name_eq(const sf_item *a, const sf_item *b)
{
    size_t i = 0, j = 0;
    char x = 0, y = 0;
    for (;;) {
        bool ma = name_char(a, &i, &x), mb = name_char(b, &j, &y);
        if (ma != mb)
            return false;
        if (!ma)
            return true;
        if (x != y)
            return false;
    }
}

static bool is_name(const sf_item *it)
{
    return it->t == SF_STR || it->t == SF_TOK;
}

/* ---- values --------------------------------------------------------------------------------- */

/* A count (limit, quota, remaining): an integer; negative is absurd. */
static const char *count_of(const sf_item *it, double *v)
{
    if (it->t != SF_INT)
        return R_MALFORMED;
    if (it->i < 0)
        return R_ABSURD;
    *v = (double)it->i;
    return NULL;
}

static const char *limit_of(const sf_item *it, double *v)
{
    const char *why = count_of(it, v);
    if (!why && *v < 1)
        return R_ABSURD; /* a limit of 0 would be a stall without end */
    return why;
}

static const char *window_of(const sf_item *it, double *w)
{
    if (it->t != SF_INT)
        return R_MALFORMED;
    if (it->i <= 0 || (double)it->i > RL_WINDOW_MAX_S)
        return R_ABSURD;
    *w = (double)it->i;
    return NULL;
}

/* A reset value into seconds from now (the epoch rule of the contract); unclamped. */
static const char *reset_of(const sf_item *it, bool decimals, double now, double *s)
{
    if (it->t != SF_INT && !(decimals && it->t == SF_DEC))
        return R_MALFORMED;
    double v = it->d;
    if (v < 0)
        return R_ABSURD;
    if (v >= RL_EPOCH_MIN) {
        double d = v - now;
        if (!(fabs(d) <= RL_EPOCH_SLACK_S)) /* NaN too */
            return R_ABSURD;
        v = d < 0 ? 0 : d;
    }
    *s = v;
    return NULL;
}

/* A field that holds one number, possibly repeated by joined lines ("50, 50"). */
static const char *single(const char *v, bool decimals, sf_item *out)
{
    sf_cur c;
    sf_member m;
    int rc;
    bool first = true;
    if (!sf_begin(&c, v))
        return R_MALFORMED;
    while ((rc = sf_next(&c, false, &m)) > 0) {
        if (m.np || (m.item.t != SF_INT && !(decimals && m.item.t == SF_DEC)))
            return R_MALFORMED;
        if (first)
            *out = m.item;
        else if (m.item.d != out->d)
            return R_CONTRADICTORY;
        first = false;
    }
    return rc < 0 ? R_MALFORMED : NULL;
}

/* ---- what one form says --------------------------------------------------------------------- */

static void add_window(rl_announce *a, double limit, double window_s)
{
    double rate = limit / window_s;
    size_t n = a->n_windows;
    if (n == RL_WINDOWS_MAX) {
        if (rate >= a->windows[n - 1].limit / a->windows[n - 1].window_s)
            return; /* looser than every kept one */
        n--;
    }
    size_t i = n;
    while (i > 0 && a->windows[i - 1].limit / a->windows[i - 1].window_s > rate) {
        a->windows[i] = a->windows[i - 1];
        i--;
    }
    a->windows[i] = (rl_window){limit, window_s};
    a->n_windows = n + 1;
}

/* Integer quota policies ("100;w=60, 5000;w=86400"): RateLimit-Policy of drafts 05-07, the
 * policies after the limit in RateLimit-Limit of drafts up to 04. If want_limit > 0, *w_of gets
 * the window of the policy whose quota is that limit (0 when none says). */
static const char *int_policy(sf_member *m, double want_limit, rl_announce *a, double *w_of)
{
    double q, w;
    const char *why = limit_of(&m->item, &q);
    if (why)
        return why;
    const sf_item *wi = param(m, "w");
    if (!wi)
        return NULL; /* a quota without a window: no rate to learn */
    if ((why = window_of(wi, &w)))
        return why;
    add_window(a, q, w);
    if (q == want_limit && *w_of == 0)
        *w_of = w;
    return NULL;
}

/* RateLimit-Policy of drafts 05-07 with the limit it describes (0: none). */
static const char *form_int_policy(const char *v, double limit, rl_announce *a, double *w_of)
{
    sf_cur c;
    sf_member m;
    int rc;
    if (!sf_begin(&c, v))
        return R_MALFORMED;
    while ((rc = sf_next(&c, false, &m)) > 0) {
        const char *why = int_policy(&m, limit, a, w_of);
        if (why)
            return why;
    }
    return rc < 0 ? R_MALFORMED : NULL;
}

/* RateLimit-Limit / X-RateLimit-Limit: the limit, then optional policies ("100, 100;w=60"). */
static const char *limit_field(const char *v, rl_announce *a)
{
    sf_cur c;
    sf_member m;
    int rc;
    bool first = true;
    double w_of = 0;
    if (!sf_begin(&c, v))
        return R_MALFORMED;
    while ((rc = sf_next(&c, false, &m)) > 0) {
        if (first) {
            const char *why = limit_of(&m.item, &a->limit);
            if (why)
                return why;
            a->have_limit = true;
            first = false;
        }
        if (m.np == 0) {
            if (m.item.t != SF_INT)
                return R_MALFORMED;
            if (m.item.d != a->limit)
                return R_CONTRADICTORY; /* "100, 200": two limits for one window */
            continue;
        }
        const char *why = int_policy(&m, a->limit, a, &w_of);
        if (why)
            return why;
    }
    if (rc < 0)
        return R_MALFORMED;
    a->window_s = w_of;
    return NULL;
}

static const char *remaining_field(const char *v, rl_announce *a)
{
    sf_item it;
    double r;
    const char *why = single(v, false, &it);
    if (!why)
        why = count_of(&it, &r);
    if (why)
        return why;
    a->have_remaining = true;
    a->remaining = it.i;
    return NULL;
}

static const char *reset_field(const char *v, bool decimals, double now, rl_announce *a)
{
    sf_item it;
    const char *why = single(v, decimals, &it);
    if (!why)
        why = reset_of(&it, decimals, now, &a->reset_s);
    if (why)
        return why;
    a->have_reset = true;
    return NULL;
}

static const char *check_remaining(const rl_announce *a)
{
    if (a->have_limit && a->have_remaining && (double)a->remaining > a->limit)
        return R_CONTRADICTORY;
    return NULL;
}

/* Policies of the current form held at most while matching RateLimit items to them. */
#define RL_POLICIES_MAX 16

typedef struct ietf_policy {
    sf_item name;
    double q, w; /* w 0: not stated */
    bool applies;
} ietf_policy;

static const char *ietf_policies(const char *v, ietf_policy *pol, size_t *n)
{
    sf_cur c;
    sf_member m;
    int rc;
    *n = 0;
    if (!sf_begin(&c, v))
        return R_MALFORMED;
    while ((rc = sf_next(&c, false, &m)) > 0) {
        if (!is_name(&m.item) || *n == RL_POLICIES_MAX)
            return R_MALFORMED;
        ietf_policy *p = &pol[(*n)++];
        memset(p, 0, sizeof *p);
        p->name = m.item;
        const sf_item *q = param(&m, "q"), *w = param(&m, "w"), *qu = param(&m, "qu");
        if (!q)
            return R_MALFORMED;
        const char *why = limit_of(q, &p->q);
        if (!why && w)
            why = window_of(w, &p->w);
        if (why)
            return why;
        if (qu && qu->t != SF_STR && qu->t != SF_TOK)
            return R_MALFORMED;
        p->applies = !qu || (qu->n == 8 && memcmp(qu->s, "requests", 8) == 0);
    }
    return rc < 0 ? R_MALFORMED : NULL;
}

/* The current IETF form: RateLimit-Policy (string/token items, may be NULL) and RateLimit (a
 * List, may be NULL). */
static const char *form_ietf(const char *policy, const char *ratelimit, double now, rl_announce *a)
{
    ietf_policy pol[RL_POLICIES_MAX];
    size_t np = 0;
    const char *why;
    if (policy && (why = ietf_policies(policy, pol, &np)))
        return why;
    const ietf_policy *tight = NULL, *tight_nw = NULL;
    for (size_t i = 0; i < np; i++) {
        if (!pol[i].applies)
            continue;
        if (pol[i].w > 0) {
            add_window(a, pol[i].q, pol[i].w);
            if (!tight || pol[i].q / pol[i].w < tight->q / tight->w)
                tight = &pol[i];
        } else if (!tight_nw || pol[i].q < tight_nw->q) {
            tight_nw = &pol[i];
        }
    }
    if (tight || tight_nw) {
        a->have_limit = true;
        a->limit = tight ? tight->q : tight_nw->q;
        a->window_s = tight ? tight->w : 0;
    }
    if (!ratelimit)
        return NULL;
    sf_cur c;
    sf_member m;
    int rc;
    if (!sf_begin(&c, ratelimit))
        return R_MALFORMED;
    while ((rc = sf_next(&c, false, &m)) > 0) {
        if (!is_name(&m.item))
            return R_MALFORMED;
        const sf_item *ri = param(&m, "r"), *ti = param(&m, "t");
        double r, t = 0;
        if (!ri)
            return R_MALFORMED;
        if ((why = count_of(ri, &r)) || (ti && (why = reset_of(ti, false, now, &t))))
            return why;
        const ietf_policy *p = NULL;
        for (size_t i = 0; i < np && !p; i++)
            if (name_eq(&pol[i].name, &m.item))
                p = &pol[i];
        if (p && !p->applies)
            continue;
        if (p && r > p->q)
            return R_CONTRADICTORY;
        /* The most restrictive state: exhausted with the latest reset, else the fewest left. */
        bool take;
        if (!a->have_remaining)
            take = true;
        else if (r == 0 && a->remaining == 0)
            take = ti && (!a->have_reset || t > a->reset_s);
        else
            take = r < (double)a->remaining;
        if (take) {
            a->have_remaining = true;
            a->remaining = ri->i;
            a->have_reset = ti != NULL;
            a->reset_s = t;
        }
    }
    return rc < 0 ? R_MALFORMED : NULL;
}

/* RateLimit as a draft-07 Dictionary: true when it is one with limit=, remaining= or reset=. */
static bool is_dict07(const char *v)
{
    sf_cur c;
    sf_member m;
    int rc;
    bool named = false;
    if (!sf_begin(&c, v))
        return false;
    while ((rc = sf_next(&c, true, &m)) > 0)
        if (m.has_value && (key_is(m.key, m.keyn, "limit") || key_is(m.key, m.keyn, "remaining") ||
                            key_is(m.key, m.keyn, "reset")))
            named = true;
    return rc == 0 && named;
}

static const char *form_07(const char *ratelimit, const char *int_policy_v, double now,
                           rl_announce *a)
{
    sf_cur c;
    sf_member m;
    int rc;
    const char *why = NULL;
    if (!sf_begin(&c, ratelimit))
        return R_MALFORMED;
    while ((rc = sf_next(&c, true, &m)) > 0) {
        if (key_is(m.key, m.keyn, "limit")) {
            why = limit_of(&m.item, &a->limit);
            a->have_limit = true;
        } else if (key_is(m.key, m.keyn, "remaining")) {
            double r;
            why = count_of(&m.item, &r);
            a->have_remaining = true;
            a->remaining = m.item.i;
        } else if (key_is(m.key, m.keyn, "reset")) {
            why = reset_of(&m.item, false, now, &a->reset_s);
            a->have_reset = true;
        }
        if (why)
            return why;
    }
    if (rc < 0)
        return R_MALFORMED;
    double w_of = 0;
    if (int_policy_v &&
        (why = form_int_policy(int_policy_v, a->have_limit ? a->limit : 0, a, &w_of)))
        return why;
    a->window_s = w_of;
    return check_remaining(a);
}

/* RateLimit-Limit/-Remaining/-Reset (each may be NULL) with an integer RateLimit-Policy. */
static const char *form_early(const rl_raw *raw, const char *int_policy_v, double now,
                              rl_announce *a)
{
    const char *why;
    if (raw->limit && (why = limit_field(raw->limit, a)))
        return why;
    if (raw->remaining && (why = remaining_field(raw->remaining, a)))
        return why;
    if (raw->reset && (why = reset_field(raw->reset, false, now, a)))
        return why;
    if (int_policy_v) {
        double w_of = 0;
        if ((why = form_int_policy(int_policy_v, a->have_limit ? a->limit : 0, a, &w_of)))
            return why;
        if (!a->have_limit && a->n_windows > 0) {
            /* The policy alone: its tightest window is the limit. */
            a->have_limit = true;
            a->limit = a->windows[0].limit;
            a->window_s = a->windows[0].window_s;
        } else if (a->window_s == 0) {
            a->window_s = w_of;
        }
    }
    return check_remaining(a);
}

static const char *form_x(const rl_raw *raw, double now, rl_announce *a)
{
    const char *why;
    if (raw->x_limit && (why = limit_field(raw->x_limit, a)))
        return why;
    if (raw->x_remaining && (why = remaining_field(raw->x_remaining, a)))
        return why;
    rl_announce after = {0};
    if (raw->x_reset_after && (why = reset_field(raw->x_reset_after, true, now, &after)))
        return why;
    if (raw->x_reset && (why = reset_field(raw->x_reset, true, now, a)))
        return why;
    if (after.have_reset) {
        if (a->have_reset && fabs(a->reset_s - after.reset_s) > 1)
            return R_CONTRADICTORY;
        /* Reset-After is relative: no clock to disagree with, so it is the better one. */
        a->have_reset = true;
        a->reset_s = after.reset_s;
    }
    return check_remaining(a);
}

/* Adds what `from` says to `into`; a field both state differently is contradictory. */
static const char *merge(rl_announce *into, const rl_announce *from)
{
    if (from->have_limit) {
        if (!into->have_limit) {
            into->have_limit = true;
            into->limit = from->limit;
            into->window_s = from->window_s;
        } else if (into->limit != from->limit) {
            return R_CONTRADICTORY;
        } else if (into->window_s == 0) {
            into->window_s = from->window_s;
        } else if (from->window_s != 0 && from->window_s != into->window_s) {
            return R_CONTRADICTORY;
        }
    }
    if (from->have_remaining) {
        if (!into->have_remaining) {
            into->have_remaining = true;
            into->remaining = from->remaining;
        } else if (into->remaining != from->remaining) {
            return R_CONTRADICTORY;
        }
    }
    if (from->have_reset) {
        if (!into->have_reset) {
            into->have_reset = true;
            into->reset_s = from->reset_s;
        } else if (fabs(into->reset_s - from->reset_s) > 1) {
            return R_CONTRADICTORY;
        }
    }
    if (into->n_windows == 0) {
        into->n_windows = from->n_windows;
        memcpy(into->windows, from->windows, sizeof from->windows);
    }
    into->forms |= from->forms;
    return NULL;
}

/* The kind of a RateLimit-Policy value by its first member: 'i' integers (drafts 05-07), 'n'
 * named (current), 0 malformed. */
static char policy_kind(const char *v)
{
    sf_cur c;
    sf_member m;
    if (!sf_begin(&c, v) || sf_next(&c, false, &m) <= 0)
        return 0;
    if (m.item.t == SF_INT)
        return 'i';
    return is_name(&m.item) ? 'n' : 0;
}

rl_status rl_parse(const rl_raw *raw, double now_epoch_s, double retry_after_max_s,
                   rl_announce *out, const char **reason)
{
    memset(out, 0, sizeof *out);
    if (reason)
        *reason = NULL;
    if (!raw || !(raw->policy || raw->ratelimit || raw->limit || raw->remaining || raw->reset ||
                  raw->x_limit || raw->x_remaining || raw->x_reset || raw->x_reset_after))
        return RL_NONE;
    const char *why = NULL;
    if (raw->truncated)
        why = R_MALFORMED;

    const char *named_policy = NULL, *int_policy_v = NULL;
    if (!why && raw->policy) {
        char k = policy_kind(raw->policy);
        if (k == 'n')
            named_policy = raw->policy;
        else if (k == 'i')
            int_policy_v = raw->policy;
        else
            why = R_MALFORMED;
    }
    bool dict07 = raw->ratelimit && is_dict07(raw->ratelimit);

    rl_announce f[4];
    memset(f, 0, sizeof f);
    size_t nf = 0;
    if (!why && (named_policy || (raw->ratelimit && !dict07))) {
        why = form_ietf(named_policy, dict07 ? NULL : raw->ratelimit, now_epoch_s, &f[nf]);
        f[nf++].forms = RL_FORM_IETF;
    }
    if (!why && dict07) {
        why = form_07(raw->ratelimit, int_policy_v, now_epoch_s, &f[nf]);
        f[nf++].forms = RL_FORM_IETF07;
    }
    if (!why && (raw->limit || raw->remaining || raw->reset || (int_policy_v && !dict07))) {
        why = form_early(raw, int_policy_v, now_epoch_s, &f[nf]);
        f[nf++].forms = RL_FORM_IETF_EARLY;
    }
    if (!why && (raw->x_limit || raw->x_remaining || raw->x_reset || raw->x_reset_after)) {
        why = form_x(raw, now_epoch_s, &f[nf]);
        f[nf++].forms = RL_FORM_X;
    }
    rl_announce a = {0};
    for (size_t i = 0; i < nf && !why; i++)
        why = merge(&a, &f[i]);
    if (why) {
        if (reason)
            *reason = why;
        return RL_IGNORED;
    }
    if (!a.have_limit && !a.have_remaining && !a.have_reset)
        return RL_NONE; /* e.g. only policies counted in another unit than requests */
    double max = retry_after_max_s >= 0 ? retry_after_max_s : 0; /* NaN too */
    if (a.have_reset && a.reset_s > max) {
        a.reset_s = max;
        a.reset_clamped = true;
    }
    *out = a;
    return RL_OK;
}

bool rl_rate_per_minute(const rl_announce *a, double *per_minute)
{
    if (a->have_limit && a->window_s > 0) {
        *per_minute = a->limit * 60 / a->window_s;
        return true;
    }
    /* A clamped reset is shorter than the announced one: spreading the remaining requests over
     * it would be faster than the receiver allows, so it gives no rate. */
    if (a->have_remaining && a->remaining > 0 && a->have_reset && a->reset_s > 0 &&
        !a->reset_clamped) {
        *per_minute = (double)a->remaining * 60 / a->reset_s;
        return true;
    }
    return false;
}

bool rl_hold_s(const rl_announce *a, double *hold_s)
{
    if (a->have_remaining && a->remaining == 0 && a->have_reset && a->reset_s > 0) {
        *hold_s = a->reset_s;
        return true;
    }
    return false;
}

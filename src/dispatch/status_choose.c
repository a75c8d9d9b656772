/* status_choose.c - the status page's choice: each customer's state (held, throttled, failing,
 * its problems, its observed rate) and which customers, and customers with endpoints, fill the
 * requested page in the requested order (status.c writes the answer). */
#include "status_internal.h"

#include "status_health.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a customer's state ------------------------------------------------------------------- */

const char *held_reason(const customer *c)
{
    if (c->secrets_invalid)
        return "secrets";
    if (c->headers_invalid)
        return "headers";
    if (c->proxy_invalid)
        return "proxy";
    if (c->client_cert_held)
        return "client_cert";
    return NULL;
}

double effective_rate(const customer *c)
{
    return customer_effective_rate(c);
}

/* A throttling receiver slowed it: a lower pace, an in-flight cap, or a Retry-After hold. */
bool is_throttled(const customer *c, int64_t now)
{
    return pace_rate(&customer_thr(c)->pace, c->rate) < c->rate || customer_thr(c)->pace.cap > 0 ||
           customer_thr(c)->pace.hold_until_us > now;
}

/* Its failing streak is recorded and committed: `failing`, as `pgpace events` and
 * pgpace.customer_health have it (health.c), never before they do. Only the leader's memory
 * follows the streak; a standby's is as it was loaded. */
bool is_failing(const customer *c)
{
    const customer_health *h = customer_health_of(c);
    return h->failing_since > 0 && h->failing_committed;
}

/* Its problems (status_health.h): their value is the order of sort=state, problems first. A
 * standby knows neither throttling (it paces nothing) nor the streaks of now. */
unsigned problems(const customer *c, int64_t now, bool live)
{
    unsigned p = 0;
    if (c->disabled)
        p |= STATUS_DISABLED;
    if (held_reason(c))
        p |= STATUS_HELD;
    if (live && is_failing(c))
        p |= STATUS_FAILING;
    if (c->breaker.state == BREAKER_OPEN)
        p |= STATUS_BREAKER_OPEN;
    if (c->paused_stored)
        p |= STATUS_PAUSED;
    if (is_throttled(c, now))
        p |= STATUS_THROTTLED;
    if (c->breaker.state == BREAKER_HALF_OPEN)
        p |= STATUS_HALF_OPEN;
    return p;
}

/* Its requests of the last minute, over the part of it this instance observed: since it began
 * leading, or since it loaded the customer when that was later. */
activity_window observed_window(const dispatcher *d, const customer *c, int64_t mono)
{
    int64_t since = c->known_mono_us > d->lead_mono_us ? c->known_mono_us : d->lead_mono_us;
    if (c->activity)
        return activity_window_at(c->activity, mono, since);
    activity none;
    activity_init(&none);
    return activity_window_at(&none, mono, since);
}

/* Per minute over that window, for sort=observed (0 for none, or too short to say). */
static double observed(const dispatcher *d, const customer *c, int64_t mono)
{
    if (!c->activity)
        return 0; /* nothing sent: spares a sort over many idle customers an empty window each */
    activity_window w = observed_window(d, c, mono);
    double r = activity_window_rate(&w);
    return isnan(r) ? 0 : r;
}

/* ---- choosing the page -------------------------------------------------------------------- */

/* A customer with endpoints while a page is chosen (0018): what its entry ranks by. */
typedef struct group {
    int64_t id; /* the customer's row id */
    char name[136];
    customer *own;           /* its own receiver, or NULL */
    customer *any;           /* one of its other endpoints */
    const status_tenant *t;  /* without a receiver of its own: the gauge pass's reading */
    size_t n, first, filled; /* its endpoints (own included): members[first .. first + n) */
    double effective, observed;
    int in_flight;
    unsigned problems; /* of all its endpoints */
    bool matched;
} group;

/* An entry to rank: a customer alone (c) or a customer with endpoints (g). */
typedef struct ranked {
    customer *c;
    group *g;
    const char *name;
    double key;
} ranked;

typedef int (*ranked_cmp_fn)(const void *, const void *);

/* Keys ascending, ties by name ascending. */
static int ranked_asc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Keys descending, ties by name ascending. */
static int ranked_desc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key > b->key ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int ranked_name_desc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    return strcmp(b->name, a->name);
}

/* Rearranges a[0..n) so that a[k] is the element a sort would put there, with none after it
 * ordered before it and none before it ordered after (Hoare's selection, linear on average):
 * a page needs only its own rows sorted, not all the customers (a full sort of 100,000 names
 * took most of a 53 ms poll). */
static void select_kth(ranked *a, size_t n, size_t k, ranked_cmp_fn cmp)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)k;
    while (lo < hi) {
        /* Median of three as the pivot: sorted or reversed input stays linear. */
        ptrdiff_t mid = lo + (hi - lo) / 2;
        ranked x = a[lo], y = a[mid], z = a[hi];
        ranked pivot = cmp(&x, &y) < 0 ? (cmp(&y, &z) < 0 ? y : (cmp(&x, &z) < 0 ? z : x))
                                       : (cmp(&x, &z) < 0 ? x : (cmp(&y, &z) < 0 ? z : y));
        ptrdiff_t i = lo, j = hi;
        while (i <= j) {
            while (cmp(&a[i], &pivot) < 0)
                i++;
            while (cmp(&a[j], &pivot) > 0)
                j--;
            if (i <= j) {
                ranked t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return;
    }
}

static double sort_key(const dispatcher *d, const customer *c, status_sort s, int64_t now,
                       int64_t mono, bool live)
{
    switch (s) {
    case STATUS_SORT_NAME:
        return 0;
    case STATUS_SORT_RATE:
        return c->rate;
    case STATUS_SORT_EFFECTIVE:
        return effective_rate(c);
    case STATUS_SORT_OBSERVED:
        return observed(d, c, mono);
    case STATUS_SORT_IN_FLIGHT:
        return c->in_flight;
    case STATUS_SORT_STATE:
        return status_state_key(problems(c, now, live));
    }
    return 0;
}

/* A customer with endpoints' key for the sort asked for. */
static double group_key(const group *g, status_sort s, double rate)
{
    switch (s) {
    case STATUS_SORT_NAME:
        return 0;
    case STATUS_SORT_RATE:
        return rate;
    case STATUS_SORT_EFFECTIVE:
        return rate > 0 && g->effective > rate ? rate : g->effective;
    case STATUS_SORT_OBSERVED:
        return g->observed;
    case STATUS_SORT_IN_FLIGHT:
        return g->in_flight;
    case STATUS_SORT_STATE:
        return status_state_key(g->problems);
    }
    return 0;
}

/* The index of id in the sorted ids[0..n), or -1. */
static long find_id(const int64_t *ids, size_t n, int64_t id)
{
    const int64_t *at = n ? bsearch(&id, ids, n, sizeof *ids, cmp_i64) : NULL;
    return at ? (long)(at - ids) : -1;
}

/* A customer's endpoints in the answer's order: its own receiver first, then by name. */
static int member_cmp(const void *pa, const void *pb)
{
    const customer *a = *(customer *const *)pa, *b = *(customer *const *)pb;
    if ((a->id == a->tenant_id) != (b->id == b->tenant_id))
        return a->id == a->tenant_id ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The limit over a customer's endpoints, its mode and dead letters of its own row, and its name
 * (into g->name): its own receiver's row, else the gauge pass's reading, else its endpoints'. */
static double group_settle(dispatcher *d, group *g)
{
    g->t = g->own ? NULL : hmap_get(&d->status_tenants, &g->id, sizeof g->id);
    const char *name = g->own ? g->own->name : g->t ? g->t->name : NULL;
    if (name)
        snprintf(g->name, sizeof g->name, "%s", name);
    else if (g->any)
        snprintf(g->name, sizeof g->name, "%.*s", (int)strcspn(g->any->name, "/"), g->any->name);
    if (g->own)
        return g->own->rate;
    if (g->t)
        return g->t->rate;
    return g->any && g->any->gate ? g->any->gate->rate : 0;
}

/* Counts, filters and sorts the customers (a customer with endpoints as one entry); keeps the
 * requested page's entries, and the ids of every row it shows. */
int choose_page(dispatcher *d, status_req *r)
{
    int64_t now = now_us(), mono = timebase_mono_us();
    bool live = is_leading(d);
    size_t n = d->customers.n, pos = 0, ne = 0, nt = 0;
    customer *c;
    /* The customers that have endpoints: the ids their endpoints name (none: as before 0018). */
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        ne += c->tenant_id != c->id;
    int64_t *tids = ne ? malloc(ne * sizeof *tids) : NULL;
    group *groups = NULL;
    customer **members = NULL;
    ranked *all = NULL;
    int rc = -ENOMEM;
    if (ne && !tids)
        goto out;
    for (pos = 0; ne && (c = hmap_next(&d->customers, &pos)) != NULL;)
        if (c->tenant_id != c->id && nt < ne)
            tids[nt++] = c->tenant_id;
    if (nt > 1)
        qsort(tids, nt, sizeof *tids, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < nt; i++)
        if (u == 0 || tids[u - 1] != tids[i])
            tids[u++] = tids[i];
    nt = u;
    groups = nt ? calloc(nt, sizeof *groups) : NULL;
    members = nt ? malloc(n * sizeof *members) : NULL;
    all = n + nt ? malloc((n + nt) * sizeof *all) : NULL;
    if ((nt && (!groups || !members)) || (n + nt && !all))
        goto out;
    for (size_t i = 0; i < nt; i++)
        groups[i].id = tids[i];

    size_t m = 0;
    for (pos = 0; (c = hmap_next(&d->customers, &pos)) != NULL;) {
        r->endpoints++;
        if (c->disabled)
            r->disabled++;
        if (held_reason(c))
            r->held++;
        if (c->breaker.state == BREAKER_OPEN)
            r->breaker_open++;
        if (c->paused_stored && !c->disabled)
            r->paused++;
        if (is_throttled(c, now))
            r->throttled++;
        if (is_failing(c) && !c->disabled)
            r->failing++;
        long gi = find_id(tids, nt, c->tenant_id);
        if (gi < 0) {
            r->total++;
            if (m < n + nt && status_name_matches(c->name, r->q.filter))
                all[m++] = (ranked){
                    .c = c, .name = c->name, .key = sort_key(d, c, r->q.sort, now, mono, live)};
            continue;
        }
        group *g = &groups[gi];
        g->n++;
        if (c->id == c->tenant_id)
            g->own = c;
        else if (!g->any)
            g->any = c;
        g->effective += effective_rate(c);
        if (r->q.sort == STATUS_SORT_OBSERVED)
            g->observed += observed(d, c, mono);
        g->in_flight += c->in_flight;
        g->problems |= problems(c, now, live);
        g->matched = g->matched || status_name_matches(c->name, r->q.filter);
    }
    size_t first = 0;
    for (size_t i = 0; i < nt; i++) {
        group *g = &groups[i];
        double rate = group_settle(d, g);
        g->first = first;
        first += g->n;
        r->total++;
        if (m < n + nt && (g->matched || status_name_matches(g->name, r->q.filter)))
            all[m++] = (ranked){.g = g, .name = g->name, .key = group_key(g, r->q.sort, rate)};
    }
    /* Each customer's endpoints together, in members[]. */
    for (pos = 0; nt && (c = hmap_next(&d->customers, &pos)) != NULL;) {
        long gi = find_id(tids, nt, c->tenant_id);
        if (gi >= 0 && groups[gi].filled < groups[gi].n)
            members[groups[gi].first + groups[gi].filled++] = c;
    }

    r->matched = m;
    ranked_cmp_fn cmp = r->q.sort == STATUS_SORT_NAME
                            ? (r->q.descending ? ranked_name_desc : ranked_asc)
                        : r->q.descending ? ranked_desc
                                          : ranked_asc;
    size_t from = (size_t)r->q.offset < m ? (size_t)r->q.offset : m;
    size_t count = m - from < (size_t)r->q.limit ? m - from : (size_t)r->q.limit;
    /* The page's rows in place, then sorted among themselves. */
    if (from > 0 && from < m)
        select_kth(all, m, from, cmp);
    if (count > 0 && from + count < m)
        select_kth(all + from, m - from, count, cmp);
    if (count > 1)
        qsort(all + from, count, sizeof *all, cmp);

    size_t n_ids = 0, budget = STATUS_MAX_PAGE_ENDPOINTS;
    for (size_t i = 0; i < count; i++) {
        const group *g = all[from + i].g;
        size_t listed = g ? (g->n < STATUS_MAX_ENDPOINTS ? g->n : STATUS_MAX_ENDPOINTS) : 1;
        if (g)
            budget -= listed = listed < budget ? listed : budget;
        n_ids += listed;
    }
    budget = STATUS_MAX_PAGE_ENDPOINTS;
    r->page = count ? calloc(count, sizeof *r->page) : NULL;
    r->ids = n_ids ? malloc(n_ids * sizeof *r->ids) : NULL;
    if ((count && !r->page) || (n_ids && !r->ids))
        goto out;
    for (size_t i = 0; i < count; i++) {
        const ranked *e = &all[from + i];
        page_entry *pe = &r->page[r->n_page++];
        if (!e->g) {
            pe->id = e->c->id;
            r->ids[r->n_ids++] = e->c->id;
            continue;
        }
        group *g = e->g;
        pe->group = true;
        pe->id = g->id;
        snprintf(pe->name, sizeof pe->name, "%s", g->name);
        pe->rate = group_settle(d, g);
        snprintf(pe->mode, sizeof pe->mode, "%s",
                 g->own ? mode_name(g->own->mode)
                 : g->t ? g->t->mode
                        : "");
        pe->dead = g->t ? g->t->dead : 0;
        customer **own = members + g->first;
        qsort(own, g->filled, sizeof *own, member_cmp);
        pe->n_members = g->filled;
        pe->n_listed = g->filled < STATUS_MAX_ENDPOINTS ? g->filled : STATUS_MAX_ENDPOINTS;
        budget -= pe->n_listed = pe->n_listed < budget ? pe->n_listed : budget;
        pe->members = malloc(g->filled * sizeof *pe->members);
        if (!pe->members)
            goto out;
        for (size_t k = 0; k < g->filled; k++)
            pe->members[k] = own[k]->id;
        for (size_t k = 0; k < pe->n_listed; k++)
            r->ids[r->n_ids++] = own[k]->id;
    }
    rc = 0;
out:
    free(tids);
    free(groups);
    free(members);
    free(all);
    return rc;
}

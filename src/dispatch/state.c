/* state.c - the leader's memory of customers, carriers and receiver hosts.
 *
 * Owns dispatcher.customers, .carriers, .hosts and .heap: creating and updating entries from
 * their rows, the (customer, carrier) pairs that may have due work, the wait lists of
 * customers held back by a full host or carrier, host room and carrier budgets, and when each
 * customer is next eligible for a claim (its key in the scheduler heap). Once loaded, this
 * memory is the authority for scheduling; the tables are its record.
 */
#include "internal.h"

#include "client_cert.h"
#include "gcra.h"
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A pair's carrier: items without one (the common case) share this "" rather than a copy each
 * (a 32-byte allocation per customer at 1,000,000 idle customers). */
static char no_carrier[] = "";

static char *pair_carrier_dup(const char *carrier)
{
    return *carrier ? strdup(carrier) : no_carrier;
}

static void pair_carrier_free(char *carrier)
{
    if (carrier != no_carrier)
        free(carrier);
}

const customer_health *customer_health_of(const customer *c)
{
    static const customer_health none;
    return c->health ? c->health : &none;
}

const customer_conn *customer_conn_of(const customer *c)
{
    static const customer_conn none;
    return c->conn ? c->conn : &none;
}

static void conn_free(customer_conn *cc)
{
    if (!cc)
        return;
    http_headers_release(cc->headers);
    oauth_cred_release(cc->oauth);
    free(cc->proxy);
    client_cert_release(cc->client_cert);
    free(cc->client_cert_error);
    free(cc);
}

const throttle_state *customer_thr(const customer *c)
{
    static const throttle_state none;
    return c->thr ? c->thr : &none;
}

throttle_state *customer_thr_mut(customer *c)
{
    if (!c->thr && !(c->thr = calloc(1, sizeof *c->thr)))
        LOG_ERROR("out_of_memory", LOG_S("where", "throttle state"), LOG_S("customer", c->name));
    return c->thr;
}

size_t customer_secrets(const customer *c, const char *out[CUSTOMER_SECRETS_MAX])
{
    const char *p = c->secrets_buf;
    for (size_t i = 0; i < c->n_secrets; i++) {
        out[i] = p;
        p += strlen(p) + 1;
    }
    return c->n_secrets;
}

void customer_keys(customer *c, const char *text[CUSTOMER_SECRETS_MAX])
{
    customer_secrets(c, text);
    if (!c->keys && c->n_secrets > 0 && !(c->keys = calloc(c->n_secrets, sizeof *c->keys)))
        return; /* no memory: the request signs from the text (http_sender.h) */
    for (size_t i = 0; i < c->n_secrets; i++) {
        pgp_error err;
        /* Not parsed (no memory): the request signs from the text (http_sender.h). */
        if (!c->keys[i] && secret_key_parse(text[i], &c->keys[i], &err) != 0)
            c->keys[i] = NULL;
    }
}

customer *customer_get(dispatcher *d, int64_t id)
{
    return hmap_get(&d->customers, &id, sizeof id);
}

void customer_free(customer *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_pairs; i++)
        pair_carrier_free(c->pairs[i].carrier);
    if (c->pairs != &c->pair0)
        free(c->pairs);
    free(c->activity);
    free(c->thr);
    free(c->health);
    if (c->lim) {
        slide_limit_free(c->lim);
        free(c->lim);
    }
    free(c->name); /* name, url and secrets: one allocation */
    for (size_t i = 0; c->keys && i < c->n_secrets; i++)
        secret_key_free(c->keys[i]);
    free(c->keys);
    conn_free(c->conn);
    free(c->stat_blocked_key);
    free(c);
}

static const char *const mode_names[] = {
    [MODE_SPACED] = "spaced", [MODE_BATCH] = "batch", [MODE_UNLIMITED] = "unlimited"};

const char *mode_name(customer_mode m)
{
    return (unsigned)m < PGP_ARRAY_LEN(mode_names) ? mode_names[m] : "spaced";
}

/* The schema allows only these three (a CHECK constraint). */
static customer_mode parse_mode(const char *s)
{
    for (size_t m = 0; m < PGP_ARRAY_LEN(mode_names); m++)
        if (strcmp(s, mode_names[m]) == 0)
            return (customer_mode)m;
    return MODE_SPACED;
}

static breaker_state parse_breaker(const char *s)
{
    return strcmp(s, "open") == 0        ? BREAKER_OPEN
           : strcmp(s, "half_open") == 0 ? BREAKER_HALF_OPEN
                                         : BREAKER_CLOSED;
}

/* Takes the customer out of a host's list: its place is known (host_pos), and the last id
 * moves into it (a search of the list made deleting customers of a host with 1,000,000 of them
 * quadratic). */
static void id_list_remove(dispatcher *d, int64_t *v, size_t *n, customer *c)
{
    size_t i = c->host_pos;
    if (i >= *n || v[i] != c->id)
        return; /* not on the list: its id_list_add found no memory */
    v[i] = v[--*n];
    if (i < *n) {
        customer *moved = customer_get(d, v[i]);
        if (moved)
            moved->host_pos = i;
    }
}

static void id_list_add(int64_t **v, size_t *n, size_t *cap, customer *c)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        int64_t *nv = realloc(*v, ncap * sizeof *nv);
        if (!nv)
            return; /* its host does not count it: it competes as if alone */
        *v = nv;
        *cap = ncap;
    }
    c->host_pos = *n;
    (*v)[(*n)++] = c->id;
}

/* Each host knows its customers by kind: spaced ones for the connections it keeps for them,
 * work-queue ones for the shares of its window (window.c). */
static void host_list_remove(dispatcher *d, host_state *h, customer_mode mode, customer *c)
{
    if (!h)
        return;
    if (mode == MODE_SPACED)
        id_list_remove(d, h->spaced_ids, &h->n_spaced, c);
    else
        id_list_remove(d, h->workq_ids, &h->n_workq, c);
}

static void host_list_add(host_state *h, customer_mode mode, customer *c)
{
    if (!h)
        return;
    if (mode == MODE_SPACED)
        id_list_add(&h->spaced_ids, &h->n_spaced, &h->cap_spaced, c);
    else
        id_list_add(&h->workq_ids, &h->n_workq, &h->cap_workq, c);
}

customer *customer_apply(dispatcher *d, const customer_row *row)
{
    customer *c = customer_get(d, row->id);
    bool fresh = !c;
    if (fresh) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->id = row->id;
        c->tat = GCRA_TAT_NONE;
        c->round_slot = -1;
        c->known_mono_us = timebase_mono_us();
    }
    /* Name, URL and secrets in one allocation (three cost 128 bytes a customer, one about 96). */
    size_t name_len = strlen(row->name), url_len = strlen(row->url);
    char *name = malloc(name_len + url_len + strlen(row->secrets) + 3);
    char *url = name ? name + name_len + 1 : NULL;
    char *secrets = name ? url + url_len + 1 : NULL;
    if (name) {
        memcpy(name, row->name, name_len + 1);
        memcpy(url, row->url, url_len + 1);
        strcpy(secrets, row->secrets);
    }
    char *proxy = row->proxy ? strdup(row->proxy) : NULL;
    /* Rebuilt on every load (a customer changes rarely): the old set stays with the requests
     * that hold it. */
    http_headers *headers = NULL;
    int hrc = http_headers_new(row->headers, &headers);
    /* OAuth2: the set (and its token) is kept while the credentials stay the same; any change
     * makes a new one, so the next delivery fetches a token with the new credentials. */
    oauth_cred *oauth = NULL;
    oauth_cred *had_oauth = customer_conn_of(c)->oauth;
    bool keep_oauth = row->oauth_token_url &&
                      oauth_cred_matches(had_oauth, row->oauth_token_url, row->oauth_client_id,
                                         row->oauth_client_secret, row->oauth_scope);
    int orc = 0;
    if (keep_oauth)
        orc = oauth_cred_update(had_oauth, row->name, row->headers);
    else if (row->oauth_token_url)
        orc = oauth_cred_new(row->name, row->oauth_token_url, row->oauth_client_id,
                             row->oauth_client_secret, row->oauth_scope, row->headers, &oauth);
    /* The certificate likewise: parsed and matched with its key once per load, never per
     * request. What is wrong with it is kept (no secret in it) to fail its deliveries with. */
    client_cert *cert = NULL;
    char *cert_error = NULL;
    int crc = 0;
    if (row->client_cert || row->client_key) {
        pgp_error cerr;
        crc = client_cert_new(row->client_cert, row->client_key, &cert, &cerr);
        if (crc == -EINVAL)
            cert_error = strdup(cerr.msg);
    }
    /* Out of line only while it has any (keep_oauth: it has one). */
    bool want_conn = headers || oauth || keep_oauth || proxy || cert || cert_error;
    customer_conn *new_conn = want_conn && !c->conn ? calloc(1, sizeof *new_conn) : NULL;
    if (!name || (row->proxy && !proxy) || hrc == -ENOMEM || crc == -ENOMEM || orc == -ENOMEM ||
        (crc == -EINVAL && !cert_error) || (want_conn && !c->conn && !new_conn) ||
        (fresh && hmap_put(&d->customers, &c->id, sizeof c->id, c) != 0)) {
        free(new_conn);
        free(name);
        free(proxy);
        http_headers_release(headers);
        oauth_cred_release(oauth);
        client_cert_release(cert);
        free(cert_error);
        if (fresh)
            free(c);
        return NULL;
    }
    free(c->name); /* and url, secrets_buf */
    for (size_t i = 0; c->keys && i < c->n_secrets; i++)
        secret_key_free(c->keys[i]);
    free(c->keys);
    c->keys = NULL;
    c->name = name;
    c->url = url;
    c->secrets_buf = secrets;
    c->n_secrets = 0;
    if (new_conn)
        c->conn = new_conn;
    customer_conn *cc = c->conn;
    if (cc) {
        http_headers_release(cc->headers);
        cc->headers = headers;
        if (!keep_oauth) {
            oauth_cred_release(cc->oauth);
            cc->oauth = oauth;
        }
        /* A certificate that does not parse or match (written past the CLI), or is not valid
         * now (expired since it was set): the customer is held until one that is valid is set,
         * rather than send without it or fail its backlog into the dead letters. */
        client_cert_release(cc->client_cert);
        cc->client_cert = cert;
        free(cc->client_cert_error);
        cc->client_cert_error = cert_error;
        free(cc->proxy);
        cc->proxy = proxy;
        if (!want_conn) { /* all of it is NULL now */
            free(cc);
            c->conn = NULL;
        }
    }
    c->client_cert_warned = false;
    char cert_why[192];
    /* Expired (or unusable): held. Not valid yet: not held, as it will be (its deliveries go
     * back until then, request() -> client_cert_ok). */
    int64_t now_s = cert ? now_us() / 1000000 : 0; /* a clock read per customer at start-up */
    c->client_cert_held =
        cert_error || (cert && !client_cert_usable(cert, now_s, cert_why, sizeof cert_why) &&
                       now_s >= client_cert_get_info(cert)->not_before_s);
    if (cert_error)
        LOG_ERROR("customer_client_cert_invalid", LOG_S("customer", row->name),
                  LOG_S("error", cert_error),
                  LOG_S("action", "held until a valid client certificate is set"));
    else if (c->client_cert_held) {
        c->client_cert_warned = true;
        LOG_ERROR("customer_client_cert_unusable", LOG_S("customer", row->name),
                  LOG_S("error", cert_why),
                  LOG_S("action", "held until a valid client certificate is set"));
    }
    /* The table's constraints and pgpace.customer_set_headers (customer_set_oauth2) refuse what
     * would not parse; should a row get past them, its webhooks are held rather than sent
     * without the headers (its Authorization) the receiver expects. The values are secrets:
     * only the name is said. */
    c->headers_invalid = hrc != 0 || orc != 0;
    if (c->headers_invalid)
        LOG_ERROR("customer_headers_invalid", LOG_S("customer", row->name),
                  LOG_S("action", "held until its headers are set again"));
    /* Checked like the config's (pgpace.customer_set_proxy and the table's constraint refuse
     * what would not pass): a customer whose proxy is unusable is held, not sent direct. */
    pgp_error perr;
    c->proxy_invalid =
        proxy && strcmp(proxy, "direct") != 0 && proxy_url_check("proxy", proxy, &perr) != 0;
    if (c->proxy_invalid)
        LOG_ERROR("customer_proxy_invalid", LOG_S("customer", row->name), LOG_S("error", perr.msg),
                  LOG_S("action", "held until its proxy is set again"));
    /* The secrets packed in place, each after the one before and its NUL (customer_secrets). */
    char *save = NULL, *packed = c->secrets_buf;
    for (char *tok = strtok_r(c->secrets_buf, " ", &save);
         tok && c->n_secrets < CUSTOMER_SECRETS_MAX; tok = strtok_r(NULL, " ", &save)) {
        size_t len = strlen(tok);
        memmove(packed, tok, len + 1);
        packed += len + 1;
        c->n_secrets++;
    }
    /* Checked here, parsed at its first request (customer_keys), then kept: deriving an Ed25519
     * key costs as much as a signature, and an idle customer needs no key (48 bytes each, and
     * a derivation each at start-up). One that does not parse (pgpace.customer_set refuses
     * such; the table's CHECK is looser, and an older dispatcher may not know a newer kind)
     * holds the customer, like headers that do not parse: its items wait, rather than fail
     * attempt after attempt to be dead-lettered. */
    c->secrets_invalid = false;
    const char *secret_text[CUSTOMER_SECRETS_MAX];
    customer_secrets(c, secret_text);
    for (size_t i = 0; i < c->n_secrets; i++) {
        pgp_error kerr;
        if (secret_check(secret_text[i], &kerr) != 0) {
            c->secrets_invalid = true;
            LOG_ERROR("customer_secret_invalid", LOG_S("customer", row->name),
                      LOG_I("secret", (int64_t)i + 1), LOG_S("error", kerr.msg),
                      LOG_S("action", "held until its signing secrets are set again"));
        }
    }
    host_state *old_host = c->host;
    customer_mode old_mode = c->mode;
    c->mode = parse_mode(row->mode);
    c->rate = row->rate;
    c->burst = row->burst;
    if (c->thr || row->throttle_decrease != 0 || row->throttle_increase != 0 ||
        row->throttle_floor != 0) {
        throttle_state *t = customer_thr_mut(c);
        if (t) {
            t->throttle_decrease = row->throttle_decrease;
            t->throttle_increase = row->throttle_increase;
            t->throttle_floor = row->throttle_floor;
        }
    }
    customer_pace_period(c);
    c->max_in_flight = row->max_in_flight;
    /* Enabling a disabled customer starts its breaker afresh (pgpace.customer_enable reset
     * the stored one the same way): a new streak, a new disable_after. */
    if (!fresh && c->disabled && !row->disabled)
        health_reset(d, c);
    c->disabled = row->disabled;
    if (row->disabled || c->health) {
        if (!c->health && !(c->health = calloc(1, sizeof *c->health)))
            LOG_ERROR("out_of_memory", LOG_S("where", "disabled at"), LOG_S("customer", c->name));
        else
            c->health->disabled_at = row->disabled ? row->disabled_at_us : 0;
    }
    c->paused_stored = row->paused;
    c->paused = row->paused || row->disabled || customer_held_invalid(c);
    c->host = host_for_url(d, c->url);
    bool spaced = c->mode == MODE_SPACED, was_spaced = old_mode == MODE_SPACED;
    if (fresh) {
        host_list_add(c->host, c->mode, c);
    } else if (old_host != c->host || spaced != was_spaced) {
        host_list_remove(d, old_host, old_mode, c);
        host_list_add(c->host, c->mode, c);
    }
    c->connect_timeout_ms = row->connect_timeout_ms;
    c->request_timeout_ms = row->request_timeout_ms;
    tenant_gate_attach(d, c, row->tenant_id, row->tenant_rate, row->tenant_burst);
    c->grouped = row->grouped;
    limits_customer_apply(c, row);
    if (fresh) {
        /* A new leader resumes the breaker where the last one left it, except a probe: that
         * died with the old leader, so the breaker is open again and lets a new one through. */
        c->breaker.state = parse_breaker(row->breaker_state);
        if (c->breaker.state == BREAKER_HALF_OPEN)
            c->breaker.state = BREAKER_OPEN;
        c->breaker.failures = row->breaker_failures;
        c->breaker.trips = row->breaker_trips;
        c->breaker.open_until = row->breaker_open_until_us;
        if (row->failing_since_us != 0) {
            if (!c->health)
                c->health = calloc(1, sizeof *c->health);
            if (c->health) {
                c->health->failing_since = row->failing_since_us;
                c->health->failing_recorded = true;
                c->health->failing_committed = true;
            } else /* the streak starts again at its next failure */
                LOG_ERROR("out_of_memory", LOG_S("where", "failing streak"),
                          LOG_S("customer", c->name));
        }
    }
    return c;
}

/* Applies one row and schedules its customer; false when out of memory. */
static bool customer_apply_one(dispatcher *d, const customer_row *row, bool log_each)
{
    customer *c = customer_apply(d, row);
    if (!c) {
        LOG_ERROR("out_of_memory", LOG_S("where", "customer load"));
        return false;
    }
    if (log_each)
        LOG_INFO("customer_updated", LOG_S("customer", c->name), LOG_D("rate", c->rate),
                 LOG_I("burst", c->burst), LOG_I("paused", c->paused));
    throttle_apply(d, c); /* the effective-rate gauge from the start */
    customer_schedule(d, c);
    return true;
}

int customers_apply(dispatcher *d, const PGresult *res, bool log_each)
{
    int n = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        customer_row row;
        customer_row_parse(res, r, &row);
        n += customer_apply_one(d, &row, log_each);
    }
    return n;
}

int customers_apply_page(dispatcher *d, const PGresult *res, const int64_t *skip, size_t n_skip,
                         int64_t **whole, size_t *n_whole, size_t *cap_whole)
{
    int n = 0, rows = PQntuples(res);
    size_t k = 0;
    if (n_skip > 0 && rows > 0) { /* the first id to skip at or after this page's first row */
        int64_t first = row_i64(res, 0, SQL_RUN_CUSTOMERS_PAGE_C_ID);
        size_t lo = 0, hi = n_skip;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (skip[mid] < first)
                lo = mid + 1;
            else
                hi = mid;
        }
        k = lo;
    }
    for (int r = 0; r < rows; r++) {
        /* The next page is on its way: let PostgreSQL send all of it meanwhile. */
        if (r % 512 == 511)
            pgconn_read_ahead(d->db);
        customer_row row;
        bool complete = customer_page_row_parse(res, r, &row);
        while (k < n_skip && skip[k] < row.id)
            k++;
        if (k < n_skip && skip[k] == row.id)
            continue;
        if (complete) {
            n += customer_apply_one(d, &row, false);
            continue;
        }
        if (*n_whole == *cap_whole) {
            size_t cap = *cap_whole ? *cap_whole * 2 : 64;
            int64_t *v = realloc(*whole, cap * sizeof *v);
            if (!v)
                return -ENOMEM;
            *whole = v;
            *cap_whole = cap;
        }
        (*whole)[(*n_whole)++] = row.id;
    }
    return n;
}

static void reload_send(dispatcher *d);

/* A reload statement out: the ids it asked for, sorted and without repeats. */
typedef struct reload_batch {
    dispatcher *d;
    size_t n;
    int64_t ids[];
} reload_batch;

static void on_customers_reloaded(pgconn *conn, PGresult *res, void *arg)
{
    reload_batch *b = arg;
    dispatcher *d = b->d;
    d->reloads_out--;
    if (!res) {
        free(b); /* connection lost: the new connection's load reads every customer */
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CUSTOMERS_NCOLS, "customer")) {
        LOG_ERROR("customer_load_failed", LOG_S("error", PQresultErrorMessage(res)),
                  LOG_I("customers", (long long)b->n));
        free(b);
        reload_send(d);
        return;
    }
    /* Asked and not returned: deleted. Both lists are in id order. */
    int rows = PQntuples(res), r = 0;
    for (size_t i = 0; i < b->n; i++) {
        while (r < rows && row_i64(res, r, SQL_RUN_CUSTOMERS_C_ID) < b->ids[i])
            r++;
        if (r >= rows || row_i64(res, r, SQL_RUN_CUSTOMERS_C_ID) != b->ids[i])
            customer_remove(d, b->ids[i]);
    }
    free(b);
    bool each = rows <= RELOAD_LOG_EACH;
    int applied = customers_apply(d, res, each);
    if (!each)
        LOG_INFO("customers_updated", LOG_I("customers", applied));
    claim_arm(d);
    reload_send(d);
}

/* Sends batches of waiting ids (sorted, without repeats), RELOAD_PIPELINE at most out at once:
 * while one is applied the next is on its way, behind the claims sent meanwhile. */
static void reload_send(dispatcher *d)
{
    while (d->reloads_out < RELOAD_PIPELINE && d->n_reload > d->reload_head) {
        size_t left = d->n_reload - d->reload_head;
        size_t n = left < RELOAD_BATCH ? left : RELOAD_BATCH;
        reload_batch *b = malloc(sizeof *b + n * sizeof b->ids[0]);
        if (!b) {
            LOG_ERROR("out_of_memory", LOG_S("where", "customer reload"));
            return; /* they wait for the next notification's try */
        }
        /* The oldest first. */
        memcpy(b->ids, d->reload_ids + d->reload_head, n * sizeof b->ids[0]);
        d->reload_head += n;
        if (d->reload_head == d->n_reload)
            d->reload_head = d->n_reload = 0;
        qsort(b->ids, n, sizeof b->ids[0], cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || b->ids[i] != b->ids[u - 1])
                b->ids[u++] = b->ids[i];
        b->d = d;
        b->n = u;
        strbuf ids = {0};
        strbuf_puts(&ids, "{");
        for (size_t i = 0; i < u; i++) {
            if (i > 0)
                strbuf_puts(&ids, ",");
            strbuf_put_i64(&ids, b->ids[i]);
        }
        strbuf_puts(&ids, "}");
        const char *params[] = {[SQL_RUN_CUSTOMERS_P_CUSTOMER_IDS] = strbuf_str(&ids),
                                [SQL_RUN_CUSTOMERS_P_AFTER_ID] = NULL,
                                [SQL_RUN_CUSTOMERS_P_PAGE] = NULL};
        bool sent =
            params[SQL_RUN_CUSTOMERS_P_CUSTOMER_IDS] &&
            DSP_QUERY(d, run_customers, params, on_customers_reloaded, b, "customer reload") == 0;
        strbuf_free(&ids);
        if (!sent) {
            free(b);
            return;
        }
        d->reloads_out++;
    }
}

void leader_reload_customer(dispatcher *d, int64_t id)
{
    if (d->n_reload == d->cap_reload && d->reload_head > 0) {
        /* The ids sent are gone from the front: room at the end. */
        memmove(d->reload_ids, d->reload_ids + d->reload_head,
                (d->n_reload - d->reload_head) * sizeof *d->reload_ids);
        d->n_reload -= d->reload_head;
        d->reload_head = 0;
    }
    if (d->n_reload == d->cap_reload) {
        size_t cap = d->cap_reload ? d->cap_reload * 2 : 64;
        int64_t *v = realloc(d->reload_ids, cap * sizeof *v);
        if (!v) {
            LOG_ERROR("out_of_memory", LOG_S("where", "customer reload"));
            return;
        }
        d->reload_ids = v;
        d->cap_reload = cap;
    }
    d->reload_ids[d->n_reload++] = id;
    reload_send(d);
}

void customer_remove(dispatcher *d, int64_t id)
{
    customer *gone = customer_get(d, id);
    if (!gone)
        return;
    /* Out of its host's list first: the customer that moves into its place is looked up. */
    host_list_remove(d, gone->host, gone->mode, gone);
    tenant_gate_detach(d, gone);
    hmap_del(&d->customers, &id, sizeof id);
    sched_heap_remove(&d->heap, gone->id);
    LOG_INFO("customer_removed", LOG_S("customer", gone->name));
    customer_free(gone);
}

carrier_state *carrier_get(dispatcher *d, const char *name)
{
    carrier_state *cs = hmap_get(&d->carriers, name, strlen(name));
    if (cs)
        return cs;
    cs = calloc(1, sizeof *cs);
    if (!cs || !(cs->name = strdup(name)) || hmap_put(&d->carriers, name, strlen(name), cs) != 0) {
        if (cs)
            free(cs->name);
        free(cs);
        return NULL;
    }
    cs->waiting.carrier = cs;
    return cs;
}

void carrier_apply(dispatcher *d, const carrier_row *row)
{
    carrier_state *cs = carrier_get(d, row->name);
    if (!cs)
        return;
    cs->max_per_round = row->max_per_round;
    cs->max_in_flight = row->max_in_flight;
}

int carrier_budget(const pgp_config *cfg, const carrier_state *cs)
{
    int budget = cs->max_per_round > 0 ? cs->max_per_round : cfg->carrier_max_per_round;
    int max = cs->max_in_flight > 0 ? cs->max_in_flight : cfg->carrier_max_in_flight;
    if (max > 0 && max - cs->in_flight - cs->claiming < budget)
        budget = max - cs->in_flight - cs->claiming;
    return budget < 0 ? 0 : budget;
}

const char *egress_proxy(const dispatcher *d, const char *customer_proxy, const char *url)
{
    if (customer_proxy)
        return strcmp(customer_proxy, "direct") == 0 ? NULL : customer_proxy;
    if (!d->cfg.proxy[0] || proxy_bypass_match(d->no_proxy, url))
        return NULL;
    return d->cfg.proxy;
}

host_state *host_for_url(dispatcher *d, const char *url)
{
    const char *auth = strstr(url, "://");
    size_t len = auth ? (size_t)(auth + 3 - url) + strcspn(auth + 3, "/?#") : strlen(url);
    char key[512];
    if (len >= sizeof key)
        len = sizeof key - 1;
    for (size_t i = 0; i < len; i++)
        key[i] = (char)((url[i] >= 'A' && url[i] <= 'Z') ? url[i] + 32 : url[i]);
    key[len] = '\0';
    host_state *h = hmap_get(&d->hosts, key, len);
    if (h)
        return h;
    h = calloc(1, sizeof *h);
    if (!h || !(h->key = strdup(key)) || hmap_put(&d->hosts, key, len, h) != 0) {
        if (h)
            free(h->key);
        free(h);
        return NULL;
    }
    h->pool_slot = -1;
    h->waiting.host = h;
    hmap_init(&h->tenant_out);
    limits_host_match(d, h);
    return h;
}

/* Makes room for one more id, keeping the order (the ring is unrolled from head). */
static int waiters_grow(waiters *w)
{
    size_t cap = w->cap ? w->cap * 2 : 8;
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return -ENOMEM;
    for (size_t i = 0; i < w->n; i++)
        ids[i] = w->ids[(w->head + i) % w->cap];
    free(w->ids);
    w->ids = ids;
    w->cap = cap;
    w->head = 0;
    return 0;
}

/* Puts the customer on a wait list (once); it leaves the heap until woken. One woken from a list
 * that found no room again goes back to the front, not the end: it keeps its turn, so no customer
 * waits behind the same list twice (fairness among more customers than the room serves). */
void wait_on(waiters *w, customer *c)
{
    if (c->waiting)
        return;
    if (w->n == w->cap && waiters_grow(w) != 0)
        return; /* stays in the heap: retried on its own schedule */
    if (c->woken) {
        w->head = (w->head + w->cap - 1) % w->cap;
        w->ids[w->head] = c->id;
    } else {
        w->ids[(w->head + w->n) % w->cap] = c->id;
    }
    w->n++;
    c->waiting = true;
}

/* Room was freed: the first customers waiting for it may try again, as many as it could serve:
 * a host's connections neither used, promised to claims in flight nor booked by spaced slots,
 * and for work-queue customers its claim-ahead window's room too (a spaced customer never takes
 * window room); a carrier's budget. At least one, and in order: the first that the room left
 * cannot serve ends the wake. Only customers due now count: one that is not (paused, held, its
 * breaker open meanwhile) goes to the heap at its own time and leaves its turn to the next, so
 * a wake never ends with room free and due customers still waiting. Wakes come from completions
 * and from written outcomes (a carrier's room) alike, so this re-arms the claim timer itself. */
void wake(dispatcher *d, waiters *w)
{
    int conns = INT_MAX, ahead = 0;
    if (w->host) {
        const host_state *h = w->host;
        conns = host_max_connections(d, h) - h->in_flight - h->claiming_room - h->booked;
        ahead = window_room(&d->cfg, h);
    } else if (w->carrier) {
        conns = carrier_budget(&d->cfg, w->carrier);
    }
    size_t woken = 0, popped = 0;
    int64_t now = now_us(), tick = batch_tick_at(&d->cfg, now);
    /* The customers (tenants) woken so far: another endpoint of one of them comes along without
     * using room, since the round divides room among customers first (share.c). */
    int64_t tenants[64];
    size_t n_tenants = 0;
    while (w->n > 0) {
        customer *c = customer_get(d, w->ids[w->head]);
        bool live = c && c->waiting;
        bool sibling = false;
        for (size_t t = 0; live && t < n_tenants && !sibling; t++)
            sibling = tenants[t] == c->tenant_id;
        if (live && !sibling && woken > 0 && conns <= 0 && (c->mode == MODE_SPACED || ahead <= 0))
            break; /* the room left cannot serve the next: it keeps its place */
        w->head = (w->head + 1) % w->cap;
        w->n--;
        popped++;
        if (!live)
            continue;
        c->waiting = false;
        c->woken = true;
        int64_t due;
        if (customer_due_at(c, tick, &due) && due <= now + COALESCE_US && !sibling) {
            woken++;
            if (conns > 0)
                conns--;
            else if (c->mode != MODE_SPACED && ahead > 0)
                ahead--;
            if (c->grouped && n_tenants < PGP_ARRAY_LEN(tenants))
                tenants[n_tenants++] = c->tenant_id;
        }
        customer_schedule(d, c);
    }
    if (w->n == 0)
        w->head = 0;
    if (popped > 0)
        claim_arm(d);
}

void waiters_clear_all(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        c->waiting = false;
    pos = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL)
        h->waiting.n = h->waiting.head = 0;
    pos = 0;
    carrier_state *cs;
    while ((cs = hmap_next(&d->carriers, &pos)) != NULL)
        cs->waiting.n = cs->waiting.head = 0;
}

void pairs_clear_all(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        /* Pairs with items in flight stay, idle, so their counts end where they began. */
        size_t kept = 0;
        for (size_t i = 0; i < c->n_pairs; i++) {
            if (c->pairs[i].in_flight > 0) {
                c->pairs[kept] = c->pairs[i];
                c->pairs[kept++].next_us = PAIR_IDLE;
            } else {
                pair_carrier_free(c->pairs[i].carrier);
            }
        }
        c->n_pairs = kept;
    }
}

pair *pair_find(customer *c, const char *carrier)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (strcmp(c->pairs[i].carrier, carrier) == 0)
            return &c->pairs[i];
    return NULL;
}

/* Records that (c, carrier) may have due work from next_us on (keeps the earlier time). */
bool customer_has_fresh_pair(const customer *c, int64_t now)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (c->pairs[i].next_us <= now && c->pairs[i].in_flight == 0)
            return true;
    return false;
}

void pair_note(customer *c, const char *carrier, int64_t next_us)
{
    pair *p = pair_find(c, carrier);
    if (p) {
        if (next_us < p->next_us)
            p->next_us = next_us;
        return;
    }
    if (c->n_pairs == c->cap_pairs) {
        /* Most customers have one carrier at a time: the first pair is kept in place (an array
         * of one was a 48-byte allocation per customer), more go to an array. */
        size_t cap = c->cap_pairs ? c->cap_pairs * 2 : 1;
        bool in_place = c->pairs == &c->pair0;
        pair *v = cap == 1   ? &c->pair0
                  : in_place ? malloc(cap * sizeof *v)
                             : realloc(c->pairs, cap * sizeof *v);
        if (!v)
            return; /* the backstop scan will find it again */
        if (in_place && cap > 1)
            v[0] = c->pair0;
        c->pairs = v;
        c->cap_pairs = cap;
    }
    pair *added = &c->pairs[c->n_pairs];
    added->carrier = pair_carrier_dup(carrier);
    if (!added->carrier)
        return;
    added->next_us = next_us;
    added->served_us = 0;
    added->in_flight = 0;
    c->n_pairs++;
}

/* Nothing of the pair is due: forgotten, unless items of it are in flight (their count shares
 * the customer's room among its carriers), then kept idle until they end. */
void pair_drop(customer *c, const char *carrier)
{
    pair *p = pair_find(c, carrier);
    if (!p)
        return;
    if (p->in_flight > 0) {
        p->next_us = PAIR_IDLE;
        return;
    }
    pair_carrier_free(p->carrier);
    *p = c->pairs[--c->n_pairs];
}

void pair_in_flight_add(customer *c, const char *carrier, int delta)
{
    pair *p = pair_find(c, carrier);
    if (!p)
        return;
    p->in_flight += delta;
    if (p->in_flight <= 0) {
        p->in_flight = 0;
        if (p->next_us == PAIR_IDLE)
            pair_drop(c, carrier);
    }
}

bool has_due_pair(const customer *c, int64_t now)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (c->pairs[i].next_us <= now)
            return true;
    return false;
}

double customer_effective_rate(const customer *c)
{
    const throttle_state *t = customer_thr(c);
    double rate = pace_rate(&t->pace, c->rate);
    if (t->host_share > 0 && t->host_share < rate)
        rate = t->host_share;
    if (t->announced_rate > 0 && t->announced_rate < rate)
        rate = t->announced_rate;
    return rate;
}

void customer_pace_period(customer *c)
{
    int64_t period = gcra_period_us(customer_effective_rate(c));
    c->period_us = period > 0 ? period : 60000000;
}

/* The batch tick a wall-clock time is in: ticks are aligned multiples of batch_tick_ms, so
 * every leader numbers them alike. */
int64_t batch_tick_at(const pgp_config *cfg, int64_t t_us)
{
    return (t_us / 1000) / cfg->batch_tick_ms;
}

int batch_owed(const customer *c, int64_t tick)
{
    return c->owed > 0 && c->owed_tick >= tick ? c->owed : 0;
}

bool customer_due_at(const customer *c, int64_t tick, int64_t *due)
{
    bool eligible =
        !c->paused && !c->waiting && c->n_pairs > 0 &&
        (c->mode != MODE_BATCH || batch_owed(c, tick) > 0) &&
        !(c->max_in_flight > 0 && c->in_flight + c->claiming >= c->max_in_flight) &&
        !(c->mode == MODE_UNLIMITED && customer_thr(c)->pace.cap > 0 &&
          c->in_flight + c->claiming >= customer_thr(c)->pace.cap) &&
        !(c->breaker.state == BREAKER_HALF_OPEN && (c->breaker.probe_in_flight || c->claiming > 0));
    if (!eligible)
        return false;
    int64_t at = PAIR_IDLE;
    for (size_t i = 0; i < c->n_pairs; i++)
        if (c->pairs[i].next_us < at)
            at = c->pairs[i].next_us;
    if (at == PAIR_IDLE)
        return false; /* only pairs kept for their items in flight */
    /* Held by a Retry-After (a spaced customer is claimed its lookahead before the end). */
    int64_t held_until = customer_thr(c)->pace.hold_until_us;
    int64_t hold = held_until - (c->mode == MODE_SPACED ? LOOKAHEAD_US : 0);
    if (held_until > 0 && hold > at)
        at = hold;
    /* A spaced customer is claimed its lookahead before its GCRA slot (and sent exactly at it
     * from a timer), but never before its items are due: a retry waiting for its time is not
     * claimed early, which would only make empty claims. */
    if (c->mode == MODE_SPACED) {
        int64_t eligible_at = gcra_eligible_at(c->tat, c->period_us, c->burst);
        if (eligible_at != INT64_MIN && eligible_at - LOOKAHEAD_US > at)
            at = eligible_at - LOOKAHEAD_US;
    }
    /* Its tenant's limit, shared with the tenant's other endpoints (tenant.c): claimed its
     * lookahead before the shared slot, as a spaced customer is before its own. */
    if (c->gate) {
        int64_t gate_at = tenant_gate_eligible(c->gate, now_us());
        if (gate_at != INT64_MIN && gate_at - LOOKAHEAD_US > at)
            at = gate_at - LOOKAHEAD_US;
    }
    if (c->breaker.state == BREAKER_OPEN && c->breaker.open_until > at)
        at = c->breaker.open_until;
    /* Its limit windows, its customer's and its host's (limits.c): claimed its lookahead
     * before one more fits (its send waits for the exact time in the slot heap). */
    int64_t windows_at = limits_due(c, now_us());
    if (windows_at != INT64_MIN && windows_at - LOOKAHEAD_US > at)
        at = windows_at - LOOKAHEAD_US;
    *due = at;
    return true;
}

/* Puts the customer in the heap at its next eligible time, or takes it out. */
void customer_schedule(dispatcher *d, customer *c)
{
    if (d->state != LEADER_LEADING)
        return;
    int64_t due, now = now_us();
    if (!customer_due_at(c, batch_tick_at(&d->cfg, now), &due)) {
        sched_heap_remove(&d->heap, c->id);
        if (!c->waiting) {
            c->woken = false; /* nothing to wait for: a later wait starts a new turn */
            c->ready_us = 0;
        }
        return;
    }
    /* Its wait runs from when it was first scheduled due (or its due time, if later) without a
     * round taking it since, through host waits and rounds too full to take it; a later due time
     * starts it afresh. */
    if (c->ready_us == 0 || due > now)
        c->ready_us = due > now ? due : now;
    if (sched_heap_set(&d->heap, c->id, due) != 0)
        LOG_ERROR("out_of_memory", LOG_S("where", "scheduler heap"));
}

void state_free(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        customer_free(c);
    hmap_free(&d->customers);
    tenant_gates_free(d);
    pos = 0;
    carrier_state *cs;
    while ((cs = hmap_next(&d->carriers, &pos)) != NULL) {
        free(cs->waiting.ids);
        free(cs->name);
        free(cs);
    }
    hmap_free(&d->carriers);
    pos = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL) {
        free(h->waiting.ids);
        free(h->spaced_ids);
        free(h->workq_ids);
        window_free_host(h);
        free(h->key);
        free(h);
    }
    hmap_free(&d->hosts);
    sched_heap_free(&d->heap);
    free(d->backstop.after_carrier);
    d->backstop.after_carrier = NULL;
    free(d->reload_ids);
    d->reload_ids = NULL;
    d->n_reload = d->cap_reload = d->reload_head = 0;
    free(d->load_listed);
    free(d->load_marked);
    d->load_listed = d->load_marked = NULL;
    d->n_load_listed = d->cap_load_listed = d->n_load_marked = d->cap_load_marked = 0;
    d->load_extra_sent = 0;
    d->load_extra_ready = false;
}

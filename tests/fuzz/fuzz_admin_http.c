/* fuzz_admin_http.c - the admin HTTP server's request handling (src/admin_http.c) as a client
 * sees it: the real server runs on its own libuv loop thread on 127.0.0.1, and every input is
 * sent as the bytes of one connection (then the client's side is shut down).
 * Invariants, beyond "no crash, no sanitizer report" in the server:
 *   - whatever comes back starts with "HTTP/1.1 " and a three-digit status of the API's set;
 *   - the server keeps accepting connections (the next input is served).
 * The enqueue and status callbacks answer at once (no database): the handling in front of them
 * is fuzzed, the status token's Bearer and Basic parsing included (the token is set). So does the
 * management API's callback, behind an API token ("fuzz-api", read and write) and a tenant
 * page's bearer: what it is handed must be well formed (the path's segments a JSON array of
 * strings, the query an object of strings without a repeated name, the body as long as said
 * and without a NUL, the actor "token:fuzz" or "portal"), and it answers with an ETag, a
 * Location and an Allow made of the request's own bytes (dropped unless printable).
 */
#include "fuzz_util.h"
#include "fuzz_net.h"

#include "admin_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

static int fake_metrics(void *arg, strbuf *out)
{
    (void)arg;
    strbuf_puts(out, "# HELP x x\n# TYPE x counter\nx 1\n");
    return 0;
}

static void fake_ready(void *arg, admin_http_readiness *out)
{
    (void)arg;
    out->ready = true;
    out->role = "leader";
    out->reason = NULL;
}

static void fake_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    (void)arg;
    (void)body;
    (void)len;
    admin_http_reply_send(reply, 201, "{\"id\":1}");
}

static void fake_status(void *arg, const char *query, admin_http_reply *reply)
{
    (void)arg;
    (void)query;
    admin_http_reply_send(reply, 200, "{}");
}

static void fake_api(void *arg, const admin_http_api_request *req, admin_http_reply *reply)
{
    (void)arg;
    json_error_t e;
    json_t *segs = json_loads(req->segments, 0, &e);
    FUZZ_CHECK(segs && json_is_array(segs) && json_array_size(segs) > 0, "segments %s",
               req->segments);
    for (size_t i = 0; i < json_array_size(segs); i++)
        FUZZ_CHECK(json_is_string(json_array_get(segs, i)), "segment %zu of %s", i, req->segments);
    json_t *query = json_loads(req->query, JSON_REJECT_DUPLICATES, &e);
    FUZZ_CHECK(query && json_is_object(query), "query %s", req->query);
    const char *k;
    json_t *v;
    json_object_foreach(query, k, v) FUZZ_CHECK(json_is_string(v), "query value of %s", k);
    FUZZ_CHECK(!req->body || strlen(req->body) == req->body_len, "body length");
    FUZZ_CHECK(strcmp(req->actor, "token:fuzz") == 0 || strcmp(req->actor, "portal") == 0,
               "actor %s", req->actor);
    FUZZ_CHECK((strcmp(req->actor, "portal") == 0) == (req->portal_token != NULL), "portal");
    admin_http_api_answer a = {.status = 200,
                               .etag = req->if_match,
                               .location = req->idempotency_key,
                               .allow = req->portal_token,
                               .body = req->segments};
    admin_http_reply_api(reply, &a);
    json_decref(segs);
    json_decref(query);
}

static int server_port;
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;

static void *server_thread(void *arg)
{
    (void)arg;
    uv_loop_t loop;
    uv_loop_init(&loop);
    admin_http_options o = {.listen = "127.0.0.1:0",
                            .enqueue_token = "fuzz-token",
                            .status_token = "page:token",
                            .max_body_bytes = 4096,
                            .idle_timeout_ms = 500};
    admin_http_callbacks cb = {.render_metrics = fake_metrics,
                               .readiness = fake_ready,
                               .enqueue = fake_enqueue,
                               .status = fake_status,
                               .api = fake_api};
    admin_http *s = NULL;
    pgp_error err;
    if (admin_http_new(&loop, &o, &cb, &s, &err) != 0 || admin_http_start(s, &err) != 0) {
        fprintf(stderr, "fuzz_admin_http: cannot start the server: %s\n", err.msg);
        abort();
    }
    /* SHA-256 of "fuzz-api". */
    admin_http_token api = {.scopes = ADMIN_SCOPE_READ | ADMIN_SCOPE_WRITE, .name = "fuzz"};
    static const char hash[] = "344922e13b25e842f856d7a4be7e0f253ba41125e484138330e2ce4e378c212a";
    for (int i = 0; i < 32; i++)
        sscanf(hash + 2 * i, "%2hhx", &api.hash[i]);
    if (admin_http_set_api_tokens(s, &api, 1) != 0)
        abort();
    pthread_mutex_lock(&ready_lock);
    server_port = admin_http_port(s);
    pthread_cond_signal(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
    uv_run(&loop, UV_RUN_DEFAULT); /* for the life of the process */
    return NULL;
}

/* Open file descriptors of this process (the server runs in it): a leak shows here. */
static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own fd */
}

static bool status_ok(int status)
{
    static const int allowed[] = {100, 200, 201, 400, 401, 403, 404, 405, 408,
                                  411, 413, 415, 431, 500, 501, 503, 505};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (status == allowed[i])
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pthread_t thread;
    if (!server_port) {
        pthread_create(&thread, NULL, server_thread, NULL);
        pthread_mutex_lock(&ready_lock);
        while (!server_port)
            pthread_cond_wait(&ready_cond, &ready_lock);
        pthread_mutex_unlock(&ready_lock);
    }
    int fd = fuzz_connect_loopback(server_port, 2);
    int rc = fd >= 0 ? 0 : -1;
    FUZZ_CHECK(rc == 0, "the server stopped accepting connections: %s (%d fds open here)",
               strerror(errno), open_fds());
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server may close early (413, 431): fine */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    char buf[16];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t r = recv(fd, buf + got, sizeof buf - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    char rest[4096];
    while (recv(fd, rest, sizeof rest, 0) > 0) {
    }
    close(fd);
    if (got > 0) {
        FUZZ_CHECK(got >= 12 && memcmp(buf, "HTTP/1.1 ", 9) == 0, "not an HTTP/1.1 answer");
        int status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
        FUZZ_CHECK(status_ok(status), "unexpected status %d", status);
    }
    return 0;
}

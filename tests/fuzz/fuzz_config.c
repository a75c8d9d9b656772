/* fuzz_config.c - config_load_stream on arbitrary bytes (through fmemopen).
 *
 * Input: the INI file, bytes as they are (NULs, CRs, a BOM, overlong lines included).
 * Invariants, beyond "no crash, no sanitizer report, no leak":
 *   - the return is 0 or a negative errno code; on failure *cfg is left as it was and the
 *     message is non-empty, terminated and starts with the stream name;
 *   - on success cfg.path is the name, and config_dump's output, written back as INI
 *     ("[section]" then "key=value"; allow_cidrs and no_proxy one entry per line), loads again and
 * dumps to exactly the same text (so every stored value is one the loader accepts: bounds, enums,
 * lengths, ordering rules);
 *   - loading is deterministic (a second load of the same bytes gives the same result).
 */
#include "fuzz_util.h"

#include "config.h"

#include <stdbool.h>

static const char NAME[] = "fuzz.ini";

/* Loads size bytes; NULL data with size 0 is an empty file. */
static int load(const char *data, size_t size, pgp_config *cfg, pgp_error *err)
{
    /* fmemopen() refuses a zero-sized buffer on some libcs; an empty file is "" read as 0 bytes. */
    static char empty[1];
    FILE *f = fmemopen(size ? (void *)data : empty, size ? size : 1, "r");
    if (!f)
        abort();
    if (size == 0)
        (void)fgetc(f); /* consume the single NUL: the stream is now at EOF */
    int rc = config_load_stream(cfg, f, NAME, err);
    fclose(f);
    return rc;
}

/* config_dump into a malloc'd string. */
static char *dump(const pgp_config *cfg, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        abort();
    config_dump(cfg, f);
    fclose(f);
    *len = n;
    return buf;
}

/* "section.key = value" lines -> INI text. Values are written as "key=value" with no space so
 * inih's inline-comment rule (" ;" starts a comment) cannot apply where it did not before. */
static char *dump_to_ini(const char *d, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        abort();
    char section[64] = "";
    const char *p = d;
    while (*p) {
        const char *eol = strchr(p, '\n');
        FUZZ_CHECK(eol != NULL, "config_dump line without newline: '%s'", fuzz_show(p));
        const char *dot = memchr(p, '.', (size_t)(eol - p));
        const char *eq = strstr(p, " = ");
        FUZZ_CHECK(dot && eq && dot < eq && eq < eol,
                   "config_dump line not 'section.key = "
                   "value': '%.*s'",
                   (int)(eol - p), p);
        size_t slen = (size_t)(dot - p);
        FUZZ_CHECK(slen < sizeof section, "section name too long");
        if (strlen(section) != slen || memcmp(section, p, slen) != 0) {
            memcpy(section, p, slen);
            section[slen] = '\0';
            fprintf(f, "[%s]\n", section);
        }
        const char *key = dot + 1, *val = eq + 3;
        int klen = (int)(eq - key);
        if (((klen == 11 && strncmp(key, "allow_cidrs", 11) == 0) ||
             (klen == 8 && strncmp(key, "no_proxy", 8) == 0)) &&
            val < eol) {
            /* A list: one entry per line, as the docs say (a line holds at most 199 bytes). */
            for (const char *e = val; e < eol;) {
                const char *sep = memchr(e, ',', (size_t)(eol - e));
                const char *end = sep ? sep : eol;
                fprintf(f, "%.*s=%.*s\n", klen, key, (int)(end - e), e);
                e = sep ? sep + 1 : eol;
                while (e < eol && *e == ' ')
                    e++;
            }
        } else if (klen == 23 && strncmp(key, "operator_webhook_secret", 23) == 0 &&
                   strncmp(val, "(redacted)", 10) == 0) {
            /* Never dumped; any valid secret stands in for it (it dumps redacted again). */
            fprintf(f, "%.*s=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", klen, key);
        } else {
            fprintf(f, "%.*s=%.*s\n", klen, key, (int)(eol - val), val);
        }
        p = eol + 1;
    }
    fclose(f);
    *len = n;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size heap copy: ASan sees reads past the end. */
    char *in = malloc(size ? size : 1);
    if (!in)
        abort();
    if (size)
        memcpy(in, data, size);

    pgp_config cfg, before;
    memset(&cfg, 0xA5, sizeof cfg);
    before = cfg;
    pgp_error err;
    memset(&err, 0, sizeof err);
    int rc = load(in, size, &cfg, &err);
    FUZZ_CHECK(rc <= 0, "config_load_stream returned %d", rc);
    if (rc < 0) {
        FUZZ_CHECK(memcmp(&cfg, &before, sizeof cfg) == 0, "failed load (%s) changed *cfg",
                   fuzz_show(err.msg));
        FUZZ_CHECK(err.msg[0] != '\0' && strnlen(err.msg, sizeof err.msg) < sizeof err.msg,
                   "failed load without a message");
        FUZZ_CHECK(strncmp(err.msg, NAME, strlen(NAME)) == 0 || strstr(err.msg, NAME),
                   "error message does not name the file: '%s'", fuzz_show(err.msg));
#ifdef FUZZ_STRICT
        /* Finding F3 (README): config.h promises lines up to CONFIG_MAX_LINE (4096) bytes, but
         * inih's fixed buffer (200 in Debian) makes the real limit 199. */
        const char *tl = strstr(err.msg, "line too long (");
        if (tl) {
            size_t got = strtoul(tl + strlen("line too long ("), NULL, 10);
            FUZZ_CHECK(got > CONFIG_MAX_LINE, "a %zu-byte line was refused: %s", got,
                       fuzz_show(err.msg));
        }
#endif
        pgp_config cfg2 = before;
        pgp_error err2;
        int rc2 = load(in, size, &cfg2, &err2);
        FUZZ_CHECK(rc2 == rc && strcmp(err.msg, err2.msg) == 0, "second load differs: '%s'",
                   fuzz_show(err2.msg));
        free(in);
        return 0;
    }

    FUZZ_CHECK(strcmp(cfg.path, NAME) == 0, "path is '%s'", fuzz_show(cfg.path));
    size_t dlen, ilen, d2len;
    char *d1 = dump(&cfg, &dlen);
    char *ini = dump_to_ini(d1, &ilen);
    pgp_config again;
    config_defaults(&again);
    pgp_error err2;
    memset(&err2, 0, sizeof err2);
    int rc2 = load(ini, ilen, &again, &err2);
    FUZZ_CHECK(rc2 == 0, "the dump of an accepted config does not load: %s\n--- dump as INI:\n%s",
               fuzz_show(err2.msg), ini);
    char *d2 = dump(&again, &d2len);
    FUZZ_CHECK(dlen == d2len && memcmp(d1, d2, dlen) == 0,
               "dump does not round-trip\n--- first:\n%s--- second:\n%s", d1, d2);
    free(d1);
    free(d2);
    free(ini);
    free(in);
    return 0;
}

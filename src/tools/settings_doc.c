/* settings_doc - keeps the reference documentation of the receiver settings what the table in
 * src/receiver_settings.c says (receiver_settings.h).
 *
 *   settings_doc --check FILE...   exit 1, saying which block, when a generated block differs
 *   settings_doc --write FILE...   rewrite the generated blocks in place
 *
 * A generated block sits between a start line and an end line, in Markdown
 *   <!-- settings:NAME -->  ...  <!-- /settings -->
 * and in scdoc (a man page's source; ';' starts a comment)
 *   ; settings:NAME  ...  ; /settings
 * NAME is readme (the README's table), customer (pgpace(1)'s options of `customer set`),
 * routing (the options only endpoints take) or receiver-names (the receiver options, named).
 * --check also holds the table to its own rules: every help line at most RS_HELP_WIDTH
 * characters, every row documented (a column, the SQL call) and no option twice.
 */
#include "receiver_settings.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text of block `name` (owned), or NULL when there is no such block. */
static char *block_text(const char *name)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    bool known = true;
    if (strcmp(name, "readme") == 0)
        rs_markdown(out);
    else if (strcmp(name, "customer") == 0)
        rs_man(out, RS_CUSTOMER, 0, true);
    else if (strcmp(name, "routing") == 0)
        rs_man(out, RS_ROUTING, RS_CUSTOMER, true);
    else if (strcmp(name, "receiver-names") == 0)
        rs_man(out, RS_CUSTOMER, 0, false);
    else
        known = false;
    fclose(out);
    if (!known) {
        free(buf);
        return NULL;
    }
    return buf;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n < 4096)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* Checks (write false) or rewrites (write true) the generated blocks of one file; returns the
 * number of problems found. */
static int do_file(const char *path, bool write)
{
    char *text = read_file(path);
    if (!text) {
        fprintf(stderr, "settings_doc: cannot read %s\n", path);
        return 1;
    }
    char *out = NULL;
    size_t out_len = 0;
    FILE *o = open_memstream(&out, &out_len);
    int problems = 0, blocks = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p + 1) : strlen(p);
        fwrite(p, 1, len, o);
        const char *start = NULL, *end_marker = NULL;
        if (strncmp(p, "<!-- settings:", 14) == 0)
            start = p + 14, end_marker = "<!-- /settings -->";
        else if (strncmp(p, "; settings:", 11) == 0)
            start = p + 11, end_marker = "; /settings";
        p += len;
        if (!start)
            continue;
        char name[64];
        size_t nlen = strcspn(start, " \n");
        snprintf(name, sizeof name, "%.*s", (int)(nlen < 63 ? nlen : 63), start);
        const char *end = strstr(p, end_marker);
        char *want = block_text(name);
        if (!end || !want) {
            fprintf(stderr, "settings_doc: %s: block '%s' %s\n", path, name,
                    !want ? "is not a block this tool writes" : "has no end line");
            free(want);
            problems++;
            continue;
        }
        blocks++;
        if (strlen(want) != (size_t)(end - p) || strncmp(want, p, (size_t)(end - p)) != 0) {
            if (!write)
                fprintf(stderr,
                        "settings_doc: %s: the block '%s' is not what src/receiver_settings.c "
                        "says; run: BUILD/src/settings_doc --write %s\n",
                        path, name, path);
            problems += !write;
        }
        fputs(want, o);
        free(want);
        p = end;
    }
    fclose(o);
    if (blocks == 0) {
        fprintf(stderr, "settings_doc: %s holds no generated block\n", path);
        problems++;
    }
    if (write && problems == 0 && strcmp(out, text) != 0) {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(out, 1, out_len, f) != out_len || fclose(f) != 0) {
            fprintf(stderr, "settings_doc: cannot write %s\n", path);
            problems++;
        }
    }
    free(out);
    free(text);
    return problems;
}

/* The table's own rules. */
static int check_table(void)
{
    int problems = 0;
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        if (!s->column || !s->call) {
            fprintf(stderr, "settings_doc: --%s: no column or SQL call documented\n", s->name);
            problems++;
        }
        if (i == 0 && !s->help) {
            fprintf(stderr, "settings_doc: --%s: the first row needs a help\n", s->name);
            problems++;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->name, receiver_settings[j].name) == 0) {
                fprintf(stderr, "settings_doc: --%s is declared twice\n", s->name);
                problems++;
            }
        for (const char *h = s->help; h && *h;) {
            size_t len = strcspn(h, "\n");
            if (len > RS_HELP_WIDTH) {
                fprintf(stderr, "settings_doc: --%s: a help line of %zu characters (at most %d)\n",
                        s->name, len, RS_HELP_WIDTH);
                problems++;
            }
            h += len + (h[len] == '\n');
        }
    }
    return problems;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "--check") != 0 && strcmp(argv[1], "--write") != 0)) {
        fprintf(stderr, "usage: settings_doc --check|--write FILE...\n");
        return 2;
    }
    bool write = strcmp(argv[1], "--write") == 0;
    int problems = check_table();
    for (int i = 2; i < argc; i++)
        problems += do_file(argv[i], write);
    if (problems == 0 && !write)
        printf("settings_doc: %d file(s) match the table of %zu settings\n", argc - 2,
               receiver_settings_count);
    return problems ? 1 : 0;
}

/* embed_sql.c - build tool: turns the .sql files into C arrays (sql_embed.c / sql_embed.h).
 *
 * usage: embed_sql OUT.c OUT.h --migrations NNNN_name.sql... --queries name.sql...
 *                  [--functions NN_name.sql...]
 * Migrations must be numbered 1, 2, 3... without gaps; each query file becomes
 * `const char sql_q_<name>[]`, so a misspelt query name is a compile error, not a runtime one.
 *
 * A query may declare its shape in comment lines, so that the C code names positions instead of
 * counting them and the positions live in the same file as the SQL they index:
 *   -- @params: name name ...    one name per $n, in order ($1 first); checked against the
 *                                highest $n the text uses
 *   -- @columns: name name ...   the result's columns, in order (the test suite compares them
 *                                with what PostgreSQL describes for the prepared statement)
 * Either may span several lines (each adds names). They become, in sql_embed.h,
 *   enum { SQL_<NAME>_P_<PARAM>..., SQL_<NAME>_NPARAMS };
 *   enum { SQL_<NAME>_C_<COLUMN>..., SQL_<NAME>_NCOLS };
 * with sql_q_<name>_nparams for SQL_<NAME>_NPARAMS, and an entry of sql_query_shapes[].
 * Function files (sql/functions, re-applied by `pgpace migrate` whenever they change) become
 * `sql_functions[]` in the order given, which must be the order of their numbers, so that the
 * directory listing shows the order they are applied in.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Copies the file name without ".sql" into out, checking it is a C identifier tail. */
static int stem(const char *path, char *out, size_t outlen)
{
    const char *b = base_name(path);
    size_t n = strlen(b);
    if (n < 5 || strcmp(b + n - 4, ".sql") != 0 || n - 4 >= outlen) {
        fprintf(stderr, "embed_sql: %s: expected a NAME.sql file\n", path);
        return -1;
    }
    memcpy(out, b, n - 4);
    out[n - 4] = '\0';
    for (char *p = out; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '_') {
            fprintf(stderr, "embed_sql: %s: name must be [A-Za-z0-9_]\n", path);
            return -1;
        }
    }
    return 0;
}

/* Emits the file as a brace-enclosed byte list: string literals over 4095 bytes are not
 * portable C, and a byte list has no escaping pitfalls. */
static int emit_file(FILE *c, const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        perror(path);
        return -1;
    }
    int ch;
    size_t n = 0;
    fputs("{", c);
    while ((ch = fgetc(in)) != EOF) {
        if (ch == 0) {
            fprintf(stderr, "embed_sql: %s: NUL byte in SQL file\n", path);
            fclose(in);
            return -1;
        }
        /* Bytes above 127 (UTF-8 in comments) are cast: char may be signed. */
        fprintf(c, ch > 127 ? "%s(char)%d," : "%s%d,", n++ % 20 == 0 ? "\n    " : "", ch);
    }
    fputs("\n    0}", c);
    int err = ferror(in);
    fclose(in);
    return err ? -1 : 0;
}

#define SHAPE_MAX_NAMES 64
#define SHAPE_NAME_MAX  64

typedef struct name_list {
    char v[SHAPE_MAX_NAMES][SHAPE_NAME_MAX];
    int n;
} name_list;

typedef struct query_shape {
    char name[128];
    bool has_params, has_columns;
    name_list params, columns;
} query_shape;

/* Appends the names after "-- @params:" (or @columns) on one line. */
static int add_names(const char *path, const char *p, name_list *l)
{
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r')
            p++;
        if (!*p || *p == '\n')
            break;
        size_t n = 0;
        while (p[n] &&
               (islower((unsigned char)p[n]) || isdigit((unsigned char)p[n]) || p[n] == '_'))
            n++;
        if (n == 0 || n >= SHAPE_NAME_MAX || l->n >= SHAPE_MAX_NAMES ||
            (p[n] && !strchr(" \t,\r\n", p[n]))) {
            fprintf(stderr, "embed_sql: %s: shape names are [a-z0-9_], at most %d of %d chars\n",
                    path, SHAPE_MAX_NAMES, SHAPE_NAME_MAX - 1);
            return -1;
        }
        memcpy(l->v[l->n], p, n);
        l->v[l->n++][n] = '\0';
        p += n;
    }
    return 0;
}

/* The highest $n outside comments and string literals (queries use no dollar quoting). */
static int highest_param(const char *text)
{
    int max = 0;
    for (const char *p = text; *p; p++) {
        if (p[0] == '-' && p[1] == '-') {
            while (*p && *p != '\n')
                p++;
            if (!*p)
                break;
        } else if (*p == '\'') {
            for (p++; *p && !(*p == '\'' && p[1] != '\''); p += (*p == '\'' ? 2 : 1))
                ;
            if (!*p)
                break;
        } else if (*p == '$' && isdigit((unsigned char)p[1])) {
            int v = atoi(p + 1);
            if (v > max)
                max = v;
        }
    }
    return max;
}

static char *read_all(const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        perror(path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int ch;
    while (buf && (ch = fgetc(in)) != EOF) {
        if (n + 1 == cap) {
            char *v = realloc(buf, cap *= 2);
            if (!v) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = v;
        }
        buf[n++] = (char)ch;
    }
    fclose(in);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* Reads a query file's @params / @columns lines and checks @params against the text. */
static int read_shape(const char *path, query_shape *q)
{
    char *text = read_all(path);
    if (!text)
        return -1;
    int rc = 0;
    for (const char *line = text; rc == 0 && *line;) {
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, "--", 2) == 0) {
            p += 2;
            while (*p == ' ')
                p++;
            if (strncmp(p, "@params:", 8) == 0) {
                q->has_params = true;
                rc = add_names(path, p + 8, &q->params);
            } else if (strncmp(p, "@columns:", 9) == 0) {
                q->has_columns = true;
                rc = add_names(path, p + 9, &q->columns);
            }
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    int used = highest_param(text);
    if (rc == 0 && q->has_params && used != q->params.n) {
        fprintf(stderr, "embed_sql: %s: @params names %d parameters but the text uses $%d\n", path,
                q->params.n, used);
        rc = -1;
    }
    if (rc == 0 && !q->has_params && used > 0 && q->has_columns) {
        fprintf(stderr, "embed_sql: %s: @columns without @params, but the text uses $%d\n", path,
                used);
        rc = -1;
    }
    free(text);
    return rc;
}

static void upper(char *out, const char *in)
{
    while (*in)
        *out++ = (char)toupper((unsigned char)*in++);
    *out = '\0';
}

static void emit_enum(FILE *h, const char *stem_upper, const char *kind, const char *count,
                      const name_list *l)
{
    fprintf(h, "enum {\n");
    for (int i = 0; i < l->n; i++) {
        char u[SHAPE_NAME_MAX];
        upper(u, l->v[i]);
        fprintf(h, "    SQL_%s_%s_%s,\n", stem_upper, kind, u);
    }
    fprintf(h, "    SQL_%s_%s\n};\n", stem_upper, count);
}

/* The header's enums and the .c's shape table entry data for one query. */
static void emit_shape(FILE *c, FILE *h, const query_shape *q)
{
    char su[160];
    upper(su, q->name);
    fprintf(h, "/* %s.sql */\n", q->name);
    if (q->has_params) {
        emit_enum(h, su, "P", "NPARAMS", &q->params);
        /* Spelt like the text's name, for macros that paste it (sql_q_<name> ## _nparams). */
        fprintf(h, "#define sql_q_%s_nparams SQL_%s_NPARAMS\n", q->name, su);
    }
    if (q->has_columns) {
        emit_enum(h, su, "C", "NCOLS", &q->columns);
        fprintf(c, "static const char *const columns_%s[] = {", q->name);
        for (int i = 0; i < q->columns.n; i++)
            fprintf(c, "%s\"%s\"", i ? ", " : "", q->columns.v[i]);
        fprintf(c, "};\n");
    }
}
/* ---- --functions: repeatable function and view definitions --------------------------------- */

struct function_list {
    char names[256][128]; /* file names without .sql, in the order given */
    int n;
    long last_number; /* NN of the previous file */
};

/* Emits one function file as a static array and remembers its name; numbers must increase. */
static int function_file(FILE *c, struct function_list *fl, const char *path, const char *name)
{
    char *end;
    long number = strtol(name, &end, 10);
    if (end == name || *end != '_' || number <= fl->last_number || fl->n >= 256) {
        fprintf(stderr,
                "embed_sql: %s: function files are NN_name.sql, listed in increasing order of NN\n",
                path);
        return -1;
    }
    fl->last_number = number;
    memcpy(fl->names[fl->n], name, sizeof fl->names[0]);
    fprintf(c, "static const char function_%d[] = ", fl->n++);
    if (emit_file(c, path) != 0)
        return -1;
    fputs(";\n", c);
    return 0;
}

static void function_decls(FILE *h)
{
    fprintf(h, "struct sql_function {\n    const char *name;\n    const char *text;\n};\n"
               "extern const struct sql_function sql_functions[];\n"
               "extern const size_t sql_functions_count;\n");
}

static void function_table(FILE *c, const struct function_list *fl)
{
    fprintf(c, "const struct sql_function sql_functions[] = {\n");
    for (int i = 0; i < fl->n; i++)
        fprintf(c, "    {\"%s\", function_%d},\n", fl->names[i], i);
    if (fl->n == 0)
        fprintf(c, "    {0, 0},\n"); /* C has no empty initialiser list */
    fprintf(c, "};\nconst size_t sql_functions_count = %d;\n", fl->n);
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: embed_sql OUT.c OUT.h --migrations FILES... --queries FILES... "
                        "[--functions FILES...]\n");
        return 2;
    }
    FILE *c = fopen(argv[1], "w");
    FILE *h = fopen(argv[2], "w");
    if (!c || !h) {
        perror("embed_sql: output");
        return 1;
    }
    fprintf(h, "/* Generated by embed_sql from sql/. Do not edit. */\n"
               "#ifndef PGPACE_SQL_EMBED_H\n#define PGPACE_SQL_EMBED_H\n#include <stddef.h>\n"
               "struct sql_migration {\n    int version;\n    const char *name;\n"
               "    const char *text;\n};\n"
               "extern const struct sql_migration sql_migrations[];\n"
               "extern const size_t sql_migrations_count;\n"
               "/* Queries that declare their shape (-- @params: / -- @columns:). */\n"
               "struct sql_query_shape {\n    const char *name;\n    const char *text;\n"
               "    int nparams; /* -1: not declared */\n    int ncolumns; /* -1: not declared */\n"
               "    const char *const *columns;\n};\n"
               "extern const struct sql_query_shape sql_query_shapes[];\n"
               "extern const size_t sql_query_shapes_count;\n");
    function_decls(h);
    fprintf(c, "/* Generated by embed_sql from sql/. Do not edit. */\n#include \"sql_embed.h\"\n");

    int section = 0; /* 1 migrations, 2 queries, 3 functions */
    int expected_version = 1;
    char names[256][128];
    int n_migrations = 0;
    static query_shape shapes[256];
    int n_shapes = 0;
    struct function_list functions = {.last_number = -1};
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--migrations") == 0) {
            section = 1;
            continue;
        }
        if (strcmp(argv[i], "--queries") == 0) {
            section = 2;
            continue;
        }
        if (strcmp(argv[i], "--functions") == 0) {
            section = 3;
            continue;
        }
        char name[128];
        if (section == 0 || stem(argv[i], name, sizeof name) != 0)
            return 1;
        if (section == 3) {
            if (function_file(c, &functions, argv[i], name) != 0)
                return 1;
            continue;
        }
        if (section == 1) {
            int version = atoi(name);
            if (version != expected_version || n_migrations >= 256) {
                fprintf(stderr, "embed_sql: %s: expected migration number %d\n", argv[i],
                        expected_version);
                return 1;
            }
            expected_version++;
            memcpy(names[n_migrations++], name, sizeof name);
            fprintf(c, "static const char migration_%d[] = ", version);
        } else {
            query_shape *q = &shapes[n_shapes];
            memset(q, 0, sizeof *q);
            memcpy(q->name, name, sizeof name);
            if (read_shape(argv[i], q) != 0)
                return 1;
            if (q->has_params || q->has_columns) {
                if (n_shapes >= 255) {
                    fprintf(stderr, "embed_sql: too many query shapes\n");
                    return 1;
                }
                emit_shape(c, h, q);
                n_shapes++;
            }
            fprintf(h, "extern const char sql_q_%s[];\n", name);
            fprintf(c, "const char sql_q_%s[] = ", name);
        }
        if (emit_file(c, argv[i]) != 0)
            return 1;
        fputs(";\n", c);
    }
    fprintf(c, "const struct sql_migration sql_migrations[] = {\n");
    for (int i = 0; i < n_migrations; i++)
        fprintf(c, "    {%d, \"%s\", migration_%d},\n", i + 1, names[i], i + 1);
    fprintf(c, "};\nconst size_t sql_migrations_count = %d;\n", n_migrations);
    fprintf(c, "const struct sql_query_shape sql_query_shapes[] = {\n");
    for (int i = 0; i < n_shapes; i++) {
        const query_shape *q = &shapes[i];
        fprintf(c, "    {\"%s\", sql_q_%s, %d, %d, ", q->name, q->name,
                q->has_params ? q->params.n : -1, q->has_columns ? q->columns.n : -1);
        if (q->has_columns)
            fprintf(c, "columns_%s},\n", q->name);
        else
            fprintf(c, "NULL},\n");
    }
    if (n_shapes == 0)
        fprintf(c, "    {NULL, NULL, -1, -1, NULL},\n");
    fprintf(c, "};\nconst size_t sql_query_shapes_count = %d;\n", n_shapes);
    function_table(c, &functions);
    fprintf(h, "#endif\n");
    if (fclose(c) != 0 || fclose(h) != 0) {
        perror("embed_sql: write");
        return 1;
    }
    return 0;
}

/* receiver_settings.h - every setting of a receiver (a customer's own webhook, or one of its
 * endpoints), declared once.
 *
 * Contract: receiver_settings[] holds one row per command-line option of `pgpace customer set`
 * and `pgpace endpoint add|set`: its name, value form and range, default, help text, the
 * pgpace.customer column it ends up in and the SQL call that writes it (for most, a parameter of
 * sql/queries/customer_set.sql). Everything else reads the table: the option parser
 * (rs_long_options + rs_take turn argv into an rs_values), the cross-field rules (rs_check),
 * the --help text (rs_help), and the reference documentation (rs_markdown for the README's
 * table, rs_man for pgpace(1); `settings_doc` writes both and its test keeps them current).
 * Adding a setting is one row here (and its SQL, when it is a new column).
 *
 * Options whose value needs more than a range check (secrets, header lists, auth, OAuth2, the
 * client certificate files, the proxy, event patterns, the payload filter, limit windows) name
 * a small handler of their own in the row. No I/O but rs_check reading the OAuth2 client secret
 * file (or stdin) it was given; messages never quote a secret.
 */
#ifndef PGPACE_RECEIVER_SETTINGS_H
#define PGPACE_RECEIVER_SETTINGS_H

#include "common.h"
#include "sql_embed.h"
#include "validate.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/* Which commands take a setting (a bit set). */
enum {
    RS_CUSTOMER = 1 << 0,     /* pgpace customer set */
    RS_ENDPOINT_ADD = 1 << 1, /* pgpace endpoint add */
    RS_ENDPOINT_SET = 1 << 2, /* pgpace endpoint set */
    RS_RECEIVER = RS_CUSTOMER | RS_ENDPOINT_ADD | RS_ENDPOINT_SET,
    RS_ROUTING = RS_ENDPOINT_ADD | RS_ENDPOINT_SET,
};

/* How a value is read. */
typedef enum rs_kind {
    RS_FLAG,     /* no value: writes `value` to the parameter */
    RS_RATE,     /* a number per minute > 0 (validate_rate) */
    RS_INT,      /* an integer from min to max */
    RS_DOUBLE,   /* a decimal number within *range */
    RS_MODE,     /* spaced, batch or unlimited */
    RS_URL,      /* http:// or https:// (validate_url) */
    RS_DURATION, /* 90s, 15m, 2h, 3d (1 s to 365 d) */
    RS_CUSTOM,   /* the row's handler */
} rs_kind;

/* The parameters of customer_set.sql a setting fills, by their SQL_CUSTOMER_SET_P_* index. */
#define RS_NPARAMS SQL_CUSTOMER_SET_NPARAMS

typedef struct rs_values rs_values;
typedef struct receiver_setting receiver_setting;

/* A custom setting's handler: reads arg into v; 0, or -EINVAL with err naming the option. */
typedef int (*rs_handler)(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err);

struct receiver_setting {
    const char *name; /* the long option without "--" */
    const char *arg;  /* what follows it in the help ("R", "N|default"); NULL: a flag */
    unsigned scope;   /* RS_CUSTOMER | RS_ENDPOINT_ADD | RS_ENDPOINT_SET */
    rs_kind kind;
    long long min, max;        /* RS_INT */
    const double_range *range; /* RS_DOUBLE */
    const char *word;          /* a word accepted besides a value ("default", "none") */
    const char *word_value;    /* what it is in SQL ("0": the configured default / none) */
    int word_param;            /* the parameter the word sets instead (-1: `param`) */
    int param;                 /* customer_set.sql parameter (SQL_CUSTOMER_SET_P_*), or -1 */
    const char *value;         /* RS_FLAG: the value written to `param` */
    rs_handler handler;        /* RS_CUSTOM */
    /* Documentation: */
    const char *column; /* the pgpace.customer column(s) it writes */
    const char *call;   /* the SQL function that writes them */
    const char *deflt;  /* what it is when never set */
    const char *usage;  /* the option as the help spells it, when not "--name arg" */
    const char *help;   /* lines separated by '\n'; NULL: explained with the row before */
    int group;          /* the help's paragraph (rs_groups) */
};

extern const receiver_setting receiver_settings[];
extern const size_t receiver_settings_count;

/* What the options given say; NULL or false for each one not given. */
#define RS_EVENTS_MAX 64
#define RS_LIMITS_MAX 8 /* windows in a limit (pgpace.limits_error) */
struct rs_values {
    /* customer_set.sql's parameters ([SQL_CUSTOMER_SET_P_NAME] and [.._P_SECRETS] are the
     * caller's: the row's name and the secrets it works out from the ones below). */
    const char *param[RS_NPARAMS];
    char max_age[32];
    /* Signing secrets. */
    const char *secret; /* --secret, checked */
    bool rotate, retire;
    const char *key_type; /* "hmac" or "ed25519" */
    /* Extra headers. */
    const char *header_lines[VALIDATE_HEADERS_MAX];
    char header_names[VALIDATE_HEADERS_MAX][VALIDATE_HEADER_NAME_MAX + 1];
    size_t n_headers;
    bool clear_headers;
    char *headers; /* the array literal for SQL (rs_check; rs_values_free) */
    /* Receiver authentication. */
    bool auth_given, oauth2;
    validate_auth_parts auth;
    const char *oauth_url, *oauth_id, *oauth_secret_file, *oauth_scope;
    char oauth_secret[1027]; /* 1024 bytes, CRLF, and one more to see it is longer (wiped) */
    /* Mutual TLS and egress. */
    const char *cert_file, *key_file;
    bool clear_client_cert;
    const char *proxy; /* URL, "direct" or "default" */
    /* Limit windows: --limit as given (each may list several, separated by commas). */
    const char *limit_args[2 * RS_LIMITS_MAX]; /* room to say how many too many */
    size_t n_limit_args;
    bool no_limits;
    char *limits; /* the text[] literal for SQL (rs_check; rs_values_free) */
    /* Routing (endpoints). */
    char *events;           /* the text[] literal of --events ("{}": every kind) */
    const char *events_arg; /* --events as given */
    const char *filter;
    bool no_filter;
};

/* Fills `out` with the long options of the settings in `scope` (val = base + row index), after
 * `common` (NULL-terminated, e.g. CLI_COMMON_OPTIONS), and a terminating entry. Returns how
 * many entries were written before the terminator, or -1 when cap is too small. */
int rs_long_options(unsigned scope, const struct option *common, int base, struct option *out,
                    size_t cap);

/* Reads one option's value (row `index` of receiver_settings) into v. 0, or -EINVAL with a
 * message naming the option (a usage error). */
int rs_take(size_t index, const char *arg, rs_values *v, pgp_error *err) PGP_MUST_CHECK;

/* The rules between options, once all are read: --header or --clear-headers; --limit or
 * --no-limits (the windows of every --limit, at most RS_LIMITS_MAX, become one text[]); the
 * --oauth-* options with --auth oauth2 (and its client secret read from its file or stdin); both
 * --client-cert and --client-key, or --clear-client-cert; one of --secret, --rotate-secret,
 * --retire-old-secrets; --key-type only for a generated secret; --filter or --no-filter. Fills
 * the parameters the custom options make. 0, or -EINVAL (a usage error) or another negative
 * errno (out of memory) with err. */
int rs_check(rs_values *v, pgp_error *err) PGP_MUST_CHECK;

/* The windows of the --limit values args (each one window or several separated by commas,
 * blanks around them dropped) as a text[] literal, every element quoted: "{}" for none. More
 * than RS_LIMITS_MAX windows in all: "" with err naming --limit (a usage error); NULL when out
 * of memory. The caller frees the result. pgpace.limits_normalize checks each window. */
char *rs_limits_literal(const char *const *args, size_t n_args, pgp_error *err);

/* Whether any option that customer_set.sql writes was given. */
bool rs_any_param(const rs_values *v);

/* Wipes the secrets v holds and frees what rs_check allocated. */
void rs_values_free(rs_values *v);

/* The help's lines for the settings in `scope`, in the table's order, in paragraphs. */
void rs_help(FILE *out, unsigned scope);

/* The README's reference table (Markdown) of every setting. */
void rs_markdown(FILE *out);

/* pgpace(1)'s option list (scdoc) of the settings in `scope` but not in `exclude`: each with
 * its help when `full`, else their names in one paragraph. */
void rs_man(FILE *out, unsigned scope, unsigned exclude, bool full);

/* The longest line of a setting's help (the help starts in column 24 of 96). */
#define RS_HELP_WIDTH 72

#endif

/* cli_receiver.h - what `pgpace customer set|get` and `pgpace endpoint add|set|get` share: the
 * receiver settings (receiver_settings.h) read from argv, checked, and written to one row of
 * pgpace.customer (a customer, or an endpoint by its full name "customer/endpoint"), and a
 * row's settings printed.
 *
 * Contract: functions returning int return a CLI status (CLI_OK, CLI_FAILED, CLI_USAGE) and
 * have printed the error; CLI_HELP_SHOWN after printing the help. Secrets are never printed
 * but by cli_receiver_print with show, and never logged.
 */
#ifndef PGPACE_CLI_RECEIVER_H
#define PGPACE_CLI_RECEIVER_H

#include "cli.h"
#include "receiver_settings.h"

/* Reads the common options and the receiver settings of `scope` from argv (argv[0] is the
 * subcommand); on --help prints help_head, the settings' help and help_tail (may be NULL).
 * Leaves the positional arguments in argv[optind..argc-1], then runs rs_check. */
int cli_receiver_options(cli_ctx *ctx, int argc, char **argv, unsigned scope, const char *help_head,
                         const char *help_tail, rs_values *v);

/* The SSRF rules a URL's literal address can be judged by before anything is written
 * (netcheck_url_allowed with [delivery] allow_cidrs of the configuration this command reads):
 * CLI_OK, or the usage error printed, naming `flag`. */
int cli_receiver_url_check(cli_ctx *ctx, const char *flag, const char *url);

/* The signing secrets to write, as a text[] literal into secrets (secrets[0] == '\0': leave
 * them): the given one (--secret); a generated one when creating (current NULL) or rotating
 * (of --key-type's kind, else on rotation the newest secret's kind, else HMAC), put before the
 * current ones (at most 3 of which are kept); the newest only (--retire-old-secrets). The
 * generated secret goes to fresh (wipe it after use). */
#define CLI_SECRETS_MAX 600
#define CLI_SECRET_MAX  64
int cli_receiver_secrets(cli_ctx *ctx, const rs_values *v, const char *current,
                         char secrets[CLI_SECRETS_MAX], char fresh[CLI_SECRET_MAX]);

/* Writes the settings to row `name`: customer_set.sql (the parameters, secrets when not empty),
 * then the proxy (customer_set_proxy.sql) and the client certificate (read from its files and
 * checked first: customer_client_cert.sql). In a transaction of its own when it runs more than
 * one statement, unless in_tx (the caller's transaction). *created (if not NULL): whether
 * customer_set created the row. */
int cli_receiver_write(cli_ctx *ctx, const char *name, rs_values *v, const char *secrets,
                       bool in_tx, bool *created);

/* When the secret given or generated is an Ed25519 one: prints its public key, which the
 * receiver needs to verify v1a signatures. */
void cli_receiver_print_public_key(const char *secret);

/* Prints one row of customer_get.sql, a line per setting; secrets, header values, credentials
 * and the client key only with show. The fields named in `skip` (NULL-terminated) are left out. */
void cli_receiver_print(PGresult *res, bool show, const char *const *skip);

#endif

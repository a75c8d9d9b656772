/* trace_context.h - W3C Trace Context level 1 (traceparent, tracestate) as pgpace accepts it at
 * enqueue, checked before anything is sent (the CLI's --traceparent / --tracestate).
 *
 * Contract: the same rules, in the same words, as pgpace.trace_context_error
 * (sql/functions/05_enqueue.sql), which every enqueue path applies and which stays the
 * authority (the SQL and HTTP paths never pass through here); this copy exists so that the CLI
 * refuses a bad flag as a usage error (exit 2) naming the flag. Returns 0 when both values are
 * acceptable (NULL: absent), or -EINVAL with "<what>: <message>" in *err, `what` being
 * tp_what or ts_what for the value at fault. Pure: no I/O, no allocation; safe to fuzz.
 * - traceparent: version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits; version ff,
 *   an all-zero trace-id or parent-id refused; version 00 exactly 55 characters; a later
 *   version may append "-" and visible ASCII, at most 256 characters in all.
 * - tracestate: 1 to 32 non-empty list-members key=value, each key once, separated by commas
 *   with optional spaces or tabs around them, per the spec's key and value grammar; 1 to 512
 *   characters, not starting or ending with a space or tab; only beside a traceparent.
 */
#ifndef PGPACE_TRACE_CONTEXT_H
#define PGPACE_TRACE_CONTEXT_H

#include "common.h"

#define TRACEPARENT_MAX 256
#define TRACESTATE_MAX  512

int trace_context_check(const char *tp_what, const char *traceparent, const char *ts_what,
                        const char *tracestate, pgp_error *err) PGP_MUST_CHECK;

#endif

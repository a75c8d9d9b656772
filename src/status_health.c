/* status_health.c - the status page's reading of a customer's state (status_health.h). */
#include "status_health.h"

#include <math.h>

double status_state_key(unsigned problems)
{
    /* Each flag outranks all those below it together: the larger value is the worse set. */
    return -(double)problems;
}

/* Far enough that no estimate is near it, small enough that adding to it cannot overflow. */
#define ESTIMATE_MAX_US (INT64_MAX / 4)

int64_t status_disable_estimate(const status_streak *s, int64_t now_us)
{
    if (s->failing_since_us <= 0 || s->disable_after_us <= 0)
        return 0;
    if (s->disable_after_us > ESTIMATE_MAX_US - s->failing_since_us)
        return ESTIMATE_MAX_US;
    int64_t at = s->failing_since_us + s->disable_after_us;
    if (s->failures >= s->min_attempts)
        return at;
    int64_t span = now_us - s->counted_since_us;
    if (s->failures <= 0 || span <= 0)
        return 0;
    /* The remaining failures at failures/span each microsecond. */
    double more = ceil((double)(s->min_attempts - s->failures) * (double)span / s->failures);
    double reached = (double)now_us + more;
    int64_t when = reached >= (double)ESTIMATE_MAX_US ? ESTIMATE_MAX_US : (int64_t)reached;
    return when > at ? when : at;
}

/* gcra.c - GCRA spacing and batch credit; see gcra.h for the rules. */
#include "gcra.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>

/* Within this of a whole number, accumulated binary fractions (0.1 * 10) count as whole. */
#define CREDIT_EPSILON 1e-9

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Both operands are non-negative wherever this is used. */
static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return INT64_MAX;
    return r;
}

int64_t gcra_period_us(double rate_per_minute)
{
    if (!(rate_per_minute > 0))
        return -EINVAL;
    double t = 60e6 / rate_per_minute;
    /* Compare before converting: an out-of-range double to int64 conversion is undefined. */
    if (t >= (double)GCRA_PERIOD_MAX_US)
        return GCRA_PERIOD_MAX_US;
    int64_t period = llround(t);
    return period < 1 ? 1 : period;
}

int64_t gcra_tolerance_us(int64_t period_us, int burst)
{
    if (period_us < 1)
        period_us = 1;
    if (burst < 1)
        burst = 1;
    return sat_mul(period_us, (int64_t)burst - 1);
}

int64_t gcra_eligible_at(int64_t tat, int64_t period_us, int burst)
{
    return sat_sub(tat, gcra_tolerance_us(period_us, burst));
}

int gcra_take(int64_t *tat, int64_t now, int64_t period_us, int burst, int want)
{
    if (tat == NULL || period_us < 1 || burst < 1 || want < 0)
        return -EINVAL;
    int64_t tau = gcra_tolerance_us(period_us, burst);
    int64_t base = *tat > now ? *tat : now;
    /* Item k (from 0) conforms when base + k*T - tau <= now. Solved for k in closed form so a
     * large want costs nothing. base >= now, so the slack is at most tau. */
    int64_t slack = sat_sub(sat_add(now, tau), base);
    if (slack < 0)
        return 0;
    int64_t conforming = slack / period_us + 1;
    int n = conforming < want ? (int)conforming : want;
    if (n == 0)
        return 0;
    /* (n - 1) * T <= slack cannot overflow; adding in two steps keeps the result exact
     * whenever it is representable, even when n * T alone is not. */
    *tat = sat_add(sat_add(base, (int64_t)(n - 1) * period_us), period_us);
    return n;
}

double batch_default_cap(double rate_per_minute)
{
    return rate_per_minute > 1 ? rate_per_minute : 1;
}

int batch_allowance(double rate_per_minute, double *credit, int64_t ticks_elapsed,
                    double credit_cap)
{
    if (credit == NULL || !(rate_per_minute > 0) || !isfinite(rate_per_minute))
        return -EINVAL;
    batch_refund(credit, 0);
    if (ticks_elapsed <= 0)
        return 0;
    double cap = credit_cap > 0 ? credit_cap : batch_default_cap(rate_per_minute);
    if (cap < rate_per_minute)
        cap = rate_per_minute;
    double accrued = rate_per_minute * (double)ticks_elapsed;
    double total = *credit + (accrued < cap ? accrued : cap);
    double whole = floor(total + CREDIT_EPSILON);
    if (whole >= (double)INT_MAX) {
        /* Only absurd caps get here; the excess is dropped like any unused allowance. */
        *credit = 0;
        return INT_MAX;
    }
    double rest = total - whole;
    /* The epsilon may leave a hair below zero; that hair is exactly what was rounded up. */
    *credit = rest > 0 ? rest : 0;
    return (int)whole;
}

void batch_refund(double *credit, int unused)
{
    if (credit == NULL)
        return;
    double c = *credit;
    if (!(c >= 0) || !isfinite(c))
        c = 0;
    *credit = c - floor(c);
}
